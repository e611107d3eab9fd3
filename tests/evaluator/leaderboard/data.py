"""Stores holding real evaluation results for the leaderboard's tests: registered models evaluated through the
real path (StartRun's `start_run` -> Kafka -> score worker -> scorer over gRPC -> result sink -> store).

    ids = [register(engine, n) for n in range(2)]
    runs = evaluate(engine, {ids[0]: (checkpoint_a, BENCH), ids[1]: (checkpoint_b, BENCH)})  # {model id: run id}
    board = fill(engine, checkpoint_a, checkpoint_b, bootstrap, tmp)   # the board every leaderboard test reads

Each model gets a broker and a scorer of its own, so the workers never see another model's requests; all
the consumers are polled together, so the group joins overlap (two models take about as long as one).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from evaluator.pipeline.runs import run_state, start_run
from evaluator.pipeline.sink import ResultSink
from evaluator.pipeline.worker import ScoreWorker
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.store import registry, repository
from services.store.db import session_scope
from tests.evaluator.conftest import pumping, serving

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
BENCH = (str(SAMPLE / "open.jsonl"), str(SAMPLE / "human.jsonl"))


def register(engine: Engine, number: int, recipe: str = "human-debias") -> str:
    """A registered model (dataset, training, model) whose id the store makes up, its training reported to
    TensorBoard and MLflow (run `mlflow-<number>`); returns it."""
    with session_scope(engine) as session:
        dataset, _ = registry.add_dataset(session, f"{number + 1:064x}", recipe, f"d{number}.jsonl", 18, 150, 18)
        training = registry.create_training(session, dataset.id, "tiny-cpu", {}, "local", "out/trainings/{id}")
        reported = {"tensorboard": f"out/trainings/{training.id}/tensorboard", "mlflow": f"mlflow-{number}"}
        model, _ = registry.register_model(session, training.id, f"out/trainings/{training.id}/model", None, reported)
        return model.id


def evaluate(engine: Engine, models: Mapping[str, tuple[Path, Sequence[str]]]) -> dict[str, str]:
    """Evaluate each model (id -> (its checkpoint, bench files)) through Kafka; {model id: succeeded run id}."""
    runs: dict[str, str] = {}
    with ExitStack() as stack:
        consumers = []
        for model_id, (checkpoint, bench) in models.items():
            broker = stack.enter_context(EmbeddedBroker())
            broker.create_topics(topics.with_dead_letters(), partitions=1)
            scorer = stack.enter_context(serving(checkpoint, model_id))
            url = f"127.0.0.1:{scorer.grpc_port}"
            publisher = Publisher(broker.bootstrap)
            stack.callback(publisher.close)
            runs[model_id] = start_run(engine, publisher, list(bench), url, model_id=model_id)
            worker, sink = ScoreWorker(broker.bootstrap, url), ResultSink(broker.bootstrap, engine)
            stack.callback(worker.close)
            stack.callback(sink.close)
            consumers += [worker.consumer, sink.consumer]
        with pumping(*consumers) as pump:
            pump.wait_for(lambda: all(run_state(engine, r).state != "running" for r in runs.values()), what="runs")
    states = {m: run_state(engine, r).state for m, r in runs.items()}
    assert set(states.values()) == {"succeeded"}, states
    return runs


def stored_result(engine: Engine, run_id: str) -> dict:
    """The result JSON the sink stored on the run."""
    with session_scope(engine) as session:
        result = repository.get_run(session, run_id).result
    assert result is not None
    return result


def stored_scores(engine: Engine, run_id: str) -> dict[str, dict[str, float]]:
    with session_scope(engine) as session:
        return repository.run_scores(session, run_id)


@dataclass
class Board:
    """What `fill` stored: two evaluated models, one being evaluated, one never evaluated."""

    engine: Engine
    best: str  # the evaluated models, best first
    second: str
    running: str  # a registered model whose run is going (`SCORED` items scored)
    idle: str  # a registered model never evaluated
    runs: dict[str, str]  # evaluated model -> its succeeded run
    going: str  # the running run
    copies: Path  # the bench files `second` was evaluated on (copies of the sample's)


SCORED = 5


def fill(engine: Engine, checkpoint: Path, other: Path, bootstrap: str, tmp: Path) -> Board:
    """Four registered models: two evaluated through the real path (the second on copies of the bench files;
    the first has a newer failed run too), one whose run was started (nobody scores it; `SCORED` items are
    stored as the sink would) and one never evaluated."""
    copies = tmp / "bench"
    copies.mkdir()
    for path in BENCH:
        shutil.copy(path, copies)
    a, b, running, idle = (register(engine, n) for n in range(4))
    runs = evaluate(engine, {a: (checkpoint, BENCH), b: (other, [str(copies / Path(p).name) for p in BENCH])})
    with session_scope(engine) as session:  # a later run of `a` that failed: the board keeps the succeeded figures
        failed = repository.create_run(session, list(BENCH), "h:1", "paper", 5, 0, a)
        session.flush()
        repository.fail_run(session, failed, "the evaluation could not start: open.jsonl moved")
    publisher = Publisher(bootstrap)
    going = start_run(engine, publisher, list(BENCH), "127.0.0.1:1", model_id=running)
    publisher.close()
    score(engine, going, range(SCORED))
    overall = {m: stored_result(engine, r)["overall"] for m, r in runs.items()}
    best, second = sorted(overall, key=lambda m: -overall[m])
    return Board(engine, best, second, running, idle, runs, going, copies)


def score(engine: Engine, run_id: str, indexes: range) -> None:
    """Store scores of the run's items open:INDEX, as the result sink would."""
    with session_scope(engine) as session:
        for index in indexes:
            repository.record_scores(session, run_id, f"open:{index}", {"r1": 1.0, "r2": 0.5})
