"""scripts/dashboard_picture.py: its pure parts (template variables, legends, the grid layout, the scrape config).

The live run (a real `cheems demo` scraped by a real Prometheus) is the script itself, run by hand to redraw
docs/dashboard.png; it takes minutes, so it is not repeated here.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboard_picture", ROOT / "scripts" / "dashboard_picture.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


picture = load_script()
DASHBOARD = json.loads(picture.DASHBOARD.read_text())


def test_variables_in_both_spellings_are_replaced() -> None:
    expr = 'rate(x{namespace="$namespace", model_id=~"${model}"}[$__rate_interval])'
    got = picture.substitute(expr, {"namespace": "ns", "model": "m.*", "__rate_interval": "45s"})
    assert got == 'rate(x{namespace="ns", model_id=~"m.*"}[45s])'


def test_a_longer_name_is_not_cut_at_a_shorter_one() -> None:
    assert picture.substitute("$model_id $model", {"model": "a", "model_id": "b"}) == "b a"


def test_an_unknown_variable_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"\$cluster"):
        picture.substitute('up{cluster="$cluster"}', {"namespace": "ns"})


def test_every_panel_of_the_dashboard_gets_values_for_all_its_variables() -> None:
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            assert "$" not in picture.substitute(target["expr"]), panel["title"]


def test_legend_formats_fill_labels_and_leave_absent_ones_empty() -> None:
    assert picture.legend("{{model_id}} served ({{ pod }})", {"model_id": "rm-1", "pod": "scorer"}) == (
        "rm-1 served (scorer)"
    )
    assert picture.legend("{{job}} {{grpc_method}}", {"job": "cheems-scorer"}) == "cheems-scorer"
    assert picture.legend("", {"b": "2", "a": "1"}) == '{a="1", b="2"}'


def test_layout_places_panels_by_grid_position_top_down() -> None:
    panels = [
        {"title": "row", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}},
        {"title": "left", "gridPos": {"x": 0, "y": 1, "w": 8, "h": 4}},
        {"title": "right", "gridPos": {"x": 12, "y": 1, "w": 12, "h": 4}},
        {"title": "under", "gridPos": {"x": 0, "y": 5, "w": 24, "h": 5}},
    ]
    rows, boxes = picture.layout(panels)
    assert rows == 10
    row, left, right, under = boxes
    assert (row.left, row.width, row.bottom + row.height) == (0, 1, 1)
    assert (left.left, left.width, left.height) == (0, 8 / 24, 4 / 10)
    assert (right.left, right.width) == (0.5, 0.5)
    assert left.bottom == right.bottom == pytest.approx(0.5)
    assert (under.bottom, under.height) == (0, 0.5)


def test_the_dashboards_panels_do_not_overlap() -> None:
    _, boxes = picture.layout(DASHBOARD["panels"])
    eps = 1e-9
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = (
                a.left + a.width <= b.left + eps
                or b.left + b.width <= a.left + eps
                or a.bottom + a.height <= b.bottom + eps
                or b.bottom + b.height <= a.bottom + eps
            )
            assert apart, (a, b)


@pytest.mark.parametrize(
    "pos", [{"x": 20, "y": 0, "w": 8, "h": 4}, {"x": 0, "y": 0, "w": 0, "h": 4}, {"x": 0, "y": 0, "w": 8}]
)
def test_a_panel_off_the_grid_is_refused(pos: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="gridPos"):
        picture.layout([{"title": "bad", "gridPos": pos}])


def test_the_scrape_config_labels_targets_as_the_dashboard_selects_them() -> None:
    config = json.loads(picture.scrape_config({"scorer": "http://127.0.0.1:9001/metrics", "up": "http://h:2/m"}))
    assert config["global"]["scrape_interval"] == "2s"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"cheems-scorer", "cheems-up"}
    scorer = jobs["cheems-scorer"]
    assert scorer["static_configs"] == [
        {"targets": ["127.0.0.1:9001"], "labels": {"namespace": picture.NAMESPACE, "pod": "scorer"}}
    ]
    assert jobs["cheems-up"]["metrics_path"] == "/m"
