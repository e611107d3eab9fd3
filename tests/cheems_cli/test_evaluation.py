"""`cheems eval` for a generative judge (--judge-url) and on RewardBench rows, as a user runs it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cheems.formats.cheemsbench import read_bench
from cheems.formats.rewardbench import read_rewardbench
from cheems_cli.main import app
from services.annotation.simulation.judge import JudgeServer, SimulatedJudge, SimulatedJudgeConfig
from tests.evaluator.judging.chat_server import ChatServer, prefer_longer

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
BENCH = [SAMPLE / "open.jsonl", SAMPLE / "human.jsonl"]
ROWS = [
    {"prompt": "你好吗？", "chosen": "我很好，谢谢关心。", "rejected": "好", "subset": "chat-easy", "id": 1},
    {"prompt": "天空的颜色？", "chosen": "蓝色", "rejected": "天空是绿色的哦", "subset": "chat-hard", "id": 2},
    {"prompt": "1+1=?", "chosen": "等于二", "rejected": "三", "subset": "math", "id": 3},
    {"prompt": "1+2=?", "chosen": "3", "rejected": "等于四", "subset": "math", "id": 4},
]


def run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["eval", *map(str, args)], env={"COLUMNS": "300"})  # usage errors on one line
    return result.exit_code, result.output


@pytest.fixture
def rewardbench(tmp_path: Path) -> Path:
    path = tmp_path / "rb.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS), encoding="utf-8")
    return path


def judge_args(url: str, *more: str | Path) -> list[str | Path]:
    return ["--judge-url", url, "--judge-model", "judge-7b", "--concurrency", "4", *more]


def test_a_judge_that_knows_the_ranks_scores_one(tmp_path: Path) -> None:
    judge = SimulatedJudge([i for path in BENCH for i in read_bench(path)], SimulatedJudgeConfig(noise=0.0))
    with JudgeServer(judge) as server:
        code, out = run(*BENCH, *judge_args(server.base_url, "--json", tmp_path / "j.json", "--report", tmp_path / "r"))
    assert code == 0, out
    assert "Generative judge judge-7b" in out and "Inconsistent" in out and "Overall" in out
    written = json.loads((tmp_path / "j.json").read_text(encoding="utf-8"))
    assert written["overall"] == 1.0 and written["subsets"]["open"]["ece"] is None
    pairs = written["subsets"]["open"]["pairs"] + written["subsets"]["human"]["pairs"]
    assert written["judge"]["outcomes"]["right"] == written["judge"]["pairs"] == pairs
    assert written["judge"]["calls"] == 2 * pairs and written["judge"]["model"] == "judge-7b"
    report = json.loads((tmp_path / "r" / "results.json").read_text(encoding="utf-8"))
    assert report["judge"] == written["judge"]
    assert "## Verdicts" in (tmp_path / "r" / "README.md").read_text(encoding="utf-8")


def test_garbage_answers_are_counted_unparseable(tmp_path: Path) -> None:
    with ChatServer(lambda prompt: "<think>嗯……</think> 都挺好") as server:
        code, out = run(BENCH[0], *judge_args(server.base_url, "--json", tmp_path / "j.json"))
    assert code == 0, out
    written = json.loads((tmp_path / "j.json").read_text(encoding="utf-8"))
    assert written["judge"]["outcomes"]["unparseable"] == written["judge"]["pairs"] > 0
    assert written["subsets"]["open"]["accuracy"] == 0.0
    assert len(server.prompts) == 3 * written["judge"]["calls"]  # each call asked twice more


def test_an_unreachable_judge_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    cmd = [
        sys.executable,
        "-m",
        "cheems_cli",
        "eval",
        str(BENCH[0]),
        *map(str, judge_args(url, "--judge-retries", "0")),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr
    assert f"error: {url}/chat/completions" in done.stderr and "Traceback" not in done.stderr


def test_the_api_key_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch, rewardbench: Path) -> None:
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-test-9")
    with ChatServer(prefer_longer) as server:
        code, out = run(rewardbench, *judge_args(server.base_url, "--judge-api-key-env", "MY_JUDGE_KEY"))
    assert code == 0, out
    assert set(server.auth) == {"Bearer sk-test-9"}
    monkeypatch.delenv("MY_JUDGE_KEY")
    code, out = run(rewardbench, *judge_args("http://127.0.0.1:1/v1", "--judge-api-key-env", "MY_JUDGE_KEY"))
    assert code == 2 and "MY_JUDGE_KEY is not set" in out


def test_rewardbench_rows_with_rewards_give_per_subset_accuracy(tmp_path: Path, rewardbench: Path) -> None:
    rewards = tmp_path / "rewards.jsonl"
    values = {"1": (2.0, 1.0), "2": (0.0, 1.0), "3": (1.0, 0.5), "4": (0.3, 0.2)}
    rewards.write_text(
        "".join(
            json.dumps({"input": r["prompt"], "id": f"{r['id']}/{side}", "reward": v}, ensure_ascii=False) + "\n"
            for r in ROWS
            for side, v in zip(("chosen", "rejected"), values[str(r["id"])], strict=True)
        ),
        encoding="utf-8",
    )
    code, out = run(rewardbench, "--rewards", rewards, "--json", tmp_path / "m.json")
    assert code == 0, out
    rb = json.loads((tmp_path / "m.json").read_text(encoding="utf-8"))["subsets"]["rb"]
    accuracy = {name: c["accuracy"] for name, c in rb["per_category"].items()}
    assert accuracy == {"chat-easy": 1.0, "chat-hard": 0.0, "math": 1.0}
    assert all(c["exact_match"] == c["accuracy"] for c in rb["per_category"].values())
    assert rb["accuracy"] == pytest.approx(2 / 3) and "chat-hard" in out


def test_rewardbench_rows_with_a_judge(tmp_path: Path) -> None:
    path = tmp_path / "rb.json"
    path.write_text(json.dumps(ROWS, ensure_ascii=False), encoding="utf-8")
    assert len(read_rewardbench(path)) == 4
    with ChatServer(prefer_longer) as server:
        code, out = run(path, "--format", "rewardbench", *judge_args(server.base_url, "--json", tmp_path / "j.json"))
    assert code == 0, out
    written = json.loads((tmp_path / "j.json").read_text(encoding="utf-8"))
    accuracy = {name: c["accuracy"] for name, c in written["subsets"]["rb"]["per_category"].items()}
    assert accuracy == {"chat-easy": 1.0, "chat-hard": 0.0, "math": 0.5}  # the longer answer wins
    assert written["judge"]["outcomes"] == {"right": 2, "wrong": 2, "tie": 0, "inconsistent": 0, "unparseable": 0}


def test_a_bad_rewardbench_row_names_file_and_line(tmp_path: Path, rewardbench: Path) -> None:
    with rewardbench.open("a", encoding="utf-8") as f:
        f.write('{"prompt": "p", "rejected": "b", "subset": "s"}\n')
    code, out = run(rewardbench, "--rewards", rewardbench)
    assert code == 2 and f"error: {rewardbench}:5: chosen: missing field" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--judge-url", "http://h/v1"], "--judge-model"),
        (["--judge-url", "http://h/v1", "--judge-model", "m", "--rewards", str(BENCH[0])], "give one of"),
        (["--judge-url", "http://h/v1", "--judge-model", "m", "--format", "parquet"], "--format"),
        (["--judge-url", "http://h/v1", "--judge-model", "m", "--concurrency", "0"], "--concurrency"),
        (["--judge-url", "http://h/v1", "--judge-model", "m", "--format", "rewardbench"], "prompt: missing field"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], expected: str) -> None:
    code, out = run(BENCH[0], *args)
    assert code == 2 and expected in out
