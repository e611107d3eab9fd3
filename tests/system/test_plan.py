"""The plan `cheems up` runs: every process a real `cheems` command, ports in one block, the right order."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheems.roles import SERVICE
from system.plan import SystemConfig, addresses, plan
from tests.k8s.test_consistency import resolve


def test_start_order_and_the_ports_of_a_block(tmp_path: Path) -> None:
    config = SystemConfig(data_dir=tmp_path, judge_url="http://127.0.0.1:9/v1", bench=(Path("open.jsonl"),),
                          ports_from=20000, make_base_model=True)  # fmt: skip
    names = [p.name for p in plan(config)]
    assert names == ["broker", "migrations", "base-model", "ingestion", "annotation", "judge", "training", "scorer",
                     "eval-worker", "eval-sink", "evaluation"]  # fmt: skip
    ports = [p.port for p in plan(config) if p.port]
    assert len(set(ports)) == len(ports) and all(20000 <= port < 20100 for port in ports)
    assert set(addresses(config)) == {n for n in names if n not in ("migrations", "base-model")}
    assert all(f"sqlite:///{tmp_path.resolve()}/cheems.db" in p.args for p in plan(config) if "--db" in p.args)


def test_every_process_gets_its_account_by_a_file_never_a_token(tmp_path: Path) -> None:
    config = SystemConfig(data_dir=tmp_path, judge_url="http://127.0.0.1:9/v1", bench=(Path("open.jsonl"),))
    by_name = {p.name: p.args for p in plan(config)}
    worker = by_name["eval-worker"]
    assert worker[worker.index("--token-file") + 1] == str(tmp_path / "accounts" / "eval-worker.token")
    assert "--accounts" in by_name["scorer"]  # the store's accounts that score: the eval worker's among them
    assert not any(a in ("--token", "--api-key") or a.startswith("chm_") for args in by_name.values() for a in args)


def test_the_judge_calls_the_annotation_service_with_its_own_account_and_nothing_else(tmp_path: Path) -> None:
    """No store, no broker: the annotation service's address and the token file of `judge` (role service), which
    `cheems up` makes; the annotation service opens the pairs of the AI sources."""
    config = SystemConfig(data_dir=tmp_path, judge_url="http://127.0.0.1:9/v1", ai_sources="gpt*", ports_from=20000)
    by_name = {p.name: p for p in plan(config)}
    judge, annotation = by_name["judge"].args, by_name["annotation"]
    assert judge[judge.index("--token-file") + 1] == str(tmp_path / "accounts" / "judge.token")
    assert judge[judge.index("--annotation-url") + 1] == f"127.0.0.1:{annotation.port}"
    assert not {"--db", "--bootstrap"} & set(judge)
    assert annotation.args[annotation.args.index("--ai-sources") + 1] == "gpt*"
    assert config.account_roles["judge"] == SERVICE


def test_without_a_judge_there_is_no_judge_worker_nor_pair_tasks_nor_its_account(tmp_path: Path) -> None:
    config = SystemConfig(data_dir=tmp_path)
    assert "judge" not in [p.name for p in plan(config)] and "judge" not in config.account_roles
    assert "--ai-sources" not in next(p.args for p in plan(config) if p.name == "annotation")


@pytest.mark.parametrize("judge", ["", "http://127.0.0.1:9/v1"])
def test_every_command_line_parses_with_the_real_cli(tmp_path: Path, judge: str) -> None:
    config = SystemConfig(data_dir=tmp_path, judge_url=judge, judge_key_file=str(tmp_path / "key"),
                          judge_both_orders=True, bench=(Path("open.jsonl"),), training_overrides=("epochs=1",),
                          make_base_model=True)  # fmt: skip
    for process in plan(config):
        resolve(list(process.args))  # fails the test on an unknown command, option or value


def test_bad_settings_name_the_field() -> None:
    for field, value in (("auto_after", -1), ("nproc", 0), ("ports_from", 65500)):
        with pytest.raises(ValueError, match=field):
            SystemConfig(**{field: value})  # type: ignore[arg-type]


def test_the_annotation_service_exports_under_the_data_directory(tmp_path: Path) -> None:
    annotation = next(p.args for p in plan(SystemConfig(data_dir=tmp_path)) if p.name == "annotation")
    assert annotation[annotation.index("--export-dir") + 1] == str(tmp_path / "exports")
