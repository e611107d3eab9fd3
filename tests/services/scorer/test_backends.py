"""The torch backend on a real tiny model: forwards shared by concurrent calls give each call exactly its own
rewards, whatever the batch; models batch separately; bfloat16 on the CPU stays close to float32."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from cheems.chat import Conversation, encode_many
from cheems.execution import Execution
from cheems.forward import forward_rewards
from cheems.model import head_of, load_model, save_model
from services.scorer.backends import TorchBackend
from services.scorer.batcher import Work
from services.scorer.deadline import Deadline
from services.scorer.errors import BackendUnavailable, DeadlineExceeded

ROOT = Path(__file__).resolve().parents[3]
PROMPT = [151644, 872, 198, *range(1000, 1040)]  # a rendered prompt shared by the responses of one call
CALLS = [
    [[*PROMPT, 100, 151645], [*PROMPT, 101, 102, 151645], [*PROMPT, 103, 151645]],  # one prompt, packed
    [[108386, 151645], [151644, 872, 198, 108386, 151645, 198, 100, 151645]],  # unrelated, short
    [[*PROMPT, 100, 151645], [*PROMPT, 104, 151645]],  # the first call's prompt again, in another call
    [[151644, *range(2000, 2090), 151645]],  # one long sequence
]


def works(backend: TorchBackend, calls: list[list[list[int]]]) -> list[Work]:
    """The calls as `TorchBackend.score` submits them: each with its own row plan."""
    from cheems.forward import plan

    out = []
    for sequences in calls:
        rows = plan(backend.model, sequences, backend.prefix_sharing)
        out.append(Work(sequences, sum(r.length(sequences) for r in rows), rows))
    return out


@pytest.fixture(scope="module")
def shared_backend(tiny_model: Path) -> Iterator[TorchBackend]:
    backend = TorchBackend(str(tiny_model), Execution(share=True), queue_delay=5.0)
    yield backend
    backend.close()


def test_every_batch_composition_gives_each_call_the_rewards_of_its_own_forward(
    shared_backend: TorchBackend, tiny_model: Path
) -> None:
    assert shared_backend.prefix_sharing and shared_backend.dtype == "float32"
    alone = [shared_backend._run(works(shared_backend, [call]))[0] for call in CALLS]
    model, _ = load_model(tiny_model)
    for call, values in zip(CALLS, alone, strict=True):  # and a call alone is the plain unshared forward
        assert values == pytest.approx(forward_rewards(model.eval(), call).tolist(), abs=1e-5)
    for size in range(2, len(CALLS) + 1):
        for chosen in itertools.permutations(range(len(CALLS)), size):
            batch = shared_backend._run(works(shared_backend, [CALLS[i] for i in chosen]))
            for i, values in zip(chosen, batch, strict=True):
                assert values == pytest.approx(alone[i], abs=1e-5), chosen


def test_concurrent_calls_share_one_forward_and_each_gets_its_own_rewards(shared_backend: TorchBackend) -> None:
    alone = [shared_backend._run(works(shared_backend, [call]))[0] for call in CALLS]
    calls = CALLS * 4
    ready = threading.Barrier(len(calls))
    before = shared_backend.batcher.forwards

    def call(sequences: list[list[int]]) -> list[float]:
        with shared_backend.arriving():  # as the scorer does around tokenizing: all of them "tokenize" first
            ready.wait(10)
        return shared_backend.score(sequences, Deadline.of(30, 30))

    with ThreadPoolExecutor(len(calls)) as pool:
        results = list(pool.map(call, calls))
    for i, values in enumerate(results):
        assert values == pytest.approx(alone[i % len(CALLS)], abs=1e-5)
    assert shared_backend.batcher.forwards - before == 1  # 16 calls, 36 sequences: within 64, one forward


def test_two_models_batch_separately(tiny_model: Path, tiny_checkpoint: Callable[..., Path]) -> None:
    other = tiny_checkpoint(hidden_size=32, layers=2, seed=5, name="other")
    backends = [TorchBackend(str(path)) for path in (tiny_model, other)]
    try:
        expected = [[b.score(call) for call in CALLS] for b in backends]
        assert expected[0] != expected[1]
        jobs = [(b, i) for b in (0, 1) for i in range(len(CALLS))] * 3
        with ThreadPoolExecutor(len(jobs)) as pool:
            got = list(pool.map(lambda job: backends[job[0]].score(CALLS[job[1]]), jobs))
        for (b, i), values in zip(jobs, got, strict=True):
            assert values == pytest.approx(expected[b][i], abs=1e-5)
    finally:
        for backend in backends:
            backend.close()


def test_closing_with_calls_in_flight_answers_each_with_rewards_or_unavailable(tiny_model: Path) -> None:
    backend = TorchBackend(str(tiny_model))
    expected = backend.score(CALLS[3])
    outcomes: list[object] = []

    def call() -> None:
        try:
            outcomes.append(backend.score(CALLS[3]))
        except BackendUnavailable as e:
            outcomes.append(e)

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    backend.close()
    for t in threads:
        t.join(10)
    assert len(outcomes) == 12
    for outcome in outcomes:
        assert isinstance(outcome, BackendUnavailable) or outcome == pytest.approx(expected, abs=1e-5)
    with pytest.raises(BackendUnavailable):
        backend.score(CALLS[3])


@pytest.fixture(scope="module")
def spread_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with its head scaled 4x, so its rewards spread about as far apart as a trained model's
    (gaps of 0.05 and more between a prompt's responses; the random head's are a few hundredths)."""
    model, tokenizer = load_model(tiny_model)
    with torch.no_grad():
        head_of(model).weight.mul_(4)
    return save_model(model, tokenizer, tmp_path_factory.mktemp("spread") / "rm")


def test_bfloat16_on_the_cpu_is_close_to_float32_and_orders_clear_gaps_the_same(spread_model: Path) -> None:
    _, tokenizer = load_model(spread_model)
    items = [json.loads(line) for name in ("human", "open") for line in (ROOT / "data/sample" / f"{name}.jsonl").open()]
    full, half = (
        TorchBackend(str(spread_model), Execution(dtype=d, share=True)) for d in (torch.float32, torch.bfloat16)
    )
    assert half.dtype == "bfloat16" and next(half.model.parameters()).dtype is torch.bfloat16
    clear_gaps = 0
    try:
        for item in items:
            conversations = [Conversation(item["input"], r["content"]) for r in item["responses"]]
            sequences = [e.input_ids for e in encode_many(tokenizer, conversations)]
            a, b = full.score(sequences), half.score(sequences)
            assert all(isinstance(v, float) for v in b)  # float32 out, whatever the model computes in
            assert b == pytest.approx(a, abs=2e-2)
            for i, j in itertools.combinations(range(len(a)), 2):
                if abs(a[i] - a[j]) > 5e-2:
                    clear_gaps += 1
                    assert (a[i] > a[j]) == (b[i] > b[j]), (item["input"][:20], i, j)
    finally:
        full.close()
        half.close()
    assert clear_gaps >= 20  # the order check above was not vacuous


def test_a_big_call_whose_caller_left_stops_between_its_forwards(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cheems import forward

    backend = TorchBackend(str(tiny_model), Execution(max_sequences=2))
    counted = []
    real = forward.forward_rewards

    def slow_forward(*args: object, **kwargs: object) -> torch.Tensor:
        counted.append(1)
        time.sleep(0.05)  # a forward that takes a while, as a large model's does
        return real(*args, **kwargs)

    monkeypatch.setattr(forward, "forward_rewards", slow_forward)
    big = [[151644, 872, 198, i, 151645] for i in range(1000, 1200)]  # 200 sequences: 100 forwards of 2
    try:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            backend.score(big, Deadline.of(0.3, 0.3))
        assert backend.score(CALLS[1], Deadline.of(5, 5))  # served at once, not after the 100 forwards
        assert time.monotonic() - started < 3.0
        assert len(counted) < 50
    finally:
        backend.close()
