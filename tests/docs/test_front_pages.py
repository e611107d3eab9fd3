"""The front pages (README.md, README.zh-CN.md): short, linked both ways, the same commands in both, every command
and output they show taken from the manual, and every link into the manual pointing at a page (and heading) there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGLISH = ROOT / "README.md"
CHINESE = ROOT / "README.zh-CN.md"
FRONT = [ENGLISH, CHINESE]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def commands(text: str) -> list[str]:
    """Every command of the page's bash blocks without its comment (the comments are translated), in order."""
    found = []
    for block in blocks(text, "bash"):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            command = " ".join(re.sub(r"(^|\s)#.*$", "", line).split())
            if command:
                found.append(command)
    return found


def manual_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").rglob("*.md")))


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (lower case, words joined by hyphens)."""
    words = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", words).strip("-")


def test_the_english_front_page_is_short() -> None:
    lines = ENGLISH.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the detail into docs/"
    first_screen = "\n".join(lines[:40])
    assert "make demo" in first_screen and "make test" in first_screen


@pytest.mark.parametrize("page", FRONT, ids=lambda p: p.name)
def test_each_front_page_links_to_the_other(page: Path) -> None:
    other = CHINESE if page == ENGLISH else ENGLISH
    assert f"]({other.name})" in "\n".join(page.read_text(encoding="utf-8").splitlines()[:5])


def test_both_front_pages_show_the_same_commands_and_outputs() -> None:
    english, chinese = (p.read_text(encoding="utf-8") for p in FRONT)
    assert commands(english) == commands(chinese)
    assert len(commands(english)) >= 10
    assert blocks(english, "")[0] == blocks(chinese, "")[0], "the demo's output differs"


def test_both_front_pages_link_to_the_same_manual_pages() -> None:
    english, chinese = (LINK.findall(p.read_text(encoding="utf-8")) for p in FRONT)
    assert sorted(set(e for e in english if e.startswith("docs/"))) == sorted(
        set(c for c in chinese if c.startswith("docs/"))
    )


def test_every_command_on_the_front_page_is_in_the_manual() -> None:
    manual = [
        " ".join(re.sub(r"(^|\s)#.*$", "", line).split()) for line in manual_text().replace("\\\n", " ").splitlines()
    ]
    for command in commands(ENGLISH.read_text(encoding="utf-8")):
        if command.startswith("make docs"):
            continue  # the manual's own command: the front page is where it is given
        assert command in manual, f"{command!r} is on the front page but in no manual page"


def test_the_demo_output_on_the_front_page_is_the_manuals() -> None:
    manual = (ROOT / "docs" / "index.md").read_text(encoding="utf-8").splitlines()
    for line in blocks(ENGLISH.read_text(encoding="utf-8"), "")[0].splitlines():
        assert line in manual, f"the front page shows {line!r}, which the manual's demo output does not"


@pytest.mark.parametrize("page", FRONT, ids=lambda p: p.name)
def test_every_local_link_points_at_a_file_and_heading(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).is_file(), f"{page.name} links to {path}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(encoding="utf-8"), flags=re.MULTILINE)
            assert anchor in {slug(h) for h in headings}, f"{page.name}: no heading {anchor!r} in {path}"
