"""`cheems dev ...`: local stand-ins for what a cluster provides (a Kafka-compatible broker, an LLM judge)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import as_service, clear_errors, say

dev = typer.Typer(help="Local development helpers.", no_args_is_help=True)


@dev.command("broker")
@clear_errors
def dev_broker(
    port: Annotated[int, typer.Option(help="Port to listen on (0 = any free port).")] = 9092,
    partitions: Annotated[int, typer.Option(min=1)] = 3,
    host: Annotated[
        str, typer.Option(help="Loopback address to listen on: the broker has no authentication, so no other.")
    ] = "127.0.0.1",
    data_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            help="Keep the topics, offsets and groups in this folder (made 0700), so they outlive the broker's "
            "restart; without it they are kept in memory.",
        ),
    ] = None,
) -> None:
    """Run the embedded Kafka-compatible broker (Tansu) with the cheems topics, until Ctrl-C.

    It authenticates no one, so it listens on loopback only; a shared bus is a Kafka cluster (k8s/kafka/).
    When the broker process exits this command does too, with an error (status 3), for its supervisor to
    restart it; the broker process dies with this one."""
    as_service("broker")
    import signal
    import threading

    from services.bus import topics
    from services.bus.broker import EmbeddedBroker

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with EmbeddedBroker(port, host, data_dir) as broker:
        broker.create_topics(topics.with_dead_letters(), partitions)
        say(f"broker at {broker.bootstrap} (loopback only, no authentication) with topics: {', '.join(topics.ALL)}")
        say(f"topics kept in {data_dir}" if data_dir else "topics kept in memory (--data-dir keeps them)")
        while not stop.wait(0.5):
            if broker.process is not None and broker.process.poll() is not None and not stop.wait(1.0):
                broker.check()  # gone, and not by a SIGTERM to the whole group: Unavailable, to be restarted


@dev.command("judge-server")
@clear_errors
def dev_judge_server(
    bench: Annotated[
        list[Path], typer.Option(exists=True, dir_okay=False, help="Bench file whose ranks the judge knows (repeat).")
    ],
    noise: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of wrong answers.")] = 0.3,
    seed: Annotated[int, typer.Option()] = 0,
    port: Annotated[int, typer.Option(help="Port to listen on (0 = any free port).")] = 8090,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    model: Annotated[str, typer.Option(help="The model name it answers as.")] = "simulated-judge",
) -> None:
    """A stand-in LLM judge: OpenAI chat completions answered from gold ranks with noise, until Ctrl-C."""
    as_service("judge-server")  # a process of `cheems demo`
    import signal
    import threading

    from cheems.formats.cheemsbench import read_bench
    from services.annotation.simulation.judge import JudgeServer, SimulatedJudge, SimulatedJudgeConfig

    items = [item for path in bench for item in read_bench(path)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    judge = SimulatedJudge(items, SimulatedJudgeConfig(noise=noise, seed=seed, model=model))
    with JudgeServer(judge, host, port) as server:
        say(f"judge server at {server.base_url}: model {model}, {len(items)} prompts, noise {noise}")
        stop.wait()


@dev.command("soak")
@clear_errors
def dev_soak(
    out: Annotated[Path, typer.Option(help="The system's data dir and the soak's report (made fresh).")] = Path(
        "out/soak"
    ),
    db: Annotated[str, typer.Option(help="The store: a SQLAlchemy URL (default: SQLite in --out).")] = "",
    minutes: Annotated[float, typer.Option(min=0, help="Minutes of random kills.")] = 2.0,
    kill_every: Annotated[float, typer.Option(min=1, help="Seconds between kills.")] = 20.0,
    settle: Annotated[
        float, typer.Option(min=0, help="Seconds the system gets to deliver what it acknowledged.")
    ] = 180.0,
    ingest_rate: Annotated[float, typer.Option(min=0.1, help="Prompts ingested a second.")] = 5.0,
    annotators: Annotated[int, typer.Option(min=5, help="Annotators, each with an account of their own.")] = 12,
    run_every: Annotated[float, typer.Option(min=0, help="Seconds between evaluation runs (0 = none).")] = 90.0,
    kill_up: Annotated[bool, typer.Option(help="SIGKILL `cheems up` itself at the end and start it again.")] = True,
    seed: Annotated[int, typer.Option(help="Picks the victims.")] = 0,
    ports_from: Annotated[int, typer.Option(help="The system's block of ports (0 = a free block).")] = 0,
) -> None:
    """Chaos soak: `cheems up` under load through the real gRPC APIs while a random process of any service (the
    broker, Triton, torchrun and vLLM children included) is SIGKILLed every --kill-every seconds, then `cheems up`
    itself; afterwards every acknowledged write is checked against the store and the bus. Prints a table (checks,
    kills with recovery times, client errors by code), writes OUT/report.json, exits 1 on any failed check."""
    import json

    from system.soak.config import SoakConfig
    from system.soak.report import as_json, render
    from system.soak.run import soak

    config = SoakConfig(
        out=out, db=db, kill_minutes=minutes, kill_every=kill_every, settle=settle, ingest_rate=ingest_rate,
        annotators=annotators, run_every=run_every, kill_up=kill_up, seed=seed, ports_from=ports_from,
    )  # fmt: skip
    result = soak(config, typer.echo)
    typer.echo(render(result))
    (out / "report.json").write_text(json.dumps(as_json(result), indent=2), encoding="utf-8")
    if not result.ok:
        raise typer.Exit(1)
