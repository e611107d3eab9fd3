"""The bundled sample benchmark: reproducible from its seeded script, and shaped as promised."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from cheems.formats.cheemsbench import read_bench
from cheems.formats.rewards_file import read_rewards
from cheems.sample_bench import write_sample

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
PAPER_CATEGORIES = {"推理", "数学", "代码", "知识", "语言", "安全", "理解", "复杂指令"}


def test_committed_sample_is_what_the_script_generates(tmp_path: Path) -> None:
    for path in write_sample(tmp_path):
        committed = SAMPLE / path.name
        assert committed.read_bytes() == path.read_bytes(), f"{committed} is stale: run `make sample`"


def test_sample_shape() -> None:
    for name in ("open", "human"):
        items = read_bench(SAMPLE / f"{name}.jsonl")
        assert len(items) >= 12
        assert {i.primary_category for i in items} <= PAPER_CATEGORIES
        sizes = Counter(len(i.responses) for i in items)
        assert set(sizes) == {4, 5} and sizes[5] > sizes[4]
        assert any(len(set(i.ranks())) < len(i.ranks()) for i in items), "no gold ties"
        assert all(len(set(i.ranks())) > 1 for i in items)


def test_rewards_cover_every_response() -> None:
    rewards = read_rewards(SAMPLE / "rewards.jsonl")
    keys = {(i.input, r.id) for n in ("open", "human") for i in read_bench(SAMPLE / f"{n}.jsonl") for r in i.responses}
    assert set(rewards) == keys
