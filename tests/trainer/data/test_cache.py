"""The token cache: built once, mapped after, keyed by what changes the tokens, one builder among processes."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from trainer.data import Dataset, LengthPolicy, PromptGroup, read_groups, tokenize_groups
from trainer.data.cache import CacheSpec, build, cache_key, cached_dataset, open_entry
from trainer.tiny import build_tokenizer

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample" / "open.jsonl"


def spec(path: Path = SAMPLE, max_length: int = 64, policy: LengthPolicy = LengthPolicy.DROP) -> CacheSpec:
    return CacheSpec((str(path),), None, max_length, policy)


def same(a: Dataset, b: Dataset) -> None:
    assert [a.examples.tokens(x) for x in range(len(a.examples))] == [
        b.examples.tokens(x) for x in range(len(b.examples))
    ]
    assert list(a.examples) == list(b.examples)  # group, index and ids of every example
    assert (a.groups, a.pairs, a.stats) == (b.groups, b.pairs, b.stats)


def test_a_second_ask_maps_what_the_first_built_and_equals_tokenizing_in_memory(tmp_path: Path, tokenizer) -> None:
    reads: list[int] = []

    def read() -> Sequence[PromptGroup]:
        reads.append(1)
        return read_groups(SAMPLE)

    first = cached_dataset(tmp_path, spec(), tokenizer, read)
    again = cached_dataset(tmp_path, spec(), tokenizer, read)
    assert reads == [1]  # the file is read (and tokenized) once
    assert isinstance(again.examples.ids, np.memmap) and again.examples.ids.dtype == np.uint32
    in_memory = tokenize_groups(read_groups(SAMPLE), tokenizer, 64, LengthPolicy.DROP)
    assert in_memory.stats.dropped_responses > 0  # max_length 64 drops some: the policy's counts are kept too
    same(first, in_memory)
    same(again, in_memory)
    (entry,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["tokens"] == in_memory.examples.num_tokens == (entry / "ids.u32").stat().st_size // 4


def test_the_key_changes_with_what_changes_the_tokens(tmp_path: Path, tokenizer) -> None:
    key = cache_key(spec(), tokenizer)
    assert cache_key(spec(), tokenizer) == key
    assert cache_key(spec(max_length=65), tokenizer) != key
    assert cache_key(spec(policy=LengthPolicy.LEFT), tokenizer) != key
    copy = tmp_path / "open.jsonl"
    copy.write_bytes(SAMPLE.read_bytes())
    assert cache_key(spec(copy), tokenizer) == key  # the content, not the path
    copy.write_bytes(SAMPLE.read_bytes() + b"\n")
    assert cache_key(spec(copy), tokenizer) != key
    other = build_tokenizer()
    other.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert cache_key(spec(), other) != key


def test_an_interrupted_build_is_not_an_entry(tmp_path: Path, tokenizer) -> None:
    def broken() -> Sequence[PromptGroup]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cached_dataset(tmp_path, spec(), tokenizer, broken)
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # nothing half-written left behind
    same(
        cached_dataset(tmp_path, spec(), tokenizer, lambda: read_groups(SAMPLE)),
        tokenize_groups(read_groups(SAMPLE), tokenizer, 64),
    )


def _ask(root: str, marks: str, tokenizer: object) -> int:
    def read() -> Sequence[PromptGroup]:
        with open(marks, "a") as f:
            f.write("built\n")
        return read_groups(SAMPLE)

    return len(cached_dataset(Path(root), spec(), tokenizer, read).examples)


def test_processes_asking_at_once_build_it_once(tmp_path: Path, tokenizer) -> None:
    """The tokenizer is sent pickled to each process (converting the vocabulary there again costs seconds)."""
    marks = tmp_path / "marks"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        sizes = pool.starmap(_ask, [(str(tmp_path / "cache"), str(marks), tokenizer)] * 2)
    assert len(set(sizes)) == 1 and sizes[0] > 0
    assert marks.read_text() == "built\n"


def test_a_build_finding_its_entry_published_by_another_node_keeps_that_one(tmp_path: Path, tokenizer) -> None:
    data = cached_dataset(tmp_path, spec(), tokenizer, lambda: read_groups(SAMPLE))
    (entry,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    build(entry, read_groups(SAMPLE), tokenizer, spec(), progress=False)  # as a node whose lock did not reach here
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([entry.name, f"{entry.name}.lock"])
    same(open_entry(entry), data)
