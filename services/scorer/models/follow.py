"""`cheems serve --follow`: the default model is the registry's `production` model, and follows it.

    follower = Follower(feed, slot, lambda ref: load_served(config, ref), lookup, count=metrics.count_follow_event)
    follower.start()
    ...
    follower.stop()

The follower switches the default model (what calls that name no model get) when a model becomes production:
a ModelEvent whose step ends in `production` (a promotion, a rollback) on cheems.models.v1, or, every
`reconcile_seconds`, the registry's `production` alias read directly (an event relayed late or missed). An event
is only a hint: more than one service may write to the models topic, so what it says is checked in the registry
(`lookup`) before anything loads. The model it names must be registered, servable and production there, and the
path it carries (if any) the registry's; the model is then loaded from the registry's record, never from the event.
An event that does not match (an unknown id, a candidate said to be production, a production model with another
path: forged, or a step the registry has moved past) changes nothing, is logged as a WARNING naming the model id
and what did not match, and is counted (`count(result)`: `cheems_scorer_follow_events_total{result}`, result
`applied`, `ignored` (not a step to production), `refused` (did not match the registry) or `unverified` (the
registry could not be read: the reconciliation catches up)). Without a registry nothing an event says is acted on.

A registration changes nothing: a candidate is served only to the calls that name it (`ModelShelf`), so no
unevaluated model reaches an RLHF client by default. The new production model is loaded while the current one
keeps serving (its own Triton, or a second torch model, and its tokenizers), then `ModelSlot.swap` switches
atomically: calls already running finish on the old model, which is closed once they are done. A model that
fails to load leaves the current one serving; `slot.follow_error` (GetModelInfo.follow_error) says why until
a later one loads, and the same model is not tried again, whether the reconciliation or an event (a late one,
or one the outbox relays twice) names it. A broker that stops
answering is logged and retried; it never stops the serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from cheems.v1 import events_pb2, training_pb2
from services.scorer.errors import ScorerError, UnknownModel
from services.scorer.models.feed import ModelFeed
from services.scorer.models.loading import load_error, public_load_error
from services.scorer.models.served import ModelRef, ModelSlot, ServedModel
from services.scorer.models.shelf import Lookup
from services.store.lifecycle import PRODUCTION

log = logging.getLogger(__name__)
RETRY_SECONDS = 2.0  # pause after a failed poll (broker gone), before polling again


class Follower:
    def __init__(
        self,
        feed: ModelFeed,
        slot: ModelSlot,
        load: Callable[[ModelRef], ServedModel],
        lookup: Lookup | None = None,
        poll_ms: int = 500,
        reconcile_seconds: float = 5.0,
        count: Callable[[str], None] = lambda result: None,
    ) -> None:
        self.feed, self.slot, self.load, self.lookup, self.count = feed, slot, load, lookup, count
        self.poll_ms, self.reconcile_seconds = poll_ms, reconcile_seconds
        self.switches = 0
        self._failed = ""  # the production model that would not load: not tried again until another comes
        self._reconciled = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def handle(self, ref: ModelRef) -> bool:
        """Load `ref`, production now, and make it the default; True when it switched."""
        current = self.slot.current
        if current is not None and current.ref.model_id == ref.model_id:
            return False
        if ref.model_id == self._failed:  # would fail the same way: wait for another production model
            log.debug("model %s is production but did not load; not tried again", ref.model_id)
            return False
        log.info("model %s is production: loading %s beside the current one", ref.model_id, ref.path)
        started = time.monotonic()
        try:
            model = self.load(ref)
        except Exception as e:  # a broken checkpoint must not stop the serving, whatever it raises
            self.slot.follow_error, self._failed = public_load_error(ref, e), ref.model_id
            log.error("%s; still serving %s", load_error(ref, e), current.ref.model_id if current else "nothing")
            return False
        if self._stop.is_set():  # stopping: the server will not close what it does not hold
            model.close()
            return False
        self.slot.swap(model)
        self.slot.follow_error, self._failed = "", ""
        self.switches += 1
        log.info("now serving model %s (loaded in %.1f s)", ref.model_id, time.monotonic() - started)
        return True

    def on_event(self, event: events_pb2.ModelEvent) -> bool:
        """A step that makes a model production switches to it, once the registry confirms it (`verified`);
        anything else changes nothing."""
        model_id = event.model.model_id
        if event.change.to_state != PRODUCTION:
            step = event.change.action or "registered"
            log.info("model %s %s: served only to calls naming it", model_id, step)
            self.count("ignored")
            return False
        ref, result, why = self.verified(event.model)
        self.count(result)
        if ref is None:
            log.warning("ignoring a ModelEvent saying model %r is production: %s", model_id[:80], why)
            return False
        return self.handle(ref)

    def verified(self, claimed: training_pb2.Model) -> tuple[ModelRef | None, str, str]:
        """(the registry's record of a model an event says is production, "applied", "") when the registry holds
        it as production, at the path the event gives if it gives one; else (None, "refused" or "unverified",
        what did not match)."""
        if self.lookup is None:
            return None, "refused", "the scorer follows without a registry to check it against"
        try:
            ref, aliases = self.lookup(claimed.model_id)
        except UnknownModel as e:  # unknown, rejected, retired
            return None, "refused", f"the registry does not serve it ({e})"
        except ScorerError as e:  # the registry unreachable: the reconciliation reads it again later
            return None, "unverified", f"the registry could not be read ({e})"
        if ref.model_id != claimed.model_id:  # an alias given as an id
            return None, "refused", f"it is no model id: the registry resolves it to {ref.model_id}"
        if PRODUCTION not in aliases:
            return None, "refused", "it is registered, but the registry's production alias does not point at it"
        if claimed.path and claimed.path != ref.path:
            why = f"the event's path {claimed.path[:200]!r} is not the registry's path of that model"
            return None, "refused", why
        return ref, "applied", ""

    def reconcile(self) -> bool:
        """Switch to the registry's production model if it is not the default (a step whose event is late)."""
        self._reconciled = time.monotonic()
        if self.lookup is None:
            return False
        try:
            ref, _ = self.lookup(PRODUCTION)
        except ScorerError as e:  # no production model yet, or the registry away: nothing to do now
            log.debug("reconciling with the registry: %s", e)
            return False
        return self.handle(ref)

    def poll_once(self) -> None:
        for event in self.feed.poll(self.poll_ms):
            if self._stop.is_set():
                return
            self.on_event(event)
        if time.monotonic() - self._reconciled >= self.reconcile_seconds:
            self.reconcile()

    def start(self) -> Follower:
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll_once()
                except Exception:
                    log.exception("following the models topic failed; retrying in %.0f s", RETRY_SECONDS)
                    self._stop.wait(RETRY_SECONDS)

        self._thread = threading.Thread(target=loop, name="scorer-follow", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)  # a load in progress (a Triton starting) finishes first
        self.feed.close()
