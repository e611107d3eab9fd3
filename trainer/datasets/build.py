"""Make a dataset from the store: annotations -> recipe (`trainer.datasets.recipes`) -> content-hashed file -> registry.

    dataset, created = create_dataset(engine, "human+ai-distant-debias", DatasetOptions("out/cheems"))

Every prompt with a resolved ranking is read with its annotations (relations as the annotation
service resolves them, discarded responses left out). Distant supervision scores the responses with
the supervisor, as the paper does: a reward model trained on human rankings only (the newest model whose
dataset recipe is `human`, or the one `supervisor` names), never one chosen by its CheemsBench score (the
benchmark would then steer what enters the training data). It scores in this process, on `score_device` in
`score_dtype` (auto: the GPU when there is one, in bfloat16), many prompts a forward: the scorer's own
tokenization (left truncation) and offline batched path (`services.scorer.offline.jobs`). Before such a model
exists, a `*-distant` recipe makes no dataset: it waits (`NoSupervisor`, saying why) and takes no AI relation
unfiltered. The dataset records its supervisor, and in `details` how it was made: the settings (distant
supervision's margins, the debias seed, the supervisor's truncation) and the counts per source before and
after each step (`dataset_details`; `cheems status --json` shows it under `datasets`, as does the model page).
The pairs are written atomically in the CheemsPreference layout to <data_dir>/datasets/<sha256>.jsonl,
whose sha256 is the dataset id: the same content is the same dataset, stored and announced
(cheems.datasets.v1) once. A recipe that finds no pair raises EmptyDataset and stores nothing.

A new dataset's DatasetEvent is queued in the store's outbox in the transaction that registers it; the training
service's relay (`topics.RELAYED_BY["training"]`) publishes it after the commit, so a broker outage delays it and
loses none. The training service kicks its relay once the dataset is made; a dataset made where no relay runs (a
service started without a broker, the in-process service of `cheems ablation`, a script) leaves its event in the
outbox until the training service's relay publishes it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cheems.errors import Conflict, InvalidInput
from cheems.formats.preference import PreferenceItem, write_preference
from cheems.formats.responses import Response
from cheems.v1 import events_pb2
from services.annotation.algorithm.discards import dropped, surviving, vote_of
from services.annotation.algorithm.resolve import Relation
from services.annotation.files.annotations import relations_of
from services.annotation.service import repository_rankings
from services.bus import topics
from services.bus.codec import encode
from services.store import outbox, registry, repository
from services.store.db import session_scope
from services.store.filtered import reasons_by_prompt
from services.store.models import Dataset, RegisteredModel
from trainer.datasets.recipes import (
    HUMAN_RECIPE,
    AnnotatedPrompt,
    DatasetRecipe,
    DatasetStats,
    DistantSettings,
    EmptyDataset,
    dataset_recipe,
    preference_pairs,
    without,
)
from trainer.service.messages import dataset_message

if TYPE_CHECKING:  # torch is loaded where a supervisor scores, not with the service's modules
    from services.scorer.offline.jobs import OfflineScoring

log = logging.getLogger(__name__)


class NoSupervisor(Conflict):
    """A recipe with distant supervision, and no model trained on human rankings to supervise yet."""

    reason = "no_supervisor"


def choose_supervisor(session: Session, recipe: DatasetRecipe, supervisor_id: str = "") -> RegisteredModel | None:
    """The supervisor of a recipe that filters AI relations (None for one that does not)."""
    if not recipe.needs_scores:
        return None
    candidates = registry.human_trained_models(session)
    if supervisor_id:
        chosen = next((m for m in candidates if m.id == supervisor_id), None)
        if chosen is None:
            known = ", ".join(m.id for m in candidates) or "none yet"
            raise InvalidInput(
                f"supervisor {supervisor_id!r} is not a registered model trained on human rankings only "
                f"(dataset recipe {HUMAN_RECIPE}); those are: {known}"
            )
        return chosen
    if not candidates:
        raise NoSupervisor(
            f"dataset recipe {recipe.name} waits: distant supervision needs a reward model trained on human "
            f"rankings only (dataset recipe {HUMAN_RECIPE}), and none is registered yet; train one on the "
            f"{HUMAN_RECIPE} recipe first (the training service's auto mode does so by itself)"
        )
    return candidates[0]


@dataclass(frozen=True)
class DatasetOptions:
    data_dir: str  # datasets go to <data_dir>/datasets/<sha256>.jsonl
    seed: int = 0  # length debiasing's sample
    score_max_length: int = 2048  # tokens per response when the supervisor scores (left-truncated)
    distant: DistantSettings = field(default_factory=DistantSettings)  # when the supervisor drops an AI relation
    score_device: str = "auto"  # where the supervisor scores: auto = cuda when torch has CUDA here, else cpu
    score_dtype: str = "auto"  # what it computes in: auto = bfloat16 on CUDA, float32 on the CPU

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ValueError("data_dir: required (where datasets and trainings are written)")
        if self.score_max_length < 1:
            raise ValueError(f"score_max_length must be >= 1, got {self.score_max_length}")

    @property
    def scoring(self) -> OfflineScoring:
        """How the supervisor scores: the scorer's offline batched path (`services.scorer.offline.jobs`)."""
        from services.scorer.offline.jobs import OfflineScoring

        return OfflineScoring(self.score_device, self.score_dtype, max_length=self.score_max_length)


def annotated_prompts(session: Session, kept_out: Mapping[str, Mapping[str, str]]) -> list[AnnotatedPrompt]:
    """Every prompt with a stored ranking, in prompt-id order, with its relations by annotator kind; responses most
    annotations that saw them discarded (`algorithm.discards`: a discard is one annotator's vote, their own relations
    of it go) or the rule filter kept out of annotation (`kept_out`: `reasons_by_prompt`) are left out."""
    prompts = []
    for prompt, _rank in repository_rankings(session):
        responses = repository.responses_for(session, prompt.id)
        votes = [  # a discard is its annotator's vote, as the annotation service resolves it
            (a.kind, vote_of(relations_of(a.result, set(responses), "store", 0, a.id), a.discarded or []))
            for a in repository.annotations_for(session, prompt.id)
        ]
        discarded = set(kept_out.get(prompt.id, ())) | dropped([vote for _, vote in votes])
        by_kind: dict[str, list[Relation]] = {"human": [], "ai": []}
        for kind, vote in votes:
            by_kind[kind] += surviving(vote, frozenset(discarded))
        prompts.append(
            AnnotatedPrompt(
                prompt.id,
                prompt.text,
                tuple(Response(k, c) for k, c in responses.items() if k not in discarded),
                without(by_kind["human"], discarded),
                without(by_kind["ai"], discarded),
                tuple(prompt.category or ()),
                prompt.system_prompt,
                tuple(prompt.history or ()),
            )
        )
    return prompts


def to_supervise(prompts: Sequence[AnnotatedPrompt], recipe: DatasetRecipe) -> list[AnnotatedPrompt]:
    """The prompts whose AI relations the recipe filters (those it ranks from AI annotations)."""
    return [p for p in prompts if p.ai and not (recipe.human and p.human)]


def supervisor_scores(
    prompts: Sequence[AnnotatedPrompt], model_dir: str, scoring: OfflineScoring
) -> dict[str, dict[str, float]]:
    """{prompt id: {response id: reward}} from the model at `model_dir`, scored in this process on the device and
    in the dtype `scoring` says, many prompts a forward (`services.scorer.offline.jobs`)."""
    from services.scorer.offline.jobs import score_jobs
    from services.scorer.tokenization import make_job

    jobs = [
        make_job(
            p.text,
            [r.content for r in p.responses],
            p.system_prompt or "",
            [(t["role"], t["content"]) for t in p.history],
            max_responses=10**6,
        )
        for p in prompts
    ]
    values = score_jobs(jobs, model_dir, scoring)
    return {
        p.prompt_id: {r.id: v for r, v in zip(p.responses, scores, strict=True)}
        for p, scores in zip(prompts, values, strict=True)
    }


def write_content_addressed(directory: Path, items: Sequence[PreferenceItem]) -> tuple[str, Path]:
    """Write the preference lines atomically as <sha256>.jsonl in `directory`; (sha256, path)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".dataset.", suffix=".jsonl", dir=directory)
    os.close(fd)
    try:
        write_preference(tmp, items)
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        path = directory / f"{digest}.jsonl"
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return digest, path


def dataset_details(
    recipe: DatasetRecipe,
    options: DatasetOptions,
    supervisor: str | None,
    stats: DatasetStats,
    rule_filtered: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """What a dataset records of how it was made: the settings each of its steps used, and what each step left.
    `rule_filtered`: responses of its prompts the rule filter kept out of annotation, by reason (with threshold)."""
    settings: dict[str, Any] = {}
    if recipe.needs_scores:
        settings["distant_supervision"] = {
            "supervisor_model_id": supervisor,
            **options.distant.as_json(),
            "score_max_length": options.score_max_length,
        }
    if recipe.debias:
        settings["length_debias"] = {"applies_to": "ai", "seed": options.seed}
    counts = {"responses_filtered_by_rule": dict(rule_filtered or {}), **stats.as_json()}
    return {"recipe": recipe.name, "settings": settings, "counts": counts}


def create_dataset(
    engine: Engine, recipe_name: str, options: DatasetOptions, supervisor_id: str = ""
) -> tuple[Dataset, bool]:
    """Make the recipe's dataset from the store; (the stored dataset, whether it is new), a new one's event queued
    in the outbox with it. `supervisor_id`: the human-trained model that filters AI relations (default: the
    newest); NoSupervisor when there is none yet."""
    recipe = dataset_recipe(recipe_name)
    with session_scope(engine) as session:
        supervisor = choose_supervisor(session, recipe, supervisor_id)
        supervisor_path, supervisor_name = (supervisor.path, supervisor.id) if supervisor else ("", None)
        kept_out = reasons_by_prompt(session)
        prompts = annotated_prompts(session, kept_out)
    rule_filtered = Counter(reason for p in prompts for reason in kept_out.get(p.prompt_id, {}).values())
    scores: Mapping[str, Mapping[str, float]] | None = None
    if supervisor_name is not None:
        log.info("dataset recipe %s: distant supervision by %s (human-trained)", recipe.name, supervisor_name)
        scores = supervisor_scores(to_supervise(prompts, recipe), supervisor_path, options.scoring)
    items, stats = preference_pairs(prompts, recipe, scores, options.seed, options.distant)
    if not items:
        raise EmptyDataset(
            f"dataset recipe {recipe.name}: no preference pair among {len(prompts)} ranked prompts "
            f"({stats.resolved} with annotations the recipe takes): nothing to train on"
        )
    digest, path = write_content_addressed(Path(options.data_dir) / "datasets", items)
    with session_scope(engine) as session:
        dataset, created = registry.add_dataset(
            session,
            digest,
            recipe.name,
            str(path),
            prompts=stats.prompts,
            pairs=stats.pairs,
            rankings=stats.resolved,
            supervisor_model_id=supervisor_name,
            details=dataset_details(recipe, options, supervisor_name, stats, dict(sorted(rule_filtered.items()))),
        )
        if created:
            announce(session, dataset)
    log.info(
        "dataset %s (%s): %d prompts, %d pairs (%d before debiasing), %d AI relations dropped by distant supervision%s",
        *(digest[:12], recipe.name, stats.prompts, stats.pairs, stats.pairs_before, stats.ai_relations_dropped),
        "" if created else "; already known",
    )
    return dataset, created


def announce(session: Session, dataset: Dataset) -> None:
    """Queue the dataset's DatasetEvent in the outbox, in `session`'s transaction (the one registering it)."""
    header = events_pb2.EventHeader(producer="training")
    event = events_pb2.DatasetEvent(header=header, dataset=dataset_message(dataset))
    outbox.add(session, topics.DATASETS, dataset.id, encode(topics.DATASETS, event).value)
