"""`cheems dev ...`: local stand-ins for what a cluster provides (a Kafka-compatible broker, an LLM judge)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import clear_errors

dev = typer.Typer(help="Local development helpers.", no_args_is_help=True)


@dev.command("broker")
@clear_errors
def dev_broker(
    port: Annotated[int, typer.Option(help="Port to listen on (0 = any free port).")] = 9092,
    partitions: Annotated[int, typer.Option(min=1)] = 3,
    host: Annotated[
        str, typer.Option(help="Loopback address to listen on: the broker has no authentication, so no other.")
    ] = "127.0.0.1",
) -> None:
    """Run the embedded Kafka-compatible broker (Tansu, memory storage) with the cheems topics, until Ctrl-C.

    It authenticates no one, so it listens on loopback only; a shared bus is a Kafka cluster (k8s/kafka/).
    When the broker process exits this command does too, with an error (status 3), for its supervisor to
    restart it; the broker process dies with this one."""
    import signal
    import threading

    from services.bus import topics
    from services.bus.broker import EmbeddedBroker

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with EmbeddedBroker(port, host) as broker:
        broker.create_topics(topics.with_dead_letters(), partitions)
        typer.echo(
            f"broker at {broker.bootstrap} (loopback only, no authentication) with topics: {', '.join(topics.ALL)}"
        )
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
        typer.echo(f"judge server at {server.base_url}: model {model}, {len(items)} prompts, noise {noise}")
        stop.wait()
