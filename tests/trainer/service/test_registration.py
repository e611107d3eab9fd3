"""RegisterModel's path confined to the service's model folders: resolved first, so `..` and symlinks do not leave."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.service.registration import BadRegistration, registrable, registration_roots


def test_a_model_under_a_root_is_taken_and_anything_else_refused(tmp_path: Path) -> None:
    data, base, shared, home = (tmp_path / n for n in ("data", "base", "shared", "home"))
    for folder in (data / "trainings" / "t1" / "final", base, shared / "rm", home / "alice"):
        folder.mkdir(parents=True)
    (data / "escape").symlink_to(home / "alice")
    roots = registration_roots(data, str(base), [str(shared)])
    assert registration_roots(data, "org/hub-model", []) == (data.resolve(),)  # a Hub id is no folder here
    assert registrable(str(data / "trainings" / "t1" / "final"), roots) == str(data / "trainings" / "t1" / "final")
    assert registrable(str(base), roots) == str(base) and registrable(str(shared / "rm"), roots) == str(shared / "rm")
    for path in (str(home / "alice"), str(data / "escape"), f"{data}/../home/alice", "/etc", "", "a\0b"):
        with pytest.raises(BadRegistration, match="path: "):
            registrable(path, roots)
