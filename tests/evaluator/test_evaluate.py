"""The one evaluation path on real files: hand-computed values, the sample's pinned Overall, options, errors."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest

from cheems.formats.cheemsbench import BenchItem, write_bench
from cheems.formats.responses import Response
from cheems.formats.rewards_file import write_rewards
from evaluator.errors import EvaluationError
from evaluator.evaluate import BenchCache, EvalOptions, evaluate, evaluate_files, load_subsets
from evaluator.metrics import Semantics

README = Path(__file__).resolve().parents[2] / "docs" / "evaluating.md"  # the manual's page


def bench_item(prompt: str, category: str, ranks: list[int]) -> BenchItem:
    responses = tuple(Response(f"r{i + 1}", f"回答{i + 1}") for i in range(len(ranks)))
    return BenchItem(prompt, responses, {r.id: rank for r, rank in zip(responses, ranks, strict=True)}, (category,))


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[list[Path], Path]:
    """Two subsets; the comment on each line gives its comparisons (gold pairs) under the rewards."""
    a = [
        (bench_item("甲比乙高吗？", "推理", [1, 2, 3]), [3.0, 2.0, 1.0]),  # 3 pairs, all right: exact
        (bench_item("乙比丙高吗？", "推理", [1, 2]), [0.0, 1.0]),  # 1 pair, wrong: not exact
        (bench_item("一加一等于几？", "数学", [1, 2]), [1.0, 1.0]),  # 1 pair, a reward tie
    ]
    b = [(bench_item("写个排序函数", "代码", [1, 1, 2]), [0.5, 0.9, 0.1])]  # gold tie r1=r2: 2 pairs, both right
    for name, rows in (("a", a), ("b", b)):
        write_bench(tmp_path / f"{name}.jsonl", [item for item, _ in rows])
    rewards = [(item.input, r.id, v) for item, vs in a + b for r, v in zip(item.responses, vs, strict=True)]
    write_rewards(tmp_path / "rewards.jsonl", rewards)
    return [tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "rewards.jsonl"


def test_tiny_bench_hand_computed_paper(tiny: tuple[list[Path], Path]) -> None:
    # a: 推理 pools 4 pairs, 3 right -> acc 0.75; exact 1/2 = 0.5. 数学: its one pair tied -> acc 0, exact 0.
    #    subset acc = (0.75 + 0) / 2 = 0.375, exact = (0.5 + 0) / 2 = 0.25, (acc + exact) / 2 = 0.3125
    # b: 代码: 2 pairs right -> acc 1, exact 1 -> 1.0
    # Overall = (0.3125 + 1.0) / 2 = 0.65625
    result = evaluate_files(*tiny)
    a, b = result.subsets["a"], result.subsets["b"]
    assert (a.accuracy, a.exact_match, a.prompts, a.pairs) == (0.375, 0.25, 3, 5)
    assert (a.per_category["推理"].accuracy, a.per_category["数学"].accuracy) == (0.75, 0.0)
    assert (b.accuracy, b.exact_match, b.pairs) == (1.0, 1.0, 2)
    assert result.overall == 0.65625


def test_tiny_bench_hand_computed_official(tiny: tuple[list[Path], Path]) -> None:
    # official: the 数学 reward tie still fails accuracy but not exact match -> a exact = (0.5 + 1) / 2 = 0.75,
    # a = (0.375 + 0.75) / 2 = 0.5625; Overall = (0.5625 + 1.0) / 2 = 0.78125
    result = evaluate_files(*tiny, EvalOptions(Semantics.OFFICIAL))
    assert result.semantics is Semantics.OFFICIAL
    assert result.subsets["a"].exact_match == 0.75 and result.overall == 0.78125


def test_ece_bins_reach_the_metrics(tiny: tuple[list[Path], Path]) -> None:
    # b's margins are 0.4 and 0.8, both right. One bin: mean |margin| 0.6, so ECE = 1 - sigmoid(0.6).
    # Five bins over [0, 0.8]: 0.4 in bin 2, 0.8 in bin 4, ECE = mean(1 - sigmoid(0.4), 1 - sigmoid(0.8)).
    def sigmoid(x: float) -> float:
        return 1 / (1 + math.exp(-x))

    one = evaluate_files(*tiny, EvalOptions(ece_bins=1)).subsets["b"].ece
    five = evaluate_files(*tiny, EvalOptions(ece_bins=5)).subsets["b"].ece
    assert one == pytest.approx(1 - sigmoid(0.6))
    assert five == pytest.approx(((1 - sigmoid(0.4)) + (1 - sigmoid(0.8))) / 2)


def test_sample_overall_is_pinned_and_readme_shows_it(sample_paths: tuple[list[Path], Path]) -> None:
    """`cheems eval data/sample/open.jsonl data/sample/human.jsonl --rewards data/sample/rewards.jsonl`."""
    result = evaluate_files(*sample_paths)
    assert list(result.subsets) == ["open", "human"] and result.semantics is Semantics.PAPER
    assert round(result.overall, 4) == 0.6701
    assert [s.prompts for s in result.subsets.values()] == [18, 18]
    shown = re.findall(r"^Overall\s+(\d\.\d{4})$", README.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert shown[0] == "0.6701", "docs/evaluating.md's `cheems eval` output is not the sample's"  # then the judge's


def test_sample_has_reward_ties_so_the_semantics_differ(sample_paths: tuple[list[Path], Path]) -> None:
    paper = evaluate_files(*sample_paths, EvalOptions(Semantics.PAPER))
    official = evaluate_files(*sample_paths, EvalOptions(Semantics.OFFICIAL))
    assert official.overall > paper.overall


def test_evaluate_on_loaded_subsets_equals_evaluate_files(tiny: tuple[list[Path], Path]) -> None:
    from cheems.formats.rewards_file import read_rewards

    bench, rewards = tiny
    assert evaluate(load_subsets(bench), read_rewards(rewards)) == evaluate_files(bench, rewards)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ece_bins": 0}, "ece_bins: expected an integer >= 1, got 0"),
        ({"ece_bins": 2.5}, "ece_bins: expected an integer >= 1, got 2.5"),
        ({"ece_bins": True}, "ece_bins: expected an integer >= 1, got True"),
        ({"semantics": "loose"}, "semantics: expected one of 'paper', 'official', got 'loose'"),
    ],
)
def test_options_are_checked_naming_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(EvaluationError, match=re.escape(message)):
        EvalOptions(**kwargs)


def test_options_take_the_semantics_by_name() -> None:
    assert EvalOptions("official").semantics is Semantics.OFFICIAL  # type: ignore[arg-type]


def test_bench_cache_reads_a_file_once_until_it_changes(tiny: tuple[list[Path], Path]) -> None:
    cache, path = BenchCache(), tiny[0][0]
    first = cache.read(path)
    assert cache.read(path) is first
    write_bench(path, first[:1])  # rewritten: another size
    assert cache.read(path) == first[:1]


def test_two_files_with_one_stem_are_rejected(tmp_path: Path, sample_paths: tuple[list[Path], Path]) -> None:
    bench, rewards = sample_paths
    (tmp_path / "x").mkdir()
    copy = shutil.copy(bench[0], tmp_path / "x" / "open.jsonl")
    with pytest.raises(EvaluationError, match="both be subset 'open'"):
        evaluate_files([bench[0], copy], rewards)


def test_rewards_missing_for_a_subset(tmp_path: Path, sample_paths: tuple[list[Path], Path]) -> None:
    bench, rewards = sample_paths
    partial = tmp_path / "rewards.jsonl"
    lines = rewards.read_text(encoding="utf-8").splitlines()
    partial.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"human.jsonl:18: no reward"):
        evaluate_files(bench, partial)
