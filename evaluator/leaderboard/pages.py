"""The leaderboard's HTML: the board of every model, and one model's page (chart, per-category table, runs).

Pure: standings in, a whole HTML document out (`services.web.layout`, Chinese unless `lang` is "en").
Every figure cell carries its unrounded value in `data-value`; rows carry `data-model` and the newest
run's `data-state`, which the page's script (static/leaderboard.js) polls to update progress by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from evaluator.leaderboard.admin_page import promote_card, rollback_card
from evaluator.leaderboard.dataset_card import dataset_card
from evaluator.leaderboard.standings import ModelView, RunSummary, Standing, subset_names
from evaluator.leaderboard.words import CSS, WORDS, card, fmt, num_cell, table
from services.web import escape, layout

SCRIPTS = ("/static/web/page.js", "/static/leaderboard/leaderboard.js", "/static/leaderboard/admin.js")


def model_href(model_id: str) -> str:
    return "/models/" + quote(model_id, safe="")


def nav(lang: str) -> list[tuple[str, str]]:
    return [("/", WORDS.text("home", lang)), ("/api", WORDS.text("api", lang))]


def leaderboard_page(board: Sequence[Standing], lang: str) -> str:
    """Every model, best first: Overall, each subset's accuracy, exact match and ECE, and its evaluation's state."""
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    subsets = subset_names(board)
    head = [f'<th rowspan="2">{w(k)}</th>' for k in ("rank", "model", "dataset")]
    head += [f'<th rowspan="2" class="num">{w("overall")}</th>']
    head += [f'<th colspan="3" class="subset">{escape(s)}</th>' for s in subsets]
    head += [f'<th rowspan="2">{w("status")}</th>']
    second = "".join(f'<th class="num">{w(k)}</th>' for _ in subsets for k in ("acc", "exact", "ece"))
    rank, rows = 0, []
    for standing in board:
        rank += standing.result is not None
        rows.append(_board_row(standing, rank if standing.result is not None else None, subsets, lang))
    shown = table("leaderboard", f"<tr>{''.join(head)}</tr><tr>{second}</tr>", rows)
    if not board:
        shown = f'<p class="notice" id="empty">{w("no_models")}</p>'
    body = f'<section class="card">{shown}</section>{compare_form(board, lang)}{rollback_card(board, lang)}'
    body += '<p class="muted">JSON: <a href="/api/leaderboard">/api/leaderboard</a></p>'
    return layout(w("leaderboard"), body, lang, scripts=SCRIPTS, nav=nav(lang), head_html=CSS)


def _board_row(standing: Standing, rank: int | None, subsets: Sequence[str], lang: str) -> str:
    result = standing.result
    link = f'<a href="{model_href(standing.model_id)}">{escape(standing.model_id)}</a>'
    cells = [
        f'<td class="num" data-field="rank">{rank or ""}</td>',
        f"<td>{link}{state_html(standing, lang)}</td>",
        f"<td>{_made_by(standing, lang)}</td>",
        num_cell(result.overall if result else None, "overall", " best" if rank == 1 else ""),
    ]
    for name in subsets:
        subset = result.subsets.get(name) if result else None
        cells += [num_cell(subset.accuracy if subset else None, f"{name}.accuracy"),
                  num_cell(subset.exact_match if subset else None, f"{name}.exact_match"),
                  num_cell(subset.ece if subset else None, f"{name}.ece")]  # fmt: skip
    cells.append(f'<td class="status">{status_html(standing.latest, lang)}</td>')
    return f"<tr {_live(standing)}>{''.join(cells)}</tr>"


def state_html(standing: Standing, lang: str) -> str:
    """The model's lifecycle state: a badge for the production model, the state's word for the others."""
    registered = standing.registered
    if registered is None:
        return ""
    word = escape(WORDS.text(registered.state, lang))
    if registered.state == "production":
        return f' <span class="badge production" data-field="state" data-value="production">{word}</span>'
    return f' <span class="muted" data-field="state" data-value="{escape(registered.state)}">{word}</span>'


def _made_by(standing: Standing, lang: str) -> str:
    registered = standing.registered
    if registered is None:
        return ""
    return escape(registered.dataset_recipe) if registered.dataset_recipe else WORDS.text("registered_elsewhere", lang)


def _live(standing: Standing) -> str:
    """The attributes the page's script compares with the JSON it polls: model, newest run state, result run."""
    state = standing.latest.state if standing.latest else "none"
    evaluated = standing.evaluated.run_id if standing.evaluated else ""
    return f'data-model="{escape(standing.model_id)}" data-state="{state}" data-evaluated="{evaluated}"'


def status_html(run: RunSummary | None, lang: str) -> str:
    """The newest run's state; while running, a progress bar with items scored of the total."""
    if run is None:
        return f'<span class="muted">{WORDS.text("not_evaluated", lang)}</span>'
    if run.state == "running":
        return (
            f'<span class="badge">{WORDS.text("running", lang)}</span> '
            f'<progress value="{run.items_scored}" max="{max(run.items_total, 1)}"></progress> '
            f'<span class="progress-text">{run.items_scored}/{run.items_total}</span>'
        )
    if run.state == "failed":
        return f'<span class="badge bad" title="{escape(run.error or "")}">{WORDS.text("failed", lang)}</span>'
    return f'<span class="muted">{WORDS.text("succeeded", lang)}</span>'


def compare_form(board: Sequence[Standing], lang: str, a: str = "", b: str = "") -> str:
    """Two model pickers and a button: GET /compare?a=&b= (redirected to /compare/A/B)."""
    evaluated = [s.model_id for s in board if s.result is not None]
    if len(evaluated) < 2:
        return ""
    a, b = a or evaluated[0], b or evaluated[1]

    def picker(name: str, chosen: str) -> str:
        options = "".join(f'<option value="{escape(m)}"{" selected" if m == chosen else ""}>{escape(m)}</option>'
                          for m in evaluated)  # fmt: skip
        return f'<label>{name.upper()}<select name="{name}" id="pick-{name}">{options}</select></label>'

    return (
        f'<section class="card compare-form"><h2>{WORDS.text("compare", lang)}</h2>'
        f'<form method="get" action="/compare">{picker("a", a)}{picker("b", b)}'
        f'<input type="hidden" name="lang" value="{lang}">'
        f'<button class="primary" type="submit" id="compare">{WORDS.text("compare_go", lang)}</button></form></section>'
    )


def model_page(view: ModelView, board: Sequence[Standing], lang: str) -> str:
    """A model: its figures per subset, the per-category chart and table, and every run of it."""
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    standing, result = view.standing, view.standing.result
    registered = standing.registered
    facts = [(w("model"), escape(standing.model_id)), (w("rank"), str(view.rank or "–"))]
    if registered is not None:
        facts += [(w("state"), state_html(standing, lang)), (w("dataset"), _made_by(standing, lang)),
                  (w("recipe"), escape(registered.recipe or "–")),
                  (w("registered"), escape(registered.created_at.strftime("%Y-%m-%d %H:%M")))]  # fmt: skip
        if registered.tracking:  # where its training's figures are: TensorBoard's log dir, MLflow / W&B run ids
            facts.append((w("reported_to"), tracking_html(registered.tracking)))
    else:
        facts.append((w("dataset"), w("unregistered")))
    if result is not None:
        facts.append(
            (w("overall"), f'<strong id="overall" data-value="{result.overall!r}">{fmt(result.overall)}</strong>')
        )
    listed = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts)
    body = f'<section class="card" id="model" {_live(standing)}><dl class="facts">{listed}</dl></section>'
    if result is None:
        body += f'<p class="notice">{w("not_evaluated_yet")}</p>'
    else:
        chart = f"{model_href(standing.model_id)}/chart.svg"
        body += card(w("summary"), _subset_table(view, lang))
        body += card(w("chart"), f'<img id="chart" src="{chart}" alt="{w("chart")}">', "chart")
        body += card(w("per_category"), _category_table(view, lang))
    others = [s for s in board if s.result is not None and s.model_id != standing.model_id]
    if result is not None and others:
        body += compare_form(board, lang, standing.model_id, others[0].model_id)
    body += dataset_card(view.dataset, lang)
    body += card(w("history"), _runs_table(view.runs, lang))
    body += promote_card(standing, lang)
    api = f"/api/models/{quote(standing.model_id, safe='')}"
    body += f'<p class="muted">JSON: <a href="{api}">{escape(api)}</a></p>'
    return layout(standing.model_id, body, lang, scripts=SCRIPTS, nav=nav(lang), head_html=CSS)


def tracking_html(tracking: dict[str, Any]) -> str:
    """`tensorboard <code>DIR</code>, mlflow <code>RUN</code>` (escaped: the ids come from the training's files)."""
    parts = (f'{escape(str(k))} <code class="tracking" id="tracking-{escape(str(k))}">{escape(str(v))}</code>'
             for k, v in tracking.items())  # fmt: skip
    return ", ".join(parts)


def _subset_table(view: ModelView, lang: str) -> str:
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    result = view.standing.result
    assert result is not None
    head = "".join(f'<th class="num">{w(k)}</th>' for k in ("prompts", "pairs", "acc", "exact", "mean", "ece"))
    rows = []
    for name, s in result.subsets.items():
        rows.append(
            f'<tr data-subset="{escape(name)}"><td>{escape(name)}</td><td class="num">{s.prompts}</td>'
            f'<td class="num">{s.pairs}</td>{num_cell(s.accuracy, "accuracy")}{num_cell(s.exact_match, "exact_match")}'
            f"{num_cell((s.accuracy + s.exact_match) / 2, 'mean')}{num_cell(s.ece, 'ece')}</tr>"
        )
    rows.append(f'<tr><th>{w("overall")}</th><td colspan="4"></td>{num_cell(result.overall, "overall")}<td></td></tr>')
    return table("subsets", f"<tr><th>{w('subset')}</th>{head}</tr>", rows)


def _category_table(view: ModelView, lang: str) -> str:
    """The report's per-category table: a row per category, Acc./Exact. per subset ("–" where absent)."""
    result = view.standing.result
    assert result is not None
    names = list(result.subsets)
    head = [f"<th>{WORDS.text('category', lang)}</th>"]
    head += [f'<th class="num">{escape(n)} {WORDS.text(m, lang)}</th>' for n in names for m in ("acc", "exact")]
    rows = []
    for category in sorted({c for s in result.subsets.values() for c in s.per_category}):
        cells = [f"<td>{escape(category)}</td>"]
        for name in names:
            m = result.subsets[name].per_category.get(category)
            cells += [num_cell(m.accuracy if m else None, f"{name}.accuracy"),
                      num_cell(m.exact_match if m else None, f"{name}.exact_match")]  # fmt: skip
        rows.append(f'<tr data-category="{escape(category)}">{"".join(cells)}</tr>')
    return table("categories", f"<tr>{''.join(head)}</tr>", rows)


def _runs_table(runs: Sequence[RunSummary], lang: str) -> str:
    w = lambda key: WORDS.text(key, lang)  # noqa: E731
    head = "".join(f"<th>{w(k)}</th>" for k in ("run", "started", "status", "bench", "semantics"))
    rows = []
    for run in runs:
        files = "<br>".join(escape(f.rsplit("/", 1)[-1]) for f in run.bench_files)
        reason = f'<div class="muted">{escape(run.error)}</div>' if run.error else ""
        rows.append(
            f'<tr data-run="{escape(run.run_id)}" data-state="{run.state}">'
            f"<td><code>{escape(run.run_id[:12])}</code></td>"
            f"<td>{escape(run.created_at.strftime('%Y-%m-%d %H:%M:%S'))}</td><td>{status_html(run, lang)}{reason}</td>"
            f'<td title="{escape(", ".join(run.bench_files))}">{files}</td><td>{escape(run.semantics)}</td>'
            f"{num_cell(run.result.overall if run.result else None, 'overall')}</tr>"
        )
    return table("runs", f'<tr>{head}<th class="num">{w("overall")}</th></tr>', rows)
