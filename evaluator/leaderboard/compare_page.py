"""The comparison page's HTML: models A and B side by side, per subset and per category, then the prompts
where their rewards disagree most, with the responses (Markdown), gold ranks and both models' rewards.

Pure: a `evaluator.leaderboard.comparison.Comparison` in, a whole HTML document out. Differences are A minus B.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from evaluator.leaderboard.comparison import CategoryDelta, Comparison, Disagreement, reward_positions
from evaluator.leaderboard.pages import SCRIPTS, compare_form, model_href, nav
from evaluator.leaderboard.standings import Standing
from evaluator.leaderboard.words import CSS, WORDS, card, diff_cell, num_cell, table
from services.web import escape, layout, render_markdown


def compare_page(view: Comparison, board: Sequence[Standing], lang: str) -> str:
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    a, b = view.a, view.b
    assert a.result is not None and b.result is not None
    title = f"{a.model_id} vs {b.model_id}"
    body = compare_form(board, lang, a.model_id, b.model_id)
    body += card(w("summary"), _subset_table(view, lang))
    body += card(w("per_category"), _category_table(view.deltas, lang))
    body += (
        f'<section class="card" id="disagreements"><h2>{w("disagree")}</h2><p class="muted">{w("disagree_note")}</p>'
    )
    if view.note:
        body += f'<p class="notice">{escape(view.note)}</p>'
    elif not view.disagreements:
        body += f'<p class="notice">{w("no_disagreement")}</p>'
    body += "".join(_disagreement(d, a.model_id, b.model_id, lang) for d in view.disagreements) + "</section>"
    api = f"/api/compare/{quote(a.model_id, safe='')}/{quote(b.model_id, safe='')}"
    body += f'<p class="muted">JSON: <a href="{api}">{escape(api)}</a></p>'
    return layout(title, body, lang, scripts=SCRIPTS, nav=nav(lang), head_html=CSS)


def _model_link(model_id: str, side: str) -> str:
    return f'{side} · <a href="{model_href(model_id)}">{escape(model_id)}</a>'


def _subset_table(view: Comparison, lang: str) -> str:
    """Overall and each subset's accuracy and exact match of A and B, and A − B."""
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    ra, rb = view.a.result, view.b.result
    assert ra is not None and rb is not None
    sides = [_model_link(view.a.model_id, "A"), _model_link(view.b.model_id, "B"), w("difference")]
    head = f"<tr><th>{w('subset')}</th><th></th>{_num_headers(sides)}</tr>"
    rows = [
        f'<tr data-row="overall"><th>{w("overall")}</th><td></td>{num_cell(ra.overall, "a")}'
        f"{num_cell(rb.overall, 'b')}{diff_cell(ra.overall - rb.overall, 'difference')}</tr>"
    ]
    for name in dict.fromkeys([*ra.subsets, *rb.subsets]):
        sa, sb = ra.subsets.get(name), rb.subsets.get(name)
        for metric in ("accuracy", "exact_match"):
            va, vb = getattr(sa, metric) if sa else None, getattr(sb, metric) if sb else None
            label = w("acc" if metric == "accuracy" else "exact")
            rows.append(
                f'<tr data-row="{escape(name)}.{metric}"><td>{escape(name)}</td><td>{label}</td>{num_cell(va, "a")}'
                f"{num_cell(vb, 'b')}{diff_cell(None if va is None or vb is None else va - vb, 'difference')}</tr>"
            )
    return table("compare-subsets", head, rows)


def _num_headers(labels: Sequence[str]) -> str:
    """Right-aligned header cells (labels are HTML)."""
    return "".join(f'<th class="num">{label}</th>' for label in labels)


def _category_table(deltas: Sequence[CategoryDelta], lang: str) -> str:
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    labels = [f"{side} {w(metric)}" for metric in ("acc", "exact") for side in ("A", "B", "Δ")]
    head = f"<tr><th>{w('subset')}</th><th>{w('category')}</th>{_num_headers(labels)}</tr>"
    rows = []
    for d in deltas:
        rows.append(
            f'<tr data-subset="{escape(d.subset)}" data-category="{escape(d.category)}"><td>{escape(d.subset)}</td>'
            f"<td>{escape(d.category)}</td>"
            f"{num_cell(d.a.accuracy if d.a else None, 'a.accuracy')}"
            f"{num_cell(d.b.accuracy if d.b else None, 'b.accuracy')}"
            f"{diff_cell(d.accuracy_difference, 'accuracy_difference')}"
            f"{num_cell(d.a.exact_match if d.a else None, 'a.exact_match')}"
            f"{num_cell(d.b.exact_match if d.b else None, 'b.exact_match')}"
            f"{diff_cell(d.exact_match_difference, 'exact_match_difference')}</tr>"
        )
    return table("compare-categories", head, rows)


def _disagreement(d: Disagreement, a_id: str, b_id: str, lang: str) -> str:
    """One prompt: where it is from, the tally, the prompt, and a row per response with gold rank and both rewards."""
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    bench = d.a.bench
    tally = (f'<span class="badge">{d.disagreements}/{d.comparisons} {w("disagreements")}</span> '
             f'A {w("right")} {d.a_right}/{d.comparisons} · B {w("right")} {d.b_right}/{d.comparisons}')  # fmt: skip
    system = bench.extra.get("sys_prompt")
    parts = [
        f'<article class="card disagreement" data-item="{escape(d.a.item)}" data-disagreements="{d.disagreements}">',
        f"<h3>{escape(d.a.subset)} · {escape(' / '.join(bench.category))} · <code>{escape(d.a.item)}</code></h3>",
        f"<p>{tally}</p>",
    ]
    if isinstance(system, str) and system:
        parts.append(f'<p class="muted">{w("system_prompt")}: <span class="prompt-text">{escape(system)}</span></p>')
    parts.append(f'<div class="md prompt">{render_markdown(bench.input)}</div>')
    head = (f'<tr><th>{w("response")}</th><th class="num">{w("gold")}</th>'
            f'<th class="num" title="{escape(a_id)}">A {w("place")}</th>'
            f'<th class="num" title="{escape(b_id)}">B {w("place")}</th>'
            f'<th class="num" title="{escape(a_id)}">A {w("score")}</th>'
            f'<th class="num" title="{escape(b_id)}">B {w("score")}</th><th></th></tr>')  # fmt: skip
    places_a, places_b = reward_positions(d.a.rewards), reward_positions(d.b.rewards)
    rows = []
    for response in sorted(bench.responses, key=lambda r: (bench.rank[r.id], r.id)):
        rid = response.id
        rows.append(
            f'<tr data-response="{escape(rid)}"><td><code>{escape(rid)}</code></td>'
            f'<td class="num">{bench.rank[rid]}</td><td class="num">{places_a.get(rid, "–")}</td>'
            f'<td class="num">{places_b.get(rid, "–")}</td>'
            f"{num_cell(d.a.rewards.get(rid), 'a_score')}{num_cell(d.b.rewards.get(rid), 'b_score')}"
            f'<td class="content"><div class="md scroll">{render_markdown(response.content)}</div></td></tr>'
        )
    parts.append(f'<table class="data responses"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>')
    return "".join(parts) + "</article>"
