"""Nothing reaches an RLHF loop unproven, and a pinned reward never changes (torch and Triton; real scorer, broker
and store; the gate on CheemsBench figures of the real scorer's scores).

A GRPO-like client pins the production model and scores a rollout batch over and over, beside a client that
names no model, while:
(a) a model preferring the rejected answers (the production model's reward head negated: label-flipped) is
    registered, evaluated by its own id and rejected by the gate;
(b) another model at least as good (the same ranking, other rewards: its head doubled) is registered,
    evaluated and promoted: unpinned calls move to it within seconds, and their rewards change;
(c) production is rolled back: unpinned calls return to the first model.
The pinned client's rewards never change and none of its calls fails; each reply names the model that scored;
a client built from gRPC reflection alone selects a model by the new field.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file, save_file
from sqlalchemy import Engine

from cheems.formats.cheemsbench import read_bench
from cheems.v1 import reward_pb2
from evaluator.evaluate import evaluate
from evaluator.pipeline.gate import Gate, GatePolicy
from evaluator.report import to_json
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.bus.relay import EventRelay
from services.models.lifecycle import ModelLifecycle
from services.scorer.client import RewardClient
from services.scorer.config import ScorerConfig
from services.scorer.offline.bench_rewards import score_items_in_process, score_items_remote
from services.scorer.runtime import ScorerServer
from services.store import repository
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.outbox import StoreOutbox
from tests.services.scorer.test_reflection_client import ReflectedClient

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

BENCH = Path(__file__).resolve().parents[2] / "data" / "sample" / "human.jsonl"
PROMPTS = ["写一句关于春天的诗。"] * 3 + ["你好"] * 2
COMPLETIONS = ["春风又绿江南岸。", "不知道。", "春天来了，花开了。", "你好！有什么可以帮你？", "滚"]


def scaled(source: Path, out: Path, factor: float) -> Path:
    """A copy of `source` whose reward is multiplied by `factor`: -1 prefers what `source` ranks last (label-
    flipped); 2 ranks as `source` does (the same CheemsBench figures) but gives other rewards."""
    shutil.copytree(source, out)
    for weights in out.glob("*.safetensors"):
        tensors = load_file(weights)
        head = next(name for name in tensors if name.startswith("score."))
        tensors[head] = tensors[head] * factor
        save_file(tensors, weights, metadata={"format": "pt"})
    return out


def bench_result(url: str, model_id: str) -> dict[str, Any]:
    """CheemsBench figures of `model_id`, scored through the scorer by its id (as the evaluation does)."""
    items = read_bench(BENCH)
    return to_json(
        evaluate({"human": (str(BENCH), items)}, keyed(items, score_items_remote(items, url, model=model_id)))
    )


def in_process_overall(path: Path) -> float:
    items = read_bench(BENCH)
    return evaluate({"human": (str(BENCH), items)}, keyed(items, score_items_in_process(items, str(path)))).overall


def keyed(items: list[Any], scores: list[list[float]]) -> dict[tuple[str, str], float]:
    """Per-prompt scores as the evaluator's rewards mapping, (prompt, response id) -> reward."""
    return {
        (item.input, response.id): score
        for item, values in zip(items, scores, strict=True)
        for response, score in zip(item.responses, values, strict=True)
    }


class Calls:
    """A client calling in a loop until stopped: (model that scored, rewards) per call, and every error."""

    def __init__(self, call: Callable[[], tuple[str, list[float]]]) -> None:
        self.replies: list[tuple[float, str, list[float]]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._call = call
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                model, rewards = self._call()
                self.replies.append((time.monotonic(), model, rewards))
            except Exception as e:
                self.errors.append(e)
            time.sleep(0.1)  # ~10 calls a second each: enough to see every switch; faster only burns CPU

    def models_since(self, when: float) -> list[str]:
        return [m for t, m, _ in self.replies if t >= when]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture(params=["torch", "triton"])
def loop(
    request: pytest.FixtureRequest, tmp_path: Path, tiny_checkpoint: Callable[..., Path]
) -> Iterator[dict[str, Any]]:
    url = f"sqlite:///{tmp_path / 'cheems.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    with EmbeddedBroker() as broker:
        broker.create_topics(topics.with_dead_letters(), partitions=2)
        publisher = Publisher(broker.bootstrap)
        relay = EventRelay(StoreOutbox(engine), publisher).start()  # as the training service relays the events
        config = ScorerConfig(
            follow=True,
            bootstrap=broker.bootstrap,
            db=url,
            backend=request.param,
            grpc_port=0,
            http_port=-1,
            max_models=3,
        )
        try:
            # the session's default tiny RM, made once for every test that uses it (its CheemsBench overall and its
            # negation's differ: 0.224 and 0.276)
            yield {"engine": engine, "config": config, "tmp": tmp_path, "base": tiny_checkpoint()}
        finally:
            relay.stop()
            publisher.close()
            engine.dispose()


def decide(engine: Engine, url: str, model_id: str, production_id: str) -> list[str]:
    """The evaluation of `model_id` (and of production, for the comparison) stored, then the gate's steps."""
    with session_scope(engine) as session:
        runs = {}
        for evaluated in (production_id, model_id):
            runs[evaluated] = repository.create_run(session, [str(BENCH)], url, "paper", 5, 18, model_id=evaluated)
    for evaluated, run_id in runs.items():
        with session_scope(engine) as session:
            repository.end_run(session, run_id, bench_result(url, evaluated))
    policy = GatePolicy("auto", registered="gate")  # the models here are registered by hand, standing for trained ones
    return [f"{c.model_id}:{c.action}" for c in Gate(engine, policy).apply(runs[model_id])]


def test_a_pinned_rlhf_client_keeps_its_reward_through_rejection_promotion_and_rollback(loop: dict[str, Any]) -> None:
    engine, tmp = loop["engine"], loop["tmp"]
    models = ModelLifecycle(engine)
    # an untrained tiny RM is as likely to prefer the worse answers: the better of it and its negation is
    # "good", the other the label-flipped one (their figures are checked to differ, so the gate can tell)
    pair = [loop["base"], scaled(loop["base"], tmp / "negated", -1.0)]
    overall = [in_process_overall(path) for path in pair]
    assert overall[0] != overall[1], overall
    good_dir, flipped_dir = pair if overall[0] > overall[1] else pair[::-1]
    good = models.register(str(good_dir), "rm-good", "person:ann")
    models.promote(good.id, "person:ann", "the production model of the RLHF run")
    with ScorerServer(loop["config"]) as scorer:
        url = f"127.0.0.1:{scorer.grpc_port}"
        pinned_client = RewardClient(url, model=good.id)  # what the GRPO job was started with
        reward = pinned_client.reward_function()
        first = reward(prompts=PROMPTS, completions=COMPLETIONS)

        def pinned() -> tuple[str, list[float]]:
            reply = pinned_client.score_full(PROMPTS[0], COMPLETIONS[:3])
            assert reply.model == good.id
            return reply.model, reward(prompts=PROMPTS, completions=COMPLETIONS)  # type: ignore[return-value]

        unpinned_client = RewardClient(url)

        def unpinned() -> tuple[str, list[float]]:
            reply = unpinned_client.score_full(PROMPTS[0], COMPLETIONS[:3])
            return reply.model, list(reply.scores)

        grpo, plain = Calls(pinned), Calls(unpinned)
        try:
            # (a) a label-flipped model: evaluated by its id, rejected; production traffic never sees it
            flipped = models.register(str(flipped_dir), "rm-flipped", "training")
            assert decide(engine, url, flipped.id, good.id) == ["rm-flipped:evaluated", "rm-flipped:rejected"]
            time.sleep(6)  # past the scorer's 5 s reconciliation: nothing may have moved
            assert set(plain.models_since(0)) == {good.id}
            # (b) a model at least as good: promoted, unpinned calls follow within seconds
            better = models.register(str(scaled(good_dir, tmp / "better", 2.0)), "rm-better", "training")
            promoted_at = time.monotonic()
            steps = decide(engine, url, better.id, good.id)
            assert steps == ["rm-better:evaluated", "rm-good:demoted", "rm-better:promoted"]
            assert wait_until(lambda: plain.models_since(time.monotonic() - 0.5)[-1:] == [better.id], 30)
            moved = next(t for t, m, _ in plain.replies if m == better.id) - promoted_at
            # (c) rollback: production returns to the first model
            models.rollback("person:ann", "the new model misbehaves in the RLHF run")
            assert wait_until(lambda: plain.models_since(time.monotonic() - 0.5)[-1:] == [good.id], 30)
        finally:
            grpo.stop()
            plain.stop()
            pinned_client.close()
            unpinned_client.close()
        assert grpo.errors == [] and plain.errors == []
        assert len(grpo.replies) > 20 and {m for _, m, _ in grpo.replies} == {good.id}
        drift = max(abs(a - b) for _, _, rewards in grpo.replies for a, b in zip(rewards, first, strict=True))
        # both backends merge the two clients' concurrent calls into forwards of other shapes (the torch batcher,
        # Triton's dynamic batcher), which moves float32 rounding (1.5e-8 and 3e-8 seen); a model change moves
        # rewards by their own size
        assert drift <= 1e-6, f"a pinned reward changed by {drift}"
        assert set(plain.models_since(0)) == {good.id, better.id}
        by_model = {m: rewards for _, m, rewards in plain.replies}
        assert by_model[better.id] == pytest.approx([2 * r for r in by_model[good.id]], rel=1e-4)  # other rewards
        bound = 15 if loop["config"].backend == "torch" else 40  # on Triton the switch starts a Triton
        assert moved < bound, f"unpinned calls reached the promoted model {moved:.1f} s after the promotion"

        reflected = ReflectedClient(scorer.grpc_port)  # a client built from reflection alone, no deadline
        try:
            request = reflected.message("cheems.v1.ScoreRequest")(prompt=PROMPTS[0], responses=COMPLETIONS[:3])
            request.model = better.id
            assert reflected.call("Score", request).model == better.id
            request.model = flipped.id
            with pytest.raises(Exception, match="rejected"):
                reflected.call("Score", request)
        finally:
            reflected.close()
        assert reward_pb2.ScoreRequest.DESCRIPTOR.fields_by_name["model"].number == 6


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return False
