"""The annotator page's submit body (pure): what is taken as is, what is refused and why."""

from __future__ import annotations

import pytest

from services.annotation.web.form import InvalidForm, RankingForm, parse_form

KEYS = ["r1", "r2", "r3"]


def test_a_ranking_with_ties_and_a_discard_is_taken() -> None:
    body = {"annotation_id": "web-1", "order": [["r2"], ["r3"]], "discarded": ["r1"]}
    assert parse_form(body, KEYS) == RankingForm("web-1", [["r2"], ["r3"]], ["r1"])
    assert parse_form({"annotation_id": "w", "order": [KEYS]}, KEYS) == RankingForm("w", [KEYS], [])


def test_all_discarded_is_stored_as_one_group() -> None:
    form = parse_form({"annotation_id": "w", "order": [], "discarded": ["r3", "r1", "r2"]}, KEYS)
    assert form == RankingForm("w", [["r3", "r1", "r2"]], ["r1", "r2", "r3"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "JSON object"),
        ({"order": [KEYS]}, "annotation_id"),
        ({"annotation_id": "x" * 129, "order": [KEYS]}, "at most 128"),
        ({"annotation_id": 7, "order": [KEYS]}, "annotation_id"),
        ({"annotation_id": "w", "order": {"r1": 1}}, "order: expected a list"),
        ({"annotation_id": "w", "order": [KEYS], "discarded": "r1"}, "discarded: expected a list"),
        ({"annotation_id": "w", "order": [["r1"], []], "discarded": ["r2", "r3"]}, "may not be empty"),
        ({"annotation_id": "w", "order": [["r1", "r2"]]}, "'r3' is neither ranked nor discarded"),
        ({"annotation_id": "w", "order": [["r1", "r2", "r3", "r4"]]}, "'r4' is not a response"),
        ({"annotation_id": "w", "order": [["r1", "r2", "r3"]], "discarded": ["r3"]}, "named twice"),
        ({"annotation_id": "w", "order": [KEYS], "extra": 1}, "extra: unknown field"),
    ],
)
def test_bad_bodies_name_the_field(body: object, message: str) -> None:
    with pytest.raises(InvalidForm, match=message) as caught:
        parse_form(body, KEYS)
    assert caught.value.reason == "invalid_request"
