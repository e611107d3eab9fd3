"""The models a scorer holds: the default one, and others a call names by id or alias, loaded on first use.

    shelf = ModelShelf(slot, lookup=registry_lookup(db_url), load=load_for_shelf, max_models=3)
    with shelf.lease("rm-3f2a") as model:    # "" = the default model (the slot); an id or "production"
        model.backend.score(...)

A named model is looked up in the registry (`lookup`: name -> ModelRef, or NotFound with the reason: unknown,
rejected, retired), loaded once however many calls ask for it at the same time, and kept; past
`max_models` (the default one counted) the least recently used one without calls in flight is unloaded
(closed once idle). A name resolved less than `recheck_seconds` ago is not looked up again; after that it
is, so a model the registry retires stops being served (NOT_FOUND naming why), and an alias follows the
registry. Without a registry (`cheems serve --model DIR`) only the default model is served, by its id or
by no name.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from services.scorer.errors import InvalidRequest, UnknownModel
from services.scorer.models.served import ModelRef, ModelSlot, ServedModel

log = logging.getLogger(__name__)
Lookup = Callable[[str], tuple[ModelRef, list[str]]]  # name -> (the model it names, that model's aliases)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # the registry's ids, and its aliases


def checked_name(name: str) -> str:
    """A model name as a request gives it: "" or an id or alias the registry could hold."""
    if name and not NAME.match(name):
        raise InvalidRequest(
            f"model: expected a model id or an alias (1-64 letters, digits, '.', '_' or '-'), got {name[:80]!r}"
        )
    return name


class ModelShelf:
    def __init__(
        self,
        slot: ModelSlot,
        load: Callable[[ModelRef], ServedModel] | None = None,
        lookup: Lookup | None = None,
        max_models: int = 3,
        recheck_seconds: float = 5.0,
    ) -> None:
        self.slot, self.load, self.lookup = slot, load, lookup
        self.max_models, self.recheck_seconds = max_models, recheck_seconds
        self._models: OrderedDict[str, ServedModel] = OrderedDict()  # least recently used first
        self._names: dict[str, tuple[str, float]] = {}  # name -> (model id, when it was looked up)
        self._aliases: dict[str, list[str]] = {}  # model id -> its aliases, as last looked up
        self._refs: dict[str, ModelRef] = {}  # model id -> where it is, as last looked up
        self._loading: dict[str, threading.Lock] = {}
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-load")  # one load at a time
        self._lock = threading.Lock()

    @contextmanager
    def lease(self, name: str = "") -> Iterator[ServedModel]:
        """The model `name` names, pinned for the whole call (UnknownModel when it is not served)."""
        checked_name(name)
        if not name or name == self._default_id():
            with self.slot.lease() as model:
                yield model
            return
        model = self._get(name)
        try:
            yield model
        finally:
            model.leave()

    def loaded(self) -> list[tuple[ServedModel, bool, list[str]]]:
        """(model, is the default, its aliases) of every model held, the default first."""
        with self._lock:
            others = list(self._models.values())
        default = self.slot.current
        found = [(default, True, self._aliases.get(default.ref.model_id, []))] if default is not None else []
        return found + [(m, False, self._aliases.get(m.ref.model_id, [])) for m in others]

    def held(self, model_id: str) -> ServedModel | None:
        """The loaded copy of a model, if the shelf holds one (a model about to become the default)."""
        with self._lock:
            model = self._models.get(model_id)
        return model if model is not None and not model.closed else None

    def handover(self, old: ServedModel | None, new: ServedModel) -> None:
        """The default model changed (`ModelSlot.handover`): the new one leaves the shelf, if it came from it, and
        the old one joins it, most recently used, for the calls that pinned it (an RLHF run keeps its rewards
        without a reload); past `max_models` the least recently used idle ones are unloaded."""
        with self._lock:
            if self._models.get(new.ref.model_id) is new:
                del self._models[new.ref.model_id]
            if old is not None and not old.closed:
                self._models[old.ref.model_id] = old
                self._models.move_to_end(old.ref.model_id)
            evicted = self._evict()
        self._unload(evicted)

    def close(self) -> None:
        self._loader.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            models, self._models = list(self._models.values()), OrderedDict()
        for model in models:
            model.close()

    def _default_id(self) -> str:
        current = self.slot.current
        return current.ref.model_id if current is not None else ""

    def _get(self, name: str) -> ServedModel:
        model_id = self._resolve(name)
        if model_id == self._default_id():
            with self.slot.lease() as default:  # counted in, then handed over with its count held
                default.enter()
            return default
        if (held := self._held(model_id)) is not None:
            return held
        with self._lock:
            loading = self._loading.setdefault(model_id, threading.Lock())
        with loading:  # one load per model, however many calls wait for it
            if (held := self._held(model_id)) is not None:
                return held
            ref = self._refs[model_id]
            started = time.monotonic()
            assert self.load is not None  # a lookup without a loader is refused by _resolve
            # on a thread of the shelf's own, one load at a time (two loads would fight over the cores)
            model = self._loader.submit(self.load, ref).result()
            log.info("loaded model %s for the calls naming it (%.1f s)", model_id, time.monotonic() - started)
            with self._lock:
                self._models[model_id] = model
                model.enter()
                evicted = self._evict()
        self._unload(evicted)
        return model

    def _unload(self, evicted: list[ServedModel]) -> None:
        for old in evicted:
            log.info("unloading model %s (least recently used; at most %d models)", old.ref.model_id, self.max_models)
            old.retire()

    def _held(self, model_id: str) -> ServedModel | None:
        """The model if it is loaded, counted in for a call and marked most recently used."""
        with self._lock:
            model = self._models.get(model_id)
            if model is None or model.closed:
                return None
            self._models.move_to_end(model_id)
            model.enter()
            return model

    def _resolve(self, name: str) -> str:
        """The id `name` names now: from the registry when not looked up within recheck_seconds."""
        if self.lookup is None or self.load is None:
            served = self._default_id() or "nothing yet"
            raise UnknownModel(f"model {name!r} is not served here: this scorer serves {served} only")
        with self._lock:
            known = self._names.get(name)
        if known is not None and time.monotonic() - known[1] < self.recheck_seconds:
            return known[0]
        try:
            ref, aliases = self.lookup(name)
        except UnknownModel:
            with self._lock:
                model_id = self._names.pop(name, (name, 0.0))[0]
                gone = self._models.pop(model_id, None)
            if gone is not None:
                gone.retire()
            raise
        with self._lock:
            self._names[name] = (ref.model_id, time.monotonic())
            self._aliases[ref.model_id] = aliases
            self._refs[ref.model_id] = ref
        return ref.model_id

    def _evict(self) -> list[ServedModel]:
        """Under the lock: take out the least recently used idle models past max_models (the default counts)."""
        evicted = []
        over = len(self._models) + (1 if self.slot.current is not None else 0) - self.max_models
        for model_id, model in list(self._models.items()):
            if over <= 0:
                break
            if model.in_flight == 0:
                del self._models[model_id]
                evicted.append(model)
                over -= 1
        return evicted
