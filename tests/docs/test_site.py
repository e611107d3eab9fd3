"""The manual (mkdocs.yml, docs/) builds with `mkdocs build --strict`: a broken link or anchor, a page missing from
the nav, a reference that no longer generates or a docstring mkdocstrings cannot read fails here, in `make test`.
The build reads nothing from the network (Material's `font: false`: no Google Fonts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(ROOT / "mkdocs.yml")]
    done = subprocess.run([*build, "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_every_page_in_docs_is_built_and_in_the_nav(site: Path) -> None:
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(entries: list[object]) -> list[str]:
        found = []
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found += pages(value) if isinstance(value, list) else [str(value)]
        return found

    in_nav = set(pages(config["nav"]))
    written = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert written <= in_nav, f"pages not in mkdocs.yml's nav: {sorted(written - in_nav)}"
    for page in in_nav:
        built = site / (page.removesuffix(".md") + "/index.html" if page != "index.md" else "index.html")
        assert built.is_file(), f"{page} was not built"


def test_the_generated_references_are_in_the_site(site: Path) -> None:
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "cheems train" in cli and "--nproc" in cli
    grpc = (site / "reference" / "grpc" / "index.html").read_text(encoding="utf-8")
    assert "RewardService" in grpc and "ScoreBatch" in grpc
    settings = (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    assert "CHEEMS_DATABASE_URL" in settings and "CHEEMS_SCORER_BACKEND" in settings and "lora_rank" in settings
    client = (site / "reference" / "client" / "index.html").read_text(encoding="utf-8")
    assert "AsyncRewardClient" in client  # mkdocstrings rendered the module


def test_nothing_is_fetched_from_another_host(site: Path) -> None:
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, page
