"""The models of a store, best first, with their CheemsBench figures per subset: the terminal's leaderboard.

print(leaderboard(engine))
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from evaluator.report import from_json
from evaluator.table import render_text
from services.store import registry
from services.store.db import session_scope


def leaderboard(engine: Engine) -> str:
    """Model, dataset recipe, Overall and each subset's accuracy and exact match of its newest finished evaluation."""
    with session_scope(engine) as session:
        models = {m.id: m for m in registry.list_models(session)}
        newest = {}
        for run in reversed(registry.list_runs(session, limit=1000)):  # oldest first: the newest run wins
            if run.model_id in models and run.state == "succeeded" and run.result:
                newest[run.model_id] = from_json(run.result)
    if not models:
        return "no model registered yet"
    subsets = sorted({name for result in newest.values() for name in result.subsets})
    header = ["Model", "Dataset", "Overall", *(f"{s} {m}" for s in subsets for m in ("Acc.", "Exact."))]
    order = sorted(models, key=lambda m: (m in newest, newest[m].overall if m in newest else 0.0), reverse=True)
    rows = []
    for model_id in order:
        result = newest.get(model_id)
        row = [model_id, models[model_id].dataset_recipe or "(registered)", f"{result.overall:.4f}" if result else "-"]
        for name in subsets:
            subset = result.subsets.get(name) if result else None
            row += [f"{subset.accuracy:.4f}", f"{subset.exact_match:.4f}"] if subset else ["-", "-"]
        rows.append(row)
    return render_text(header, rows)
