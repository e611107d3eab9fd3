"""The model servers' own metrics, re-exported through the scorer's /metrics at scrape time.

    export = BackendExport(sources, errors)      # sources() -> the engines to read now; errors: a Counter
    registry.register(export)

Triton (`nv_inference_*`: queue, compute and request times, per model; `nv_cpu_*`, `nv_gpu_*`) and the vLLM
engine (`vllm:*`: queue, prefill and end-to-end histograms, prefix-cache queries and hits, tokens) listen on
loopback ports the scorer chose, which nothing else can scrape (a vLLM engine's /metrics wants its API key, sent as
a bearer token: `Source.token`, never printed). At each scrape of the scorer every source is read
(HTTP GET, `timeout` seconds each, all at once) and its families whose names begin with the source's prefixes
are yielded again as they were, each sample that names a model the scorer serves given `model_id` as well. A
source that cannot be read or parsed yields nothing and counts one `cheems_scorer_backend_metrics_errors_total
{backend}`; the rest of the scrape goes on.

Only the prefixes are taken: the engines also export `process_*` and `python_gc_*`, which would collide with the
scorer's own. Triton names its counters without `_total` (`nv_inference_request_success`); they are yielded
untyped under their own names, not renamed, so Triton's dashboards read them as they are.
"""

from __future__ import annotations

import http.client
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from prometheus_client import Counter
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

TIMEOUT = 1.0  # seconds a source may take: a scrape of the scorer must not hang on an engine that does
MAX_BYTES = 32 * 1024 * 1024  # an exposition larger than this is no engine's


@dataclass(frozen=True)
class Source:
    """One engine's metrics endpoint: which families are taken, and the label its samples name a model with."""

    backend: str  # "triton" or "vllm": the errors counter's label
    url: str  # http://127.0.0.1:PORT/metrics
    prefixes: tuple[str, ...]
    label: str  # "model" (Triton), "model_name" (vLLM)
    models: Mapping[str, str] = field(default_factory=dict)  # that label's value -> the scorer's model id
    token: str = field(default="", repr=False)  # the engine's API key, sent as `Authorization: Bearer` ("" = none)


def triton_source(url: str, models: Mapping[str, str]) -> Source:
    """Triton's metrics endpoint at http://URL/metrics; `models`: Triton's model name -> model id."""
    return Source("triton", f"http://{url}/metrics", ("nv_",), "model", dict(models))


def vllm_source(url: str, models: Mapping[str, str], token: str = "") -> Source:
    """A vLLM server's /metrics (the port it serves on); `models`: its served model name -> model id; `token`: its
    API key."""
    return Source("vllm", f"http://{url}/metrics", ("vllm:",), "model_name", dict(models), token)


def merge(sources: Iterable[Source]) -> list[Source]:
    """One source per URL (several models in one Triton), their model names put together."""
    by_url: dict[str, Source] = {}
    for source in sources:
        known = by_url.get(source.url)
        models = {**(known.models if known else {}), **source.models}
        by_url[source.url] = replace(source, models=models)
    return list(by_url.values())


def fetch(url: str, timeout: float = TIMEOUT, token: str = "") -> str:
    """The body of GET `url` (http only, `token` as a bearer token if given), as text; OSError or ValueError when it
    cannot be had."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http URL: {url!r}")
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/", headers={"Authorization": f"Bearer {token}"} if token else {})
        response = connection.getresponse()
        body = response.read(MAX_BYTES + 1)
    except http.client.HTTPException as e:
        raise OSError(f"{url}: {e}") from None
    finally:
        connection.close()
    if response.status != 200:
        raise OSError(f"{url} answered HTTP {response.status}")
    if len(body) > MAX_BYTES:
        raise ValueError(f"{url} sent more than {MAX_BYTES} bytes")
    return body.decode("utf-8", "replace")


def declared(text: str) -> set[str]:
    """The family names the exposition's `# TYPE` lines declare, as written."""
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ") and len(line.split()) > 3}


def families(text: str, source: Source) -> list[Metric]:
    """The source's families in `text` (its prefixes only), samples naming a known model given `model_id`."""
    names = declared(text)
    out = []
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(source.prefixes):
            continue
        kind = family.type
        samples = family.samples
        if kind == "counter" and family.name in names:  # declared without _total: the parser added it
            kind = "unknown"
            samples = [s._replace(name=s.name.removesuffix("_total")) for s in samples]
        copy = Metric(family.name, family.documentation, kind)
        copy.samples = [_with_model(s, source) for s in samples]
        out.append(copy)
    return out


def _with_model(sample: Sample, source: Source) -> Sample:
    model_id = source.models.get(sample.labels.get(source.label, ""))
    if model_id is None or "model_id" in sample.labels:
        return sample
    return sample._replace(labels={**sample.labels, "model_id": model_id})


class BackendExport(Collector):
    """At each scrape: the families of every source `sources()` names now, merged by name across sources."""

    def __init__(self, sources: Callable[[], Iterable[Source]], errors: Counter, timeout: float = TIMEOUT) -> None:
        self.sources, self.errors, self.timeout = sources, errors, timeout

    def describe(self) -> Iterator[Metric]:
        return iter(())  # the names are the engines' and known at scrape time only

    def collect(self) -> Iterator[Metric]:
        sources = merge(self.sources())
        if not sources:
            return
        with ThreadPoolExecutor(len(sources), thread_name_prefix="backend-metrics") as pool:
            read = list(pool.map(self._read, sources))
        merged: dict[str, Metric] = {}
        for found in read:
            for family in found:
                known = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                if known.type == family.type:  # two engines of one kind: their samples differ by model
                    known.samples += family.samples
        yield from merged.values()

    def _read(self, source: Source) -> list[Metric]:
        try:
            return families(fetch(source.url, self.timeout, source.token), source)
        except Exception:  # unreachable, slow, not an exposition: nothing from it this time, and the scrape goes on
            self.errors.labels(source.backend).inc()
            return []
