"""Triple-wise task protocol, distant supervision, length debiasing and the rule-based filter."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest

from cheems.formats.cheemsbench import BenchItem, read_bench, write_bench
from cheems.formats.responses import Response
from services.annotation.algorithm.distant import distant_supervision, length_debias
from services.annotation.algorithm.filters import FilterConfig, chinese_ratio, prose, reason, reject_reason
from services.annotation.algorithm.protocol import pairs_covered, triple_tasks
from services.annotation.algorithm.resolve import Relation
from services.annotation.files.commands import filter_bench


def test_five_responses_get_the_papers_circular_triples() -> None:
    assert triple_tasks(["1", "2", "3", "4", "5"]) == [
        ["1", "2", "3"],
        ["2", "3", "4"],
        ["3", "4", "5"],
        ["4", "5", "1"],
        ["5", "1", "2"],
    ]


@pytest.mark.parametrize("n", range(2, 11))
def test_every_pair_is_covered_by_groups_of_at_most_three(n: int) -> None:
    keys = [f"r{i}" for i in range(n)]
    groups = triple_tasks(keys)
    assert pairs_covered(groups) == {frozenset(p) for p in combinations(keys, 2)}
    assert all(2 <= len(g) <= 3 and len(set(g)) == len(g) for g in groups)


def test_fewer_than_two_responses_need_no_task() -> None:
    assert triple_tasks(["only"]) == [] and triple_tasks([]) == []


def test_distant_supervision_drops_what_the_rm_contradicts() -> None:
    ai = [Relation("a", "b"), Relation("c", "a"), Relation("b", "c", tie=True), Relation("a", "c", tie=True)]
    scores = {"a": 2.0, "b": 1.0, "c": 0.95}
    result = distant_supervision(ai, scores, margin=0.5, tie_margin=0.1)
    assert result.kept == [Relation("a", "b"), Relation("b", "c", tie=True)]
    assert result.dropped == [Relation("c", "a"), Relation("a", "c", tie=True)]
    assert result.resolution.rank == {"a": 1, "b": 2, "c": 2} and result.resolution.conflicts == 0


def test_distant_supervision_margin_tolerates_small_disagreement() -> None:
    result = distant_supervision([Relation("b", "a")], {"a": 1.0, "b": 0.8}, margin=0.5)
    assert result.kept == [Relation("b", "a")]
    assert distant_supervision([Relation("b", "a")], {"a": 1.0, "b": 0.8}, margin=0.1).dropped


def test_length_debias_balances_and_is_seeded() -> None:
    pairs = [(f"long{i}" * 3, f"s{i}") for i in range(6)] + [(f"s{i}", f"long{i}" * 3) for i in range(2)]
    pairs += [("same", "mesa")]
    result = length_debias(pairs, len, seed=1)
    assert (result.longer_before, result.shorter_before, result.equal) == (6, 2, 1)
    assert (result.longer_after, result.shorter_after) == (2, 2) and len(result.pairs) == 5
    assert ("same", "mesa") in result.pairs
    assert result.pairs == length_debias(pairs, len, seed=1).pairs
    assert [p for p in pairs if p in result.pairs] == result.pairs  # input order kept


def test_filter_rules() -> None:
    assert chinese_ratio("你好abc") == (pytest.approx(2 / 5), 5)
    assert reject_reason("") == "too_short"
    assert reject_reason("好" * 9000) == "too_long"
    assert reject_reason("This answer is entirely in English and quite long indeed.") == "non_chinese"
    code = "def f(x): return x * 2  # the function doubles its input value"
    assert reject_reason(code, "代码") == "non_chinese"  # the paper: the same rules for code, recall first
    assert reject_reason(code, "代码", FilterConfig(ratio_exempt=frozenset({"代码"}))) is None  # opted out
    assert reject_reason("秦始皇于公元前221年统一六国，建立了秦朝（Qin dynasty）。") is None
    with pytest.raises(ValueError, match="min_chinese_ratio"):
        FilterConfig(min_chinese_ratio=2)
    with pytest.raises(ValueError, match="min_letters"):
        FilterConfig(min_letters=-1)


def test_the_ratio_is_measured_on_the_prose() -> None:
    """Code blocks, inline code and TeX maths are not code-switching; what is left of the prose is judged."""
    answer = "用内置函数：\n```python\ndef quick_sort(items):\n    return sorted(items)\n```\n"
    answer += "复杂度 $O(n \\log n)$，调用 `quick_sort(xs)`。"
    assert prose(answer).split() == ["用内置函数：", "复杂度", "，调用", "。"]
    assert reject_reason(answer) is None
    assert reject_reason(answer, config=FilterConfig(prose_only=False)) == "non_chinese"  # every letter counted
    assert prose(r"设 \(x^2\) 与 \[y = mx\] 和 $$a+b$$ 止 ```never closed") == "设   与   和   止  "
    switched = "答案如下 but then the answer switched into English for the whole rest of it"
    assert reject_reason(switched + " `code`") == "non_chinese"  # code-switched prose is still caught
    assert reject_reason("```\nprint('only code, no prose around it at all')\n```") is None  # too little prose


def test_the_stored_reason_names_the_threshold() -> None:
    config = FilterConfig(max_chars=100, min_chinese_ratio=0.25)
    assert reason("好" * 101, ["通用"], config) == "too_long>100"
    assert reason("  ", (), config) == "too_short<1"
    assert reason("Only English words in this answer, sadly.", ["代码"], config) == "non_chinese<0.25"
    assert reason("写得好。", ["通用"], config) is None
    exempt = FilterConfig(ratio_exempt=frozenset({"代码"}))
    assert reason("Only English words in this answer, sadly.", ["代码", "通用"], exempt) is None
    assert reason("Only English words in this answer, sadly.", ["通用", "代码"], exempt) == "non_chinese<0.3"
    assert exempt.as_json()["ratio_exempt"] == ["代码"] and len(reason("好" * 9001, ["x"]) or "") <= 32


def test_filter_bench_removes_rejected_responses_and_prompts_left_without_a_ranking(tmp_path: Path) -> None:
    def item(prompt: str, texts: list[str], category: str = "通用") -> BenchItem:
        responses = tuple(Response(f"r{n}", text) for n, text in enumerate(texts))
        return BenchItem(prompt, responses, {r.id: n for n, r in enumerate(responses)}, (category,))

    english = "English only words here for sure yes"
    bench = [
        item("北京是哪个国家的首都？", ["北京是中国的首都。", "", english, "是中国。"]),
        item("一加一等于几？", ["等于二。", "好" * 9001]),  # one response left: nothing to rank
        item("写一个函数", ["def f(x): return x * 2  # doubles its input value", "def g(): pass"], "代码"),
    ]
    write_bench(tmp_path / "in.jsonl", bench)
    counts = filter_bench(tmp_path / "in.jsonl", tmp_path / "out.jsonl", FilterConfig(ratio_exempt=frozenset({"代码"})))
    assert counts == {"prompts_kept": 2, "too_short": 1, "non_chinese": 1, "too_long": 1}
    kept = read_bench(tmp_path / "out.jsonl")
    assert [[r.content for r in k.responses] for k in kept] == [
        ["北京是中国的首都。", "是中国。"],
        ["def f(x): return x * 2  # doubles its input value", "def g(): pass"],  # code exempt from the ratio here
    ]
    assert kept[0].rank == {"r0": 0, "r3": 3}
