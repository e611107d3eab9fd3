"""Who may call the scorer: its static token (`--token`), and with `--accounts` the store's accounts allowed to score.

    authenticate = callers(config)          # None: no credential is asked (no --token, no --accounts)
    interceptors = guard(authenticate)      # [services.access.Guard] on the gRPC server, or []
    allowed(authenticate, token)            # HTTP: the Caller, or Unauthenticated / PermissionDenied

The scorer may run without a store, so its static token stays: it stands for a `scorer-client` caller named
"token". With `--accounts` (`cheems up` and the Kubernetes manifests pass it) a bearer token is also looked up in
the store's accounts (`services.store.accounts`, one read per call: a disabled account is refused at once), and
its role must be one that scores (`cheems.roles.SCORE`). Health, reflection, `/health` and `/metrics` stay open.
"""

from __future__ import annotations

import grpc

from cheems.roles import SCORER_CLIENT, Caller
from services.access import Authenticate, Guard, check, first_of, static_token
from services.scorer.config import ScorerConfig

STATIC = Caller("token", SCORER_CLIENT)  # whoever holds --token
SCORE = "/cheems.v1.RewardService/Score"  # what an HTTP call does, as far as roles go


def callers(config: ScorerConfig) -> Authenticate | None:
    """How a bearer token is checked, from the config; None when the scorer takes every call."""
    static = static_token(config.token, STATIC) if config.token else None
    book = None
    if config.accounts:
        from services.store.accounts import AccountBook
        from services.store.db import StoreConfig, create_engine_for

        book = AccountBook(create_engine_for(StoreConfig(config.db)))
    return first_of(static, book)


def guard(authenticate: Authenticate | None) -> list[grpc.ServerInterceptor]:
    """The gRPC server's interceptors: the Guard when a credential is asked."""
    return [Guard(authenticate)] if authenticate is not None else []


def allowed(authenticate: Authenticate, token: str) -> Caller:
    """The caller of an HTTP call bearing `token`, if it may score; Unauthenticated / PermissionDenied else."""
    return check(authenticate, token, SCORE)
