"""Download the wheels Cheems needs on an offline CUDA host, on a machine that reaches a package index.

    make wheelhouse PYTHON_VERSION=3.12        # = python scripts/wheelhouse.py --python-version 3.12
    # then copy the repository with wheelhouse/ to the host; there, with no network (docs/gpu-host.md, "On a GPU host
    # with no network"), with the Python that holds torch:
    python3 -m pip install --no-index --find-links wheelhouse -e . grpcio-tools
    python3 -m cheems.protogen .

What lands in wheelhouse/ (manylinux x86_64 wheels for that CPython, at constraints.txt's versions): every
package `pip install -e .` needs (pyproject's dependencies and each wheel's own requirements, followed for
that Python), the build backend pip builds the project with, and grpcio-tools, which generates cheems.v1
there. What stays out: what a CUDA host ships
(HOST_SHIPS) and what only they need: their requirements are never followed, so torch's nvidia-* CUDA
libraries and triton, huggingface-hub's hf-xet and fsspec never land unless a package of ours needs
them by another way; a small one that does (typing-extensions, packaging, tqdm...) is carried, and pip on
the host keeps the host's copy where it satisfies the requirement.

Each wheel's requirements are read from the wheel itself (METADATA), so the list is the one pip will
check on the host, markers evaluated for the target Python, not this machine's. Wheels of other packages
or versions already in the folder are removed: the folder holds one version of each.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable, Iterable
from email.parser import HeaderParser
from pathlib import Path

from packaging import tags
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
# What the CUDA hosts' images ship (torch with its CUDA libraries, and the stack around it), at versions of
# their own that pyproject's ranges admit. grpcio and protobuf ship there too, but not at our pins (tritonclient
# needs protobuf<7; cheems.v1 is generated for 6.33): they are carried, and pip replaces the host's.
HOST_SHIPS = frozenset(
    map(canonicalize_name, ["torch", "numpy", "transformers", "tokenizers", "safetensors", "huggingface-hub"])
)
# cheems.v1 is generated, never committed: the host runs `python -m cheems.protogen .` with it (a dev dependency)
GENERATOR = "grpcio-tools"
# A host that runs PyPI's torch (2.6 and later) has glibc 2.28 or newer: wheels up to manylinux_2_28 run on it.
DEFAULT_GLIBC = "2.28"

# name == version pairs asked for -> each one's Requires-Dist lines
Fetch = Callable[[list[tuple[NormalizedName, str]]], dict[NormalizedName, list[str]]]


class WheelhouseError(Exception):
    """A requirement the wheelhouse cannot satisfy (no pin, a pin outside its range, no wheel)."""


def read_pins(text: str) -> dict[NormalizedName, str]:
    """constraints.txt's `name==version` lines, by canonical name."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def dockerfile_arg(text: str, name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", text, re.M)
    if not match:
        raise WheelhouseError(f"docker/Dockerfile has no ARG {name}=...")
    return match.group(1)


def root_requirements(pyproject: dict, extras: Iterable[str] = ()) -> list[Requirement]:
    """What `pip install -e .[extras]` asks for (the build backend, the dependencies, the extras'), and
    GENERATOR."""
    project = pyproject["project"]
    lines = [*pyproject["build-system"]["requires"], *project["dependencies"], GENERATOR]
    for extra in extras:
        if extra not in project.get("optional-dependencies", {}):
            raise WheelhouseError(f"pyproject.toml has no extra {extra!r}")
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def target_environment(python_version: str) -> dict[str, str]:
    """Marker variables of CPython `python_version` on Linux x86_64."""
    short = ".".join(python_version.split(".")[:2])
    full = python_version if python_version.count(".") == 2 else f"{short}.0"
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_system": "Linux",
        "python_full_version": full,
        "python_version": short,
        "sys_platform": "linux",
    }


def applies(requirement: Requirement, env: dict[str, str], extras: Iterable[str]) -> bool:
    """Whether `requirement` (a Requires-Dist line of a package installed with `extras`) is needed there."""
    marker = requirement.marker
    return marker is None or any(marker.evaluate({**env, "extra": extra}) for extra in ["", *extras])


def resolve(
    roots: list[Requirement], pins: dict[NormalizedName, str], env: dict[str, str], fetch: Fetch
) -> dict[NormalizedName, str]:
    """Every package needed outside HOST_SHIPS, at its pin: a breadth-first walk of the wheels' requirements."""
    chosen: dict[NormalizedName, str] = {}
    extras: dict[NormalizedName, set[str]] = {}
    requires: dict[NormalizedName, list[str]] = {}
    pending = [(req, "pyproject.toml") for req in roots]
    while pending:
        wanted: set[NormalizedName] = set()
        for req, needed_by in pending:
            name = canonicalize_name(req.name)
            if name in HOST_SHIPS:
                continue
            version = pin_for(req, needed_by, pins)
            added = set(req.extras) - extras.get(name, set())
            if name not in chosen or added:
                chosen[name] = version
                extras.setdefault(name, set()).update(req.extras)
                wanted.add(name)
        requires.update(fetch(sorted((n, chosen[n]) for n in wanted if n not in requires)))
        pending = [
            (Requirement(line), name)
            for name in sorted(wanted)
            for line in requires[name]
            if applies(Requirement(line), env, extras[name])
        ]
    return chosen


def pin_for(req: Requirement, needed_by: str, pins: dict[NormalizedName, str]) -> str:
    name = canonicalize_name(req.name)
    if name not in pins:
        raise WheelhouseError(f"{req.name} (needed by {needed_by}) has no pin in constraints.txt: run `make lock`")
    if not req.specifier.contains(pins[name], prereleases=True):
        raise WheelhouseError(f"{needed_by} needs {req}, constraints.txt pins {name}=={pins[name]}")
    return pins[name]


def platforms(glibc: str) -> list[str]:
    """manylinux tags a host of that glibc runs, newest first (pip matches each tag exactly)."""
    newest = int(glibc.split(".")[1])
    legacy = {17: "manylinux2014_x86_64", 12: "manylinux2010_x86_64", 5: "manylinux1_x86_64"}
    found = []
    for minor in range(newest, 4, -1):
        found.append(f"manylinux_2_{minor}_x86_64")
        if minor in legacy:
            found.append(legacy[minor])
    return found


def download_command(
    packages: list[tuple[NormalizedName, str]], dest: Path, python_version: str, glibc: str
) -> list[str]:
    """`pip download` of exactly these wheels (--no-deps: `resolve` follows their requirements itself)."""
    short = ".".join(python_version.split(".")[:2])
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", short, "--implementation", "cp", "--dest", str(dest)]
    for platform in platforms(glibc):
        command += ["--platform", platform]
    return command + [f"{name}=={version}" for name, version in packages]


def compatible_tags(python_version: str, glibc: str) -> set[tags.Tag]:
    version = tuple(int(p) for p in python_version.split(".")[:2])
    plats = platforms(glibc)
    interpreter = f"cp{version[0]}{version[1]}"
    return {*tags.cpython_tags(version, platforms=plats), *tags.compatible_tags(version, interpreter, plats)}


def wheels_in(dest: Path, python_version: str, glibc: str) -> dict[tuple[NormalizedName, str], Path]:
    """The folder's wheels that run on the target, by (name, version)."""
    usable = compatible_tags(python_version, glibc)
    found = {}
    for path in sorted(dest.glob("*.whl")):
        name, version, _, wheel_tags = parse_wheel_filename(path.name)
        if wheel_tags & usable:
            found[(name, str(version))] = path
    return found


def requires_dist(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines, from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        headers = HeaderParser().parsestr(archive.read(metadata).decode())
    return headers.get_all("Requires-Dist") or []


def pip_fetch(dest: Path, python_version: str, glibc: str) -> Fetch:
    def fetch(packages: list[tuple[NormalizedName, str]]) -> dict[NormalizedName, list[str]]:
        if not packages:
            return {}
        done = subprocess.run(download_command(packages, dest, python_version, glibc), check=False)
        if done.returncode:
            raise WheelhouseError(
                f"pip download failed (above): a package may have no wheel for CPython {python_version} "
                f"on manylinux_2_{glibc.split('.')[1]} x86_64 (--glibc raises the newest glibc accepted)"
            )
        wheels = wheels_in(dest, python_version, glibc)
        return {name: requires_dist(wheels[(name, version)]) for name, version in packages}

    return fetch


def build(
    root: Path, dest: Path, python_version: str, glibc: str = DEFAULT_GLIBC, extras: Iterable[str] = ()
) -> dict[NormalizedName, str]:
    """Fill `dest`; returns what it holds (name -> version)."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    admitted = SpecifierSet(pyproject["project"].get("requires-python", ""))
    if not admitted.contains(target_environment(python_version)["python_full_version"]):
        raise WheelhouseError(f"pyproject.toml's requires-python ({admitted}) excludes Python {python_version}")
    pins = read_pins((root / "constraints.txt").read_text())
    # The build backend is pinned where the image builds the project; constraints.txt (pip freeze) omits it.
    dockerfile = (root / "docker" / "Dockerfile").read_text()
    pins[canonicalize_name("setuptools")] = dockerfile_arg(dockerfile, "SETUPTOOLS_VERSION")
    dest.mkdir(parents=True, exist_ok=True)
    env = target_environment(python_version)
    chosen = resolve(root_requirements(pyproject, extras), pins, env, pip_fetch(dest, python_version, glibc))
    keep = {
        path for (name, version), path in wheels_in(dest, python_version, glibc).items() if chosen.get(name) == version
    }
    for path in set(dest.glob("*.whl")) - keep:  # other packages or versions, or for another Python
        path.unlink()
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", default="3.12", help="The host's Python, e.g. 3.12 (default).")
    parser.add_argument("--dest", type=Path, default=ROOT / "wheelhouse", help="Folder to fill (default wheelhouse/).")
    parser.add_argument("--glibc", default=DEFAULT_GLIBC, help="The newest manylinux glibc to accept (default 2.28).")
    parser.add_argument("--extra", action="append", default=[], help="Also an extra of pyproject.toml's (repeat).")
    parser.add_argument("--project", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        chosen = build(args.project, args.dest, args.python_version, args.glibc, args.extra)
    except WheelhouseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    size = sum(p.stat().st_size for p in args.dest.glob("*.whl"))
    print(f"{len(chosen)} wheels, {size / 2**20:.1f} MiB in {args.dest} for CPython {args.python_version}")
    print(f"left to the host: {', '.join(sorted(HOST_SHIPS))} (and what only they need)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
