"""The model page's training-data card: the dataset a model was trained on and how it was made (pure HTML).

    dataset_card(registry.dataset_json(dataset), "en")

Shows the recipe, sizes and supervisor, then each step's settings (distant supervision's margins, length
debiasing's seed) and the counts each step left: AI relations before and after distant supervision, pairs per
source before and after length debiasing, responses the rule filter kept out of annotation
(trainer.datasets.build.dataset_details).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from evaluator.leaderboard.words import WORDS, card, table
from services.web import escape


def dataset_card(dataset: Mapping[str, Any] | None, lang: str) -> str:
    """The card ("" for a model with no dataset: registered from a directory)."""
    if dataset is None:
        return ""
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    supervisor = dataset.get("supervisor_model_id")
    facts = [
        (w("dataset_id"), f'<code title="{escape(dataset["id"])}">{escape(dataset["id"][:12])}</code>'),
        (w("dataset"), escape(dataset["recipe"])),
        (w("prompts"), str(dataset["prompts"])),
        (w("pairs"), f'<span id="dataset-pairs">{dataset["pairs"]}</span>'),
        (w("supervisor"), _model_link(supervisor) if supervisor else "–"),
    ]
    inner = '<dl class="facts">' + "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts) + "</dl>"
    details = dataset.get("details")
    if details is None:
        inner += f'<p class="muted">{w("no_details")}</p>'
    else:
        counts = details.get("counts", {})
        inner += _settings(details.get("settings", {}), lang) + _counts(counts, lang) + _rule_filtered(counts, lang)
    return card(w("training_data"), inner, "dataset")


def _model_link(model_id: str) -> str:
    return f'<a href="/models/{quote(model_id, safe="")}">{escape(model_id)}</a>'


def _settings(settings: Mapping[str, Mapping[str, Any]], lang: str) -> str:
    rows = []
    for step, values in settings.items():
        shown = ", ".join(f"{escape(k)} = {escape('–' if v is None else str(v))}" for k, v in values.items())
        rows.append(f'<tr data-step="{escape(step)}"><td>{escape(step)}</td><td>{shown}</td></tr>')
    if not rows:
        return ""
    head = f"<tr><th>{WORDS.text('step', lang)}</th><th>{WORDS.text('settings', lang)}</th></tr>"
    return table("dataset-settings", head, rows)


def _rule_filtered(counts: Mapping[str, Any], lang: str) -> str:
    """The responses of its prompts the rule filter kept out of annotation, by rule and threshold."""
    reasons = counts.get("responses_filtered_by_rule") or {}
    if not reasons:
        return ""
    shown = ", ".join(f"<code>{escape(r)}</code> × {n}" for r, n in reasons.items())
    return f'<p id="rule-filtered">{WORDS.text("rule_filtered", lang)}: {shown}</p>'


def _counts(counts: Mapping[str, Any], lang: str) -> str:
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    rows = []
    for source, numbers in counts.get("pairs_by_source", {}).items():
        rows.append(
            f'<tr data-source="{escape(source)}"><td>{escape(source)}</td>'
            f'<td class="num">{numbers.get("before", "–")}</td><td class="num">{numbers.get("after", "–")}</td></tr>'
        )
    if counts.get("ai_relations"):
        left = counts["ai_relations"] - counts.get("ai_relations_dropped_by_distant_supervision", 0)
        left -= counts.get("ai_ties_dropped_by_distant_supervision", 0)
        rows.append(
            f'<tr data-source="ai-relations"><td>{w("ai_relations")}</td>'
            f'<td class="num">{counts["ai_relations"]}</td><td class="num">{left}</td></tr>'
        )
    if not rows:
        return ""
    head = f"<tr><th>{w('source')}</th><th class='num'>{w('before')}</th><th class='num'>{w('after')}</th></tr>"
    return table("dataset-counts", head, rows)
