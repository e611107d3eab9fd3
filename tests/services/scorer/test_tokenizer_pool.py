"""TokenizerPool: concurrent leases of a real fast tokenizer, at most `size` copies, leases always returned."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from services.scorer.tokenizer_pool import TokenizerPool
from trainer.tiny import build_tokenizer

TEXTS = [
    "请用一句话介绍长城。",
    "长城是中国古代修建的军事防御工程，绵延上万里。" * 40,
    "你好！有什么可以帮您？",
    "The Great Wall 很长 very long。" * 30,
]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tokenizer()


def test_size_must_be_positive(tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        TokenizerPool(tokenizer, size=0)


def test_concurrent_leases_give_the_serial_ids_with_at_most_size_copies(tokenizer: Any) -> None:
    serial = tokenizer(TEXTS * 25, add_special_tokens=False)["input_ids"]
    pool = TokenizerPool(tokenizer, size=2)
    start = threading.Barrier(4)
    held: set[int] = set()
    lock = threading.Lock()

    def work(_: int) -> list[list[list[int]]]:
        start.wait(timeout=30)  # all four ask at once, so the pool must grow and then make callers wait
        out = []
        for _ in range(10):
            with pool.lease() as t:
                with lock:
                    assert id(t) not in held, "one tokenizer leased to two threads at once"
                    held.add(id(t))
                try:
                    out.append(t(TEXTS * 25, add_special_tokens=False)["input_ids"])
                finally:
                    with lock:
                        held.discard(id(t))
        return out

    with ThreadPoolExecutor(4) as threads:
        results = list(threads.map(work, range(4)))
    assert all(ids == serial for per_thread in results for ids in per_thread)
    assert pool._made == 2
    leased = [pool._idle.get_nowait() for _ in range(pool._idle.qsize())]
    assert len(leased) == 2 and len({id(t) for t in leased}) == 2 and tokenizer in leased


def test_serial_use_makes_no_copy(tokenizer: Any) -> None:
    pool = TokenizerPool(tokenizer, size=4)
    for _ in range(5):
        with pool.lease() as t:
            assert t is tokenizer
    assert pool._made == 1


def test_a_lease_is_returned_when_the_body_raises(tokenizer: Any) -> None:
    pool = TokenizerPool(tokenizer, size=1)
    with pytest.raises(RuntimeError, match="boom"), pool.lease():
        raise RuntimeError("boom")
    done = threading.Event()

    def lease_again() -> None:  # with size 1, this waits forever if the failed lease was not given back
        with pool.lease() as t:
            assert t is tokenizer
        done.set()

    threading.Thread(target=lease_again, daemon=True).start()
    assert done.wait(timeout=10)
    assert pool._made == 1 and pool._idle.qsize() == 1


def test_warm_makes_every_copy_in_the_background() -> None:
    pool = TokenizerPool(build_tokenizer(), size=3)
    pool.warm().join(timeout=60)
    assert pool._made == 3 and pool._idle.qsize() == 3
