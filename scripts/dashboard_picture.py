"""A picture of the Grafana dashboard (k8s/components/monitoring/dashboards/cheems.json) drawn from real data.

No Grafana runs here, so this draws the dashboard itself: it starts `cheems demo` (a real `cheems up` on the
bundled sample, driven through ingest, annotation, training, the scorer switch and a Kafka evaluation) or takes
`--target name=url` of a system already running, points Debian's Prometheus server at every /metrics URL
(2 s scrapes), and when the traffic is over evaluates each panel's own PromQL with /api/v1/query_range and
draws it with matplotlib at its gridPos. Everything it started is stopped, on error too.

    .venv/bin/python scripts/dashboard_picture.py --out docs/dashboard.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "k8s" / "components" / "monitoring" / "dashboards" / "cheems.json"
PROMETHEUS = "/usr/bin/prometheus"
NAMESPACE = "local"  # the label this script's scrape config gives every target, what $namespace selects
GRID_COLUMNS = 24
VARIABLES = {"namespace": NAMESPACE, "model": ".*", "__rate_interval": "30s", "__interval": "10s", "__range": "1h"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def substitute(expr: str, variables: Mapping[str, str] = VARIABLES) -> str:
    """The dashboard's `$name` / `${name}` template variables replaced by values; an unknown one is an error."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            raise ValueError(f"the dashboard uses ${name}, which has no value here (known: {sorted(variables)})")
        return variables[name]

    return _VARIABLE.sub(value, expr)


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """A series' name as Grafana writes it: `{{label}}` replaced by the label's value (empty when absent)."""
    if not fmt:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return _LABEL.sub(lambda m: labels.get(m.group(1), ""), fmt).strip()


@dataclass(frozen=True)
class Box:
    """A panel's place in the figure, as fractions of its width and height (matplotlib's axes rectangle)."""

    left: float
    bottom: float
    width: float
    height: float


def layout(panels: list[dict[str, Any]], columns: int = GRID_COLUMNS) -> tuple[int, list[Box]]:
    """Grid rows the dashboard spans, and each panel's box from its gridPos (x, y, w, h in grid units, y down)."""
    rows = 0
    for panel in panels:
        pos = panel.get("gridPos")
        if not pos or any(k not in pos for k in "xywh"):
            raise ValueError(f"panel {panel.get('title')!r} has no complete gridPos (x, y, w, h)")
        if pos["x"] < 0 or pos["w"] <= 0 or pos["x"] + pos["w"] > columns or pos["y"] < 0 or pos["h"] <= 0:
            raise ValueError(f"panel {panel.get('title')!r}: gridPos {pos} leaves the {columns}-column grid")
        rows = max(rows, pos["y"] + pos["h"])
    boxes = [
        Box(
            left=p["gridPos"]["x"] / columns,
            bottom=1 - (p["gridPos"]["y"] + p["gridPos"]["h"]) / rows,
            width=p["gridPos"]["w"] / columns,
            height=p["gridPos"]["h"] / rows,
        )
        for p in panels
    ]
    return rows, boxes


def scrape_config(targets: Mapping[str, str], interval: str = "2s") -> str:
    """Prometheus' config: one job per process, named and labelled as the Kubernetes monitors would."""
    jobs = []
    for name, url in sorted(targets.items()):
        parts = urllib.parse.urlsplit(url)
        jobs.append({
            "job_name": f"cheems-{name}",
            "metrics_path": parts.path or "/metrics",
            "scheme": parts.scheme or "http",
            "static_configs": [{"targets": [parts.netloc], "labels": {"namespace": NAMESPACE, "pod": name}}],
        })  # fmt: skip
    config = {"global": {"scrape_interval": interval, "evaluation_interval": interval}, "scrape_configs": jobs}
    return json.dumps(config, indent=1)  # JSON is YAML


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read()) if "/api/" in url else response.read()


@contextlib.contextmanager
def prometheus(targets: Mapping[str, str], workdir: Path) -> Iterator[str]:
    """Debian's Prometheus scraping `targets`, stopped on exit; yields its base URL."""
    (workdir / "prometheus.yml").write_text(scrape_config(targets))
    address = f"127.0.0.1:{free_port()}"
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address={address}"], stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _until(lambda: _ready(f"http://{address}/-/ready"), 60, "Prometheus ready", proc, workdir / "prometheus.log")
        yield f"http://{address}"
    finally:
        _stop(proc)
        log.close()


def _ready(url: str) -> bool:
    try:
        _get(url, timeout=2)
        return True
    except OSError:
        return False


def _until(ok: Any, seconds: float, what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited ({proc.returncode}); see {log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {seconds:.0f} s; see {log}")
        time.sleep(1)


def _stop(proc: subprocess.Popen[bytes], grace: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def demo_system(workdir: Path, ports_from: int) -> Any:
    """The SystemConfig of the `cheems up` that `cheems demo --out workdir/demo --ports-from ports_from` runs."""
    sys.path.insert(0, str(ROOT))
    from system.plan import SystemConfig

    return SystemConfig(data_dir=workdir / "demo", ports_from=ports_from, judge_url="http://127.0.0.1/v1")


def score_load(system: Any, stop: threading.Event, counts: dict[str, int]) -> None:
    """Score calls on the bundled sample's prompts while the demo runs (its own calls come only at the end)."""
    from cheems.credentials import read_secret
    from services import hosting
    from services.scorer.client import RewardClient

    samples = [json.loads(line) for line in (ROOT / "data" / "sample" / "open.jsonl").read_text().splitlines() if line]
    token_file = system.token_file("operator")
    while not token_file.exists() and not stop.wait(1):
        pass
    if stop.is_set():
        return
    client = RewardClient(f"127.0.0.1:{system.port(hosting.SCORER_GRPC_PORT)}", read_secret(token_file))
    n = 0
    while not stop.wait(0.3):
        sample = samples[n % len(samples)]
        n += 1
        try:
            client.score(sample["input"], [r["content"] for r in sample["responses"]], timeout=10)
            counts["ok"] += 1
        except Exception:  # the scorer starts, switches models and stops under this load: count, go on
            counts["failed"] += 1


def run_demo(workdir: Path, ports_from: int, timeout: float) -> int:
    """`cheems demo` to its end (it stops its own `cheems up`) under a Score load; returns its exit status."""
    cmd = [sys.executable, "-m", "cheems_cli", "demo", "--out", str(workdir / "demo"), "--ports-from",
           str(ports_from), "--trainings", "2", "--epochs", "4", "--timeout", str(timeout)]  # fmt: skip
    stop, counts = threading.Event(), {"ok": 0, "failed": 0}
    load = threading.Thread(target=score_load, args=(demo_system(workdir, ports_from), stop, counts), daemon=True)
    with (workdir / "demo.log").open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        load.start()
        try:
            return proc.wait(timeout + 120)
        finally:
            stop.set()
            load.join(30)
            _stop(proc, grace=120)
            print(f"Score calls sent beside the demo: {counts}")


def query_range(base: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    body = _get(f"{base}/api/v1/query_range?{query}", timeout=60)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {expr!r}: {body.get('error')}")
    return list(body["data"]["result"])


def panel_data(base: str, panel: dict[str, Any], start: float, end: float, step: float) -> list[tuple[str, Any]]:
    """(legend, [(t, value)]) for every series every target of the panel returns."""
    series = []
    for target in panel.get("targets", []):
        for result in query_range(base, substitute(target["expr"]), start, end, step):
            points = [(float(t), float(v)) for t, v in result["values"]]
            series.append((legend(target.get("legendFormat", ""), result["metric"]), points))
    return series


def draw(dashboard: dict[str, Any], data: list[list[tuple[str, Any]]], start: float, out: Path, note: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = dashboard["panels"]
    rows, boxes = layout(panels)
    header = 3.0  # grid units of title above the panels
    fig = plt.figure(figsize=(20, (rows + header) * 0.27))
    scale = rows / (rows + header)
    fig.text(0.01, 1 - 0.8 / (rows + header), f"{dashboard['title']}: a rendering of the dashboard's own queries",
             fontsize=18, weight="bold", va="top")  # fmt: skip
    fig.text(0.01, 1 - 1.9 / (rows + header), note, fontsize=10, va="top", color="#444")
    for panel, box, series in zip(panels, boxes, data, strict=True):
        rect = (box.left + 0.004, box.bottom * scale + 0.004, box.width - 0.008, box.height * scale - 0.008)
        if panel["type"] == "row":
            fig.text(rect[0], rect[1] + rect[3] / 2, panel["title"], fontsize=14, weight="bold", va="center")
            continue
        fig.text(rect[0], rect[1] + rect[3], panel["title"], fontsize=10, weight="bold", va="top")
        top = 1.6 / (rows + header)  # room for the title
        ax = fig.add_axes((rect[0] + 0.03, rect[1] + 0.022, rect[2] - 0.035, rect[3] - top - 0.022))
        ax.tick_params(labelsize=7)
        if not series:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", color="#888", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
        elif panel["type"] == "stat":
            last = series[0][1][-1][1]
            ax.text(0.5, 0.45, f"{last:.3g}", ha="center", va="center", fontsize=28, transform=ax.transAxes)
            ax.axis("off")
        elif panel["type"] == "heatmap":
            _heatmap(ax, series, start)
        else:
            for name, points in series:
                finite = [(t - start, v) for t, v in points if math.isfinite(v)]
                xs, ys = [t / 60 for t, _ in finite], [v for _, v in finite]
                dots = 3 if len(finite) < 20 else 0  # so that a lone point shows
                ax.plot(xs, ys, label=name[:48], linewidth=1, marker=".", markersize=dots)
            ax.set_xlabel("minutes", fontsize=7)
            ax.legend(fontsize=6, loc="upper left", ncol=1 + len(series) // 6, framealpha=0.6)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=64)
    plt.close(fig)


def _heatmap(ax: Any, series: list[tuple[str, Any]], start: float) -> None:
    ordered = sorted(series, key=lambda s: float(s[0]) if s[0] not in ("+Inf", "") else math.inf)
    times = sorted({t for _, points in ordered for t, _ in points})
    grid = [[dict(points).get(t, 0.0) for t in times] for _, points in ordered]
    # cumulative buckets (le) -> the count in each bucket
    counts = [[max(0.0, v - (grid[j - 1][i] if j else 0.0)) for i, v in enumerate(row)] for j, row in enumerate(grid)]
    ax.imshow(counts, aspect="auto", origin="lower", cmap="inferno",
              extent=(0, (times[-1] - start) / 60 if times else 1, 0, len(ordered)))  # fmt: skip
    every = max(1, len(ordered) // 8)  # a readable number of bucket bounds
    shown = range(0, len(ordered), every)
    ax.set_yticks([i + 0.5 for i in shown], [ordered[i][0] for i in shown], fontsize=6)
    ax.set_xlabel("minutes (le: reward bucket bound)", fontsize=7)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--dashboard", type=Path, default=DASHBOARD)
    parser.add_argument("--target", action="append", default=[], metavar="NAME=URL",
                        help="scrape this running process instead of starting `cheems demo` (repeatable)")  # fmt: skip
    parser.add_argument("--minutes", type=float, default=5, help="how long to scrape --target processes")
    parser.add_argument("--timeout", type=float, default=900, help="seconds `cheems demo` may take")
    args = parser.parse_args(argv)
    dashboard = json.loads(args.dashboard.read_text())
    workdir = Path(tempfile.mkdtemp(prefix="dashboard-picture-"))
    try:
        if args.target:
            targets = dict(t.split("=", 1) for t in args.target)
        else:
            sys.path.insert(0, str(ROOT))
            from cheems.processes.ports import free_block
            from system.plan import metrics_urls

            ports_from = free_block()
            targets = metrics_urls(demo_system(workdir, ports_from))
        with prometheus(targets, workdir) as base:
            start = time.time()
            if args.target:
                time.sleep(args.minutes * 60)
                what = f"{len(targets)} processes given with --target"
            else:
                code = run_demo(workdir, ports_from, args.timeout)
                if code:
                    print((workdir / "demo.log").read_text()[-3000:], file=sys.stderr)
                    raise RuntimeError(f"cheems demo exited with {code}")
                what = "the real `cheems up` that `cheems demo` ran here (ingest, annotation, training, evaluation)"
            time.sleep(5)
            end = time.time()
            step = max(2.0, (end - start) / 300)
            data = [panel_data(base, p, start, end, step) for p in dashboard["panels"]]
        note = (
            f"Not a Grafana screenshot: each panel's PromQL (from {args.dashboard.name}; $namespace={NAMESPACE}, "
            f"$model=.*, $__rate_interval=30s) evaluated by a real Prometheus {_version()} scraping every /metrics\n"
            f"of {what} every 2 s, over {(end - start) / 60:.1f} min, drawn with matplotlib at the panels' gridPos."
        )
        draw(dashboard, data, start, args.out, note)
        empty = [p["title"] for p, d in zip(dashboard["panels"], data, strict=True) if p["type"] != "row" and not d]
        print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB); panels without data: {empty}")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _version() -> str:
    out = subprocess.run([PROMETHEUS, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"version (\S+)", out)
    return match.group(1) if match else ""


if __name__ == "__main__":
    sys.exit(main())
