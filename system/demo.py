"""`make demo`: the loop through the services, on the bundled sample, in a few minutes, then everything stopped.

    python -m cheems_cli demo [--out out/demo] [--trainings 2]

1. `cheems up` (in this process: `system.up`) with a simulated AI judge (`cheems dev judge-server`, a
   local server speaking the OpenAI chat-completions protocol, answering from the sample's gold ranks
   with noise), training automatically once 18 new rankings arrived.
2. open.jsonl is ingested over gRPC (`IngestionService.Ingest`, as `cheems up`'s operator account); its prompts
   get triple-wise tasks and simulated human annotators (`cheems annotate simulate-humans`), each signed in with
   an annotator account of their own (tokens in <out>/accounts/annotators/), rank them through AnnotationService.
3. With two trainings, human.jsonl is ingested too, once the human rankings are in; the AI judge
   worker annotates it pairwise.
4. The loop runs by itself: rankings -> dataset -> training -> a candidate model -> the evaluator scores it by
   its id -> the gate (`--promotion auto`) promotes it (or rejects it) -> the scorer's default model follows
   production. The demo prints each event as it happens, then the CheemsBench table of every model, and
   stops everything it started.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import grpc

from cheems.credentials import open_private, read_secret
from cheems.errors import DeadlineExceeded
from cheems.roles import ANNOTATOR
from cheems.v1 import common_pb2, ingestion_pb2, ingestion_pb2_grpc, reward_pb2, reward_pb2_grpc
from services import hosting
from services.annotation.algorithm.filters import FilterConfig, reason
from services.bus import topics
from services.channels import open_channel
from services.ingestion.records import read_samples
from system.accounts import provision
from system.plan import BROKER_PORT, OPERATOR_ACCOUNT, SystemConfig
from system.supervisor import SupervisorConfig
from system.timeline import Timeline
from system.up import up

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "sample"
MIN_ANNOTATORS = 5  # the sample's prompts have five responses: five triples, each for another annotator


@dataclass(frozen=True)
class DemoConfig:
    """out: data, logs and the report; trainings: 1 (human rankings) or 2 (then human + AI, distant
    supervision by the first model); ports_from: a block of free ports (0 = the standard ports)."""

    out: Path = Path("out/demo")
    sample: Path = SAMPLE
    trainings: int = 2
    epochs: int = 6
    annotators: int = 5  # a prompt's five triples go to five different annotators
    human_noise: float = 0.1
    ai_noise: float = 0.3
    ports_from: int = 0
    timeout: float = 600.0
    scorer_args: tuple[str, ...] = ()  # more `cheems serve` arguments, e.g. ("--backend", "torch")
    python: str = sys.executable

    def __post_init__(self) -> None:
        if self.trainings not in (1, 2):
            raise ValueError(f"trainings must be 1 or 2, got {self.trainings}")
        if self.annotators < MIN_ANNOTATORS:
            raise ValueError(
                f"annotators must be >= {MIN_ANNOTATORS} (each of a prompt's five triples goes to a different "
                f"annotator), got {self.annotators}"
            )


def run_demo(config: DemoConfig, echo: Callable[[str], None]) -> dict[str, float | None]:
    """Run the demo; returns {model id: CheemsBench overall} of the models it trained."""
    began = time.monotonic()
    open_bench, human_bench = config.sample / "open.jsonl", config.sample / "human.jsonl"
    people_rank = annotatable(open_bench)  # the rule filter leaves some prompts too few responses for a triple
    system = SystemConfig(
        data_dir=config.out,
        bench=(open_bench, human_bench),
        judge_url="",  # set below, once the simulated judge listens
        ai_sources="human.jsonl",
        human_sources="open.jsonl",
        auto_after=people_rank,
        dataset_recipe="human+ai-distant-debias",
        training_overrides=(f"epochs={config.epochs}", "eval_files=[]", "progress=false"),
        ports_from=config.ports_from,
        extra={"scorer": config.scorer_args} if config.scorer_args else {},
    )
    judge_port = system.port(BROKER_PORT) + 50 if config.ports_from else 8090
    system = replace(system, judge_url=f"http://127.0.0.1:{judge_port}/v1")
    (config.out / "logs").mkdir(parents=True, exist_ok=True)
    judge = [
        "dev",
        "judge-server",
        "--bench",
        str(human_bench),
        "--noise",
        str(config.ai_noise),
        "--port",
        str(judge_port),
    ]
    children = [_child(config, judge, config.out / "logs" / "judge-server.log")]
    stop, ready = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def on_event(name: str, what: str, detail: str) -> None:
        echo(f"[{time.monotonic() - began:7.1f}s] {name:<12} {what}{'  ' + detail if detail else ''}")

    def run_system() -> None:
        try:
            up(system, on_event, lambda _: ready.set(), stop, SupervisorConfig(grace=20))
        except BaseException as e:  # reported by the main thread
            failure.append(e)
            ready.set()

    thread = threading.Thread(target=run_system, name="cheems-up")
    thread.start()
    timeline: Timeline | None = None
    try:
        ready.wait(config.timeout)
        if failure:
            raise failure[0]
        timeline = Timeline(f"127.0.0.1:{system.port(BROKER_PORT)}", echo, began).start()
        deadline = began + config.timeout
        operator = system.token_file(OPERATOR_ACCOUNT)
        token = read_secret(operator)
        ingestion = f"127.0.0.1:{system.port(hosting.INGESTION_PORT)}"
        _ingest(ingestion, open_bench, token)
        annotation = f"127.0.0.1:{system.port(hosting.ANNOTATION_PORT)}"
        people = system.accounts / "annotators"
        provision(system.database, people, {f"sim-annotator-{n + 1}": ANNOTATOR for n in range(config.annotators)})
        humans = ["annotate", "simulate-humans", "--annotation-url", annotation, "--bench", str(open_bench)]
        humans += ["--annotators", str(config.annotators), "--noise", str(config.human_noise)]
        humans += ["--token-dir", str(people), "--token-file", str(operator)]
        humans += ["--idle-seconds", "30"]  # tasks arrive through the intake while the annotators work
        children.append(_child(config, humans, config.out / "logs" / "annotators.log"))
        if config.trainings == 2:
            _wait(lambda: len(timeline.of(topics.RANKINGS)) >= people_rank, deadline, "the human rankings")
            _ingest(ingestion, human_bench, token)
        scorer = f"127.0.0.1:{system.port(hosting.SCORER_GRPC_PORT)}"
        results = _follow(
            timeline, scorer, token, config.trainings, deadline, lambda line: timeline.line("scorer", line)
        )
        return results
    finally:
        if timeline is not None:
            timeline.stop()
        stop.set()
        thread.join()
        for child in children:
            child.terminate()
            child.wait(10)


def annotatable(path: Path) -> int:
    """How many of the file's prompts get triple-wise tasks: those with three or more responses the annotation
    service's rule filter (its defaults, as the demo runs it) keeps."""
    rules = FilterConfig()
    kept = [sum(reason(c, list(s.category), rules) is None for _, c in s.responses) for s in read_samples(path).samples]
    return sum(n >= 3 for n in kept)


def _child(config: DemoConfig, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """`cheems ARGS` in the background, its output in `log`."""
    with open_private(log) as out:
        return subprocess.Popen([config.python, "-m", "cheems_cli", *args], stdout=out, stderr=subprocess.STDOUT)


def _ingest(address: str, path: Path, token: str) -> None:
    """Every sample of the file through gRPC IngestionService.Ingest (as the account of `token`), tagged with the
    file's name as source."""
    parsed = read_samples(path)
    records = [
        ingestion_pb2.IngestRecord(
            line=s.line,
            sample=common_pb2.Sample(
                prompt=s.prompt,
                system_prompt=s.system_prompt or "",
                responses=[common_pb2.Response(id=k, content=c) for k, c in s.responses],
                category=list(s.category),
                source=path.name,
            ),
        )
        for s in parsed.samples
    ]
    with open_channel(address, token=token) as channel:
        ingestion_pb2_grpc.IngestionServiceStub(channel).Ingest(iter(records), timeout=60)


def _follow(
    timeline: Timeline, scorer: str, token: str, trainings: int, deadline: float, say: Callable[[str], None]
) -> dict[str, float | None]:
    """Report the scorer's switches until `trainings` models are registered and evaluated; their results."""
    served = ""
    with open_channel(scorer, token=token) as channel:
        info = reward_pb2_grpc.RewardServiceStub(channel)
        while time.monotonic() < deadline:
            try:
                model = info.GetModelInfo(reward_pb2.ModelInfoRequest(), timeout=5)
            except grpc.RpcError:
                model = None
            if model is not None and model.model_id != served:
                served = model.model_id
                say(
                    f"now serves {served}"
                    + (f" (the last load failed: {model.follow_error})" if model.follow_error else "")
                )
            events = timeline.of(topics.MODELS)
            registered = [e.model.model_id for e in events if e.change.action in ("", "registered")]
            decided = {e.model.model_id for e in events if e.change.to_state in ("production", "rejected")}
            promoted = [e.model.model_id for e in events if e.change.to_state == "production"]
            done = {e.run.model_id: e.run for e in timeline.of(topics.EVAL_RESULTS) if e.run.state in (3, 4)}
            models = registered[:trainings]
            evaluated = len(registered) >= trainings and all(m in done for m in models)
            # the gate decided each (a failed evaluation decides nothing), and the scorer follows production
            decided_all = evaluated and all(m in decided or done[m].state == 4 for m in models)
            if decided_all and (not promoted or served == promoted[-1]):
                return {m: (done[m].result.overall if done[m].state == 3 else None) for m in models}
            time.sleep(1.0)
    raise DeadlineExceeded(f"the loop did not train and evaluate {trainings} model(s) in time; see the logs")


def _wait(ready: Callable[[], bool], deadline: float, what: str) -> None:
    while not ready():
        if time.monotonic() > deadline:
            raise DeadlineExceeded(f"waited too long for {what}")
        time.sleep(0.5)
