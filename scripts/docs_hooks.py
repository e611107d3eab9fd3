"""MkDocs hook (mkdocs.yml `hooks`): adds the references scripts/docs_reference.py writes from the code.

The pages exist only in the built site; nothing generated is committed, so nothing can go stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

import docs_reference  # noqa: E402  (after the path: a script folder, not a package)
from mkdocs.structure.files import File, Files  # noqa: E402


def on_files(files: Files, config: Any) -> Files:
    for page, build in docs_reference.PAGES.items():
        files.append(File.generated(config, page, content=build()))
    return files
