"""Train and evaluate one reward model per dataset recipe through a training service (`cheems ablation`).

    stub = training_pb2_grpc.TrainingServiceStub(open_channel("127.0.0.1:50057"))
    runs = run_ablation(stub, AblationConfig(bench=("open.jsonl", "human.jsonl")), log.info)

For each seed, "human" first, then every other recipe: CreateDataset (a distant recipe names that seed's human
model as its supervisor), StartTraining on it with `eval_files` = the bench files and `seed` = the seed, then
GetTraining until the run ends. The training evaluates its model on the bench files at its end and writes the
figures into the model's `cheems_metadata.json` (`final_eval`); they are read from the registered model's path.
Where that path is not readable here (another machine's storage), the row keeps the training's Overall only.
A recipe the service cannot make a dataset of (no pair: EmptyDataset; no supervisor) or whose run fails is a
Run with its reason; a request the service refuses for every recipe (a bad override, an unknown training
recipe) raises InvalidInput, and a service that does not answer raises Unavailable. The tables are
`trainer.ablation`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from cheems.errors import InvalidInput, Unavailable
from cheems.v1 import training_pb2
from evaluator.metrics import EvalResult
from evaluator.report import from_json
from services.grpc_errors import error_reason
from trainer.ablation import AblationConfig, Run, Score, plan
from trainer.datasets.recipes import HUMAN_RECIPE, dataset_recipe
from trainer.service.progress import METADATA

log = logging.getLogger(__name__)
State = training_pb2.TrainingState
RUNNING = (State.TRAINING_STATE_PENDING, State.TRAINING_STATE_RUNNING)
CALL_TIMEOUT = 60.0  # seconds for a call that only reads the store
# codes of CreateDataset that concern one recipe (its row says why), not the whole ablation
RECIPE_CODES = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND)


def unavailable(error: grpc.RpcError, what: str) -> Unavailable:
    return Unavailable(f"the training service did not answer {what}: {error.code().name} {error.details()}")


def run_ablation(stub: Any, config: AblationConfig, echo: Callable[[str], None] = log.info) -> list[Run]:
    """Every recipe of the plan once per seed, in order; `echo` hears what starts and how each ends."""
    runs = []
    for seed in config.seeds:
        supervisor: Run | None = None
        for recipe in plan(config.recipes):
            if recipe == HUMAN_RECIPE:
                run = supervisor = train_recipe(stub, config, recipe, seed, "", echo)
            elif dataset_recipe(recipe).needs_scores and not (supervisor and supervisor.model_id):
                why = supervisor.error if supervisor else "it was not trained"
                run = Run(recipe, seed, error=f"no supervisor: the human recipe's model (seed {seed}) failed: {why}")
            else:
                model = supervisor.model_id if supervisor and dataset_recipe(recipe).needs_scores else ""
                run = train_recipe(stub, config, recipe, seed, model, echo)
            echo(
                f"{recipe} (seed {seed}): " + (f"Overall {run.overall:.4f}" if run.ok else f"not trained: {run.error}")
            )
            runs.append(run)
    return runs


def train_recipe(
    stub: Any, config: AblationConfig, recipe: str, seed: int, supervisor: str, echo: Callable[[str], None]
) -> Run:
    """Make the recipe's dataset, train on it, and read the model's figures."""
    try:
        dataset = stub.CreateDataset(training_pb2.CreateDatasetRequest(recipe=recipe, supervisor=supervisor))
    except grpc.RpcError as e:
        if e.code() in RECIPE_CODES:
            return Run(recipe, seed, supervisor=supervisor, error=e.details() or error_reason(e))
        raise unavailable(e, f"CreateDataset({recipe})") from None
    run = Run(recipe, seed, dataset.dataset_id, dataset.pairs, dataset.supervisor_model_id)
    overrides = {**config.overrides, "eval_files": json.dumps(list(config.bench)), "seed": str(seed)}
    request = training_pb2.StartTrainingRequest(
        dataset_id=dataset.dataset_id, recipe=config.training_recipe, overrides=overrides
    )
    try:
        training = stub.StartTraining(request)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
            raise InvalidInput(f"the training service refused the training: {e.details()}") from None
        raise unavailable(e, f"StartTraining({recipe})") from None
    echo(f"{recipe} (seed {seed}): training {training.training_id}, {dataset.pairs} pairs")
    training = wait(stub, training, config)
    run = replace(run, training_id=training.training_id)
    if training.state != State.TRAINING_STATE_SUCCEEDED:
        state = State.Name(training.state).removeprefix("TRAINING_STATE_").lower()
        return replace(run, error=f"training {training.training_id} {state}: {training.error}")
    return figures(stub, replace(run, model_id=training.model_id), training)


def wait(stub: Any, training: Any, config: AblationConfig) -> Any:
    """GetTraining until the run ends; past `config.timeout` it is cancelled (and so ends)."""
    began = time.monotonic()
    request = training_pb2.GetTrainingRequest(training_id=training.training_id)
    while training.state in RUNNING:
        if config.timeout and time.monotonic() - began > config.timeout:
            log.warning("training %s: over --timeout %g s; cancelling it", training.training_id, config.timeout)
            cancel = training_pb2.CancelTrainingRequest(training_id=training.training_id)
            try:
                training = stub.CancelTraining(cancel, timeout=CALL_TIMEOUT)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.FAILED_PRECONDITION:  # it ended meanwhile: read it below
                    raise unavailable(e, "CancelTraining") from None
            training = stub.GetTraining(request, timeout=CALL_TIMEOUT)
            if training.state == State.TRAINING_STATE_CANCELLED:
                training.error = f"cancelled after --timeout {config.timeout:g} s"
            continue
        time.sleep(config.poll_seconds)
        try:
            training = stub.GetTraining(request, timeout=CALL_TIMEOUT)
        except grpc.RpcError as e:
            raise unavailable(e, f"GetTraining({training.training_id})") from None
    return training


def figures(stub: Any, run: Run, training: Any) -> Run:
    """The model's CheemsBench figures from its metadata; the training's Overall alone when that is not readable."""
    try:
        models = stub.ListModels(training_pb2.ListModelsRequest(), timeout=CALL_TIMEOUT).models
    except grpc.RpcError as e:
        raise unavailable(e, "ListModels") from None
    path = next((m.path for m in models if m.model_id == run.model_id), "")
    result = final_eval(Path(path)) if path else None
    if result is None:
        overall = training.overall if training.HasField("overall") else None
        note = f"per-subset figures not readable here (model at {path or 'an unknown path'})"
        return replace(run, overall=overall, note=note, error="" if overall is not None else note)
    subsets = {name: Score(s.accuracy, s.exact_match) for name, s in result.subsets.items()}
    return replace(run, overall=result.overall, subsets=subsets)


def final_eval(model_dir: Path) -> EvalResult | None:
    """The EvalResult of the training's final evaluation, from `cheems_metadata.json`; None when absent."""
    try:
        metadata = json.loads((model_dir / METADATA).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    data = metadata.get("final_eval") if isinstance(metadata, dict) else None
    try:
        return from_json(data) if isinstance(data, dict) else None
    except (KeyError, TypeError, ValueError):
        log.warning("%s: final_eval is not an evaluation result", model_dir / METADATA)
        return None
