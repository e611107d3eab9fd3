"""`cheems models register|list|promote|rollback|reject` on a real SQLite store: one line per error, nothing
stored by a refused registration, the JSON listing's contract, and every step recorded with its person."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from cheems_cli.main import app
from services.store import lifecycle
from services.store.db import StoreConfig, create_engine_for, session_scope


def test_the_lifecycle_from_the_command_line(tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    db, runner = f"sqlite:///{tmp_path / 'cheems.db'}", CliRunner()

    def cheems(*args: str) -> tuple[int, str]:
        result = runner.invoke(app, ["models", *args, "--db", db])
        assert "Traceback" not in result.output
        return result.exit_code, result.output

    code, out = cheems("register", str(tiny_checkpoint()), "--id", "rm-base", "--as", "ann")
    assert (code, out.strip()) == (0, "rm-base")
    code, out = cheems("register", str(tiny_checkpoint(seed=3)))
    assert code == 0 and out.strip().startswith("rm-")
    second = out.strip()
    (tmp_path / "not-a-model").mkdir()
    for bad, why in [(str(tmp_path / "not-a-model"), "no config.json"), (str(tmp_path / "nowhere"), "not a directory")]:
        code, out = cheems("register", bad)
        assert code == 2 and out.startswith("error: ") and why in out
    code, out = cheems("register", str(tiny_checkpoint()), "--id", "rm-base")
    assert code != 0 and "already registered" in out

    code, out = cheems("list", "--json")
    listed = json.loads(out)
    assert [m["id"] for m in listed] == [second, "rm-base"]  # newest first; the refused ones are not there
    assert listed[1] == {
        "id": "rm-base",
        "state": "candidate",
        "aliases": [],
        "overall": None,
        "path": str(tiny_checkpoint().resolve()),
        "source": "registered",
        "created_at": listed[1]["created_at"],
    }

    code, out = cheems("promote", "rm-base", "--as", "ann", "--reason", "checked by hand")
    assert code == 0 and out.splitlines() == [
        "rm-base: candidate -> production (checked by hand)",
        "production: rm-base",
    ]
    code, out = cheems("rollback")
    assert code != 0 and "no earlier production model" in out
    assert cheems("promote", second)[0] == 0
    code, out = cheems("rollback", "--as", "bo")
    assert code == 0 and out.splitlines()[-1] == "production: rm-base"
    code, out = cheems("reject", "rm-base", "--reason", "x")
    assert code != 0 and "is production" in out
    code, out = cheems("reject", second, "--reason", "prefers long answers")
    assert code == 0 and out.splitlines()[0] == f"{second}: evaluated -> rejected (prefers long answers)"
    code, out = cheems("promote", second)
    assert code != 0 and "--force" in out
    code, out = cheems("promote", "rm-nobody")
    assert code != 0 and "no model 'rm-nobody'" in out

    states = {m["id"]: (m["state"], m["aliases"]) for m in json.loads(cheems("list", "--json")[1])}
    assert states == {"rm-base": ("production", ["production"]), second: ("rejected", [])}
    engine = create_engine_for(StoreConfig(db))
    try:
        with session_scope(engine) as session:
            steps = [(t.model_id, t.action, t.actor) for t in reversed(lifecycle.transitions(session))]
    finally:
        engine.dispose()
    assert steps[0] == ("rm-base", "registered", "person:ann")
    assert ("rm-base", "rolled_back", "person:bo") in steps and steps[-1][1] == "rejected"
