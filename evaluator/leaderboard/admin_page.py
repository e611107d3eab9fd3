"""The admin's controls on the leaderboard pages: promote a model (its page), roll production back (the board).

Pure HTML; static/admin.js sends the calls to the admin API (`admin.py`) with the token typed here, which the
browser keeps for the tab only (sessionStorage), and shows the API's answer or its refusal word for word.
"""

from __future__ import annotations

from collections.abc import Sequence

from evaluator.leaderboard.standings import Standing
from evaluator.leaderboard.words import WORDS
from services.web import escape

NEEDS_FORCE = ("rejected", "retired")


def _fields(lang: str, force: bool) -> str:
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    forced = f'<label><input type="checkbox" id="admin-force"> {w("admin_force")}</label>' if force else ""
    return (
        f'<label>{w("admin_token")} <input type="password" id="admin-token" autocomplete="off" '
        f'placeholder="chm_…"></label>'
        f'<label>{w("admin_reason")} <input type="text" id="admin-reason" maxlength="500"></label>{forced}'
    )


def promote_card(standing: Standing, lang: str) -> str:
    """On a registered model's page: promote it (a rejected or retired one only with "force" ticked)."""
    registered = standing.registered
    if registered is None:
        return ""
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    disabled = " disabled" if registered.state == "production" else ""
    return (
        f'<section class="card admin" id="admin" data-action="promote" data-model="{escape(standing.model_id)}">'
        f'<h2>{w("admin")}</h2><p class="muted">{w("admin_note")}</p>'
        f'<div class="admin-form">{_fields(lang, registered.state in NEEDS_FORCE)}'
        f'<button class="primary" type="button" id="admin-go"{disabled}>{w("admin_promote")}</button></div>'
        f'<p id="admin-message" role="status" aria-live="polite"></p></section>'
    )


def rollback_card(board: Sequence[Standing], lang: str) -> str:
    """On the board, when a model is in production: roll production back to the one before it."""
    if not any(s.registered is not None and s.registered.state == "production" for s in board):
        return ""
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    return (
        f'<section class="card admin" id="admin" data-action="rollback"><h2>{w("admin")}</h2>'
        f'<p class="muted">{w("admin_rollback_note")}</p><div class="admin-form">{_fields(lang, False)}'
        f'<button type="button" id="admin-go">{w("admin_rollback")}</button></div>'
        f'<p id="admin-message" role="status" aria-live="polite"></p></section>'
    )
