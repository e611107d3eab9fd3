"""The demo's settings, checked before anything starts (the demo itself runs in tests/integration/test_demo.py)."""

from __future__ import annotations

import pytest

from system.demo import MIN_ANNOTATORS, SAMPLE, DemoConfig, annotatable


def test_the_demo_needs_an_annotator_for_each_of_a_prompts_five_triples() -> None:
    assert DemoConfig().annotators == MIN_ANNOTATORS == 5
    with pytest.raises(ValueError, match="annotators must be >= 5"):
        DemoConfig(annotators=4)


def test_the_demo_waits_for_the_prompts_the_rule_filter_leaves_annotatable() -> None:
    """Two of the sample's open prompts keep fewer than three responses after the rule filter (garbled ones
    are part of the sample): no triple, so no human ranking to wait for."""
    assert annotatable(SAMPLE / "open.jsonl") == 16
