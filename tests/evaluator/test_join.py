"""Reward files: reading, validation with line numbers, and the join with bench items."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheems.errors import FormatError
from cheems.formats.cheemsbench import BenchItem
from cheems.formats.responses import Response
from cheems.formats.rewards_file import read_rewards, write_rewards
from evaluator.errors import EvaluationError
from evaluator.join import join_rewards

GOOD = [{"input": "你好吗？", "id": "a", "reward": 1.5}, {"input": "你好吗？", "id": "b", "reward": -2}]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "rewards.jsonl"
    write_rewards(path, [("你好吗？", "a", 1.5), ("你好吗？", "b", -2.0)])
    assert read_rewards(path) == {("你好吗？", "a"): 1.5, ("你好吗？", "b"): -2.0}


@pytest.mark.parametrize(
    ("bad", "field", "message"),
    [
        ('{"input": "你好吗？", "id": "c"}', "reward", "missing"),
        ('{"input": "你好吗？", "id": "c", "reward": "0.5"}', "reward", "expected int or float"),
        ('{"input": "你好吗？", "id": "c", "reward": true}', "reward", "expected int or float"),
        ('{"input": "你好吗？", "id": "c", "reward": NaN}', None, "invalid JSON (NaN is not a JSON number)"),
        ('{"input": "你好吗？", "id": "c", "reward": Infinity}', None, "invalid JSON (Infinity is not"),
        ('{"input": "你好吗？", "id": "c", "reward": -Infinity}', None, "invalid JSON (-Infinity is not"),
        ('{"input": "你好吗？", "id": "c", "reward": 1e400}', None, "invalid JSON (the number 1e400 is out of"),
        ('{"input": "你好吗？", "id": "c", "reward": 1' + "0" * 400 + "}", "reward", "must be a finite number"),
        ('{"id": "c", "reward": 1}', "input", "missing"),
        ('{"input": "你好吗？", "reward": 1}', "id", "missing"),
        (
            '{"input": "你好吗？", "id": "a", "reward": 3}',
            "id",
            "duplicate reward for response 'a', first on line 1",
        ),
        ('{"input": "你好吗？", "id": ', None, "invalid JSON"),
    ],
)
def test_bad_line_names_file_line_and_field(tmp_path: Path, bad: str, field: str | None, message: str) -> None:
    path = write_lines(tmp_path / "r.jsonl", [json.dumps(GOOD[0]), json.dumps(GOOD[1]), bad])
    with pytest.raises(FormatError) as info:
        read_rewards(path)
    assert (info.value.line, info.value.field) == (3, field)
    assert message in str(info.value) and str(path) in str(info.value)


def item(text: str = "你好吗？", line: int = 7) -> BenchItem:
    return BenchItem(text, (Response("a", "很好。"), Response("b", "不好。")), {"a": 1, "b": 2}, ("理解",), line=line)


def test_score_items_joins_by_prompt_and_id() -> None:
    rewards = {("你好吗？", "a"): 1.0, ("你好吗？", "b"): 0.5, ("别的问题", "a"): 9.0}
    [scored] = join_rewards([item()], rewards, "open.jsonl")
    assert (scored.category, scored.ranks, scored.rewards) == ("理解", (1, 2), (1.0, 0.5))


def test_missing_reward_is_an_error_naming_file_line_and_response() -> None:
    with pytest.raises(EvaluationError, match=r"open.jsonl:7: no reward for response 'b'"):
        join_rewards([item()], {("你好吗？", "a"): 1.0}, "open.jsonl")


def test_reward_of_the_same_id_under_another_prompt_does_not_count() -> None:
    with pytest.raises(EvaluationError, match="'a'"):
        join_rewards([item()], {("别的问题", "a"): 1.0, ("你好吗？", "b"): 1.0}, "open.jsonl")
