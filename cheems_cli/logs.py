"""How a `cheems` command logs (services.observe.logs): set up once by the main callback, named again by a service.

    cheems --log-format json service ingestion      # JSON lines, service "ingestion", INFO
    CHEEMS_LOG_FORMAT=json cheems up                # every process of the system in JSON

A one-shot command logs warnings (`-v`: debug), a long-lived service INFO; CHEEMS_LOG_LEVEL sets either. The
format chosen with `--log-format` is put in the environment, so the processes a command starts (`cheems up`'s
children, torchrun's ranks) log alike. `say` is a command's line for people: echoed in text mode, a log record
in JSON mode, so that a service's log holds nothing but JSON lines.
"""

from __future__ import annotations

import logging
import os

import typer

from cheems.settings import setting
from services.observe.logs import LOG_FORMAT_ENV, log_format_of, setup_logging

_chosen: dict[str, object] = {"verbose": False}
_said = logging.getLogger("cheems_cli")


def configure(verbose: bool, log_format: str | None) -> None:
    """The main callback's setup: the command line's options, before any command runs."""
    if log_format:
        os.environ[LOG_FORMAT_ENV] = log_format_of(log_format)
    _chosen["verbose"] = verbose
    setup_logging("cheems", level=level(service=False))


def as_service(name: str) -> None:
    """A long-lived service's setup: its lines name it, at INFO unless asked otherwise."""
    setup_logging(name, level=level(service=True))


def level(service: bool) -> str:
    if _chosen["verbose"]:
        return "DEBUG"
    return setting("log_level").strip().upper() or ("INFO" if service else "WARNING")


def say(text: str, err: bool = False) -> None:
    """A line for the person running the command (an address it listens on, an error)."""
    if log_format_of(None) == "json":
        _said.setLevel(logging.INFO)  # said whatever the root level: it is the command's output
        _said.log(logging.ERROR if err else logging.INFO, text)
    else:
        typer.echo(text, err=err)
