"""The model page's training-data card: recipe, supervisor, each step's settings and counts, escaped."""

from __future__ import annotations

from evaluator.leaderboard.dataset_card import dataset_card

DETAILS = {
    "recipe": "human+ai-distant-debias",
    "settings": {
        "distant_supervision": {"supervisor_model_id": "rm-1", "margin": 0.0, "tie_margin": None},
        "length_debias": {"applies_to": "ai", "seed": 3},
    },
    "counts": {
        "responses_filtered_by_rule": {"non_chinese<0.3": 4, "too_long>8000": 1},
        "ai_relations": 40,
        "ai_relations_dropped_by_distant_supervision": 9,
        "ai_ties_dropped_by_distant_supervision": 1,
        "pairs_by_source": {"human": {"before": 12, "after": 12}, "ai": {"before": 50, "after": 31}},
    },
}
DATASET = {"id": "ab" * 32, "recipe": "human+ai-distant-debias", "prompts": 9, "pairs": 43, "rankings": 9,
           "supervisor_model_id": "rm-1", "created_at": "2026-11-25T00:00:00", "details": DETAILS}  # fmt: skip


def row(html: str, marker: str) -> str:
    start = html.index(marker)
    return html[start : html.index("</tr>", start)]


def test_the_steps_and_their_counts() -> None:
    html = dataset_card(DATASET, "en")
    assert "Training data" in html and f'title="{"ab" * 32}"' in html and 'id="dataset-pairs">43<' in html
    assert '<a href="/models/rm-1">rm-1</a>' in html  # the supervisor's own page
    assert "margin = 0.0, tie_margin = –" in row(html, 'data-step="distant_supervision"')
    assert "seed = 3" in row(html, 'data-step="length_debias"')
    assert '"num">50</td><td class="num">31<' in row(html, 'data-source="ai"')
    assert '"num">12</td><td class="num">12<' in row(html, 'data-source="human"')
    assert '"num">40</td><td class="num">30<' in row(html, 'data-source="ai-relations"')  # 40 - 9 - 1 left
    assert "<code>non_chinese&lt;0.3</code> × 4, <code>too_long&gt;8000</code> × 1" in html


def test_no_dataset_and_a_dataset_without_a_record() -> None:
    assert dataset_card(None, "en") == ""  # registered from a directory
    old = dataset_card({**DATASET, "supervisor_model_id": None, "details": None}, "zh")
    assert "训练数据" in old and "没有各步骤的记录" in old and "dataset-settings" not in old


def test_what_it_shows_is_escaped() -> None:
    bad = {**DATASET, "recipe": "<script>", "supervisor_model_id": "rm-<b>",
           "details": {"settings": {"<i>": {"k": "<x>"}}, "counts": {}}}  # fmt: skip
    html = dataset_card(bad, "en")
    assert "<script>" not in html and "&lt;script&gt;" in html and "<i>" not in html and "&lt;x&gt;" in html
    assert 'href="/models/rm-%3Cb%3E"' in html
