"""The build machine's pip configuration, for pip inside an image build (standard library only).

    python3 docker/pip_config.py OUT.conf   # writes OUT.conf, prints the local paths it names

Reads what `pip config list` shows here (the files and the PIP_* variables, the variables winning),
writes it as one pip.conf and prints, one a line, the local files and folders it refers to: wheel
folders (find-links), file:// indexes, the CA bundle, constraint files. docker/build.sh mounts the
file as /etc/pip.conf and each path at the same place, read-only, for the RUN steps of the build,
so pip there finds what `make setup` finds here.
"""

from __future__ import annotations

import ast
import configparser
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

# Options that describe this machine's pip run, not where packages come from
SKIPPED = {"cache-dir", "log", "log-file", "src", "target", "prefix", "root", "user", "report", "require-virtualenv"}
INDEX_OPTIONS = {"index-url", "extra-index-url"}


def pip_settings(python: str) -> dict[str, dict[str, str]]:
    """{section: {option: value}} from `pip config list`; `:env:` values override [global]."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    sections: dict[str, dict[str, str]] = {}
    env: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or "." not in key:
            continue
        section, option = key.rsplit(".", 1)
        value = str(ast.literal_eval(raw))
        if option in SKIPPED:
            continue
        if section == ":env:":
            env[option] = value
        else:
            sections.setdefault(section, {})[option] = value
    sections.setdefault("global", {}).update(env)
    return sections


def local_paths(sections: dict[str, dict[str, str]]) -> list[Path]:
    """Existing local files and folders the settings name; an index's `simple/` brings its parent."""
    found: set[Path] = set()
    for options in sections.values():
        for option, value in options.items():
            for token in value.split():
                path = Path(unquote(urlparse(token).path)) if token.startswith("file:") else Path(token)
                if not path.is_absolute() or not path.exists():
                    continue
                if option in INDEX_OPTIONS and path.name == "simple":
                    path = path.parent  # the index's pages link to ../../files/...
                found.add(Path(os.path.normpath(path)))  # not resolved: mounted where the setting names it
    return sorted(p for p in found if not any(q != p and q in p.parents for q in found))


def write_conf(sections: dict[str, dict[str, str]], out: Path) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    for section, options in sections.items():
        parser[section] = options
    with out.open("w") as handle:
        handle.write("# The build machine's pip configuration (docker/pip_config.py)\n")
        parser.write(handle)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    sections = pip_settings(sys.executable)
    write_conf(sections, Path(argv[0]))
    for path in local_paths(sections):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
