"""The manual's references, written from the code itself so they cannot drift from it (docs/, issue 45).

    .venv/bin/python scripts/docs_reference.py cli      # prints the page; the MkDocs hook (docs_hooks.py) builds all

- `cli`: every command of the typer app (`cheems_cli.main.app`), its usage, help and every option.
- `grpc`: every service, RPC, message, field and enum of protos/cheems/v1, with the comments the protos carry
  (protoc's source info, through grpc_tools: the comments are read by the compiler, not by a regular expression).
- `settings`: the `CHEEMS_*` settings (`cheems.settings.Settings`), the scorer's (`ScorerConfig`, `CHEEMS_SCORER_*`)
  and a training run's (`TrainConfig`, the `--set` keys), each field with its type, default and the words the code
  gives it (a pydantic description, else the comment beside or above the field).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import tempfile
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


# ---------------------------------------------------------------- the command line


def _is_group(command: Any) -> bool:
    return hasattr(command, "commands")  # typer's own click (typer._click) or click's: both name them so


def _commands(group: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    for name in sorted(group.commands):
        command = group.commands[name]
        if getattr(command, "hidden", False):
            continue
        path = f"{prefix} {name}"
        if _is_group(command):
            yield path, command
            yield from _commands(command, path)
        else:
            yield path, command


def cli_commands() -> list[tuple[str, Any]]:
    """(`cheems sub command`, its click command) for the app and every visible command under it."""
    import typer.main

    from cheems_cli.main import app

    root = typer.main.get_command(app)
    return [("cheems", root), *_commands(root, "cheems")]


def _option_row(param: Any, context: Any) -> str:
    argument = param.param_type_name == "argument"
    if argument:
        names = f"`{param.name.upper()}`"
        kind = "argument" + ("" if param.required else ", optional")
    else:
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        kind = "flag" if param.is_flag else _cell(param.display_type(context).strip("<>"))
    default = param.default
    shown = "" if default is None or callable(default) or default in ((), []) else f"`{default}`"
    if param.required and not argument:
        shown = "required"
    return f"| {names} | {kind} | {shown} | {_cell(getattr(param, 'help', None) or '')} |"


def cli_page() -> str:
    from typer._click.core import Context

    lines = [
        "# Command line reference",
        "",
        "Generated from the `cheems` command itself (`cheems_cli.main.app`) when the manual is built: every command,",
        "its usage and every option. `cheems COMMAND --help` prints the same.",
        "",
    ]
    for path, command in cli_commands():
        lines += [f"## `{path}`", ""]
        context = Context(command, info_name=path)
        lines += ["```", command.get_usage(context), "```", ""]
        if command.help:
            lines += [inspect.cleandoc(command.help).replace("\b\n", ""), ""]
        if _is_group(command):
            subs = [n for n in sorted(command.commands) if not getattr(command.commands[n], "hidden", False)]
            lines += ["Commands: " + ", ".join(f"`{n}`" for n in subs), ""]
        params = [p for p in command.params if not getattr(p, "hidden", False)]
        if params:
            lines += ["| option | type | default | what |", "| --- | --- | --- | --- |"]
            lines += [_option_row(p, context) for p in params]
            lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- the gRPC API


def descriptor_set() -> Any:
    """protos/cheems/v1 compiled by protoc (grpc_tools) with their source info: the comments come with it."""
    from importlib import resources

    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    from cheems.protogen import PROTO_ROOT, proto_files

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{resources.files('grpc_tools') / '_proto'}", "--include_source_info"]
        args += [f"--descriptor_set_out={out}", *(str(p.relative_to(PROTO_ROOT)) for p in proto_files())]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO_ROOT}")
        files = descriptor_pb2.FileDescriptorSet()
        files.ParseFromString(out.read_bytes())
    return files


def _comments(source: Any) -> dict[tuple[int, ...], str]:
    found = {}
    for location in source.location:
        text = (location.leading_comments or location.trailing_comments).strip()
        if text:
            found[tuple(location.path)] = " ".join(line.strip() for line in text.splitlines())
    return found


_TYPES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 8: "bool", 9: "string", 12: "bytes"}
_TYPES |= {13: "uint32", 6: "fixed64", 7: "fixed32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}


def _field_type(field: Any) -> str:
    name = field.type_name.rsplit(".", 1)[-1] if field.type_name else _TYPES.get(field.type, str(field.type))
    if field.label == 3:  # LABEL_REPEATED
        return f"repeated {name}"
    return f"optional {name}" if field.proto3_optional else name


def _message(message: Any, path: tuple[int, ...], notes: dict[tuple[int, ...], str], qualified: str) -> list[str]:
    lines = [f"### `{qualified}`", "", notes.get(path, ""), ""]
    if message.field:
        lines += ["| field | type | number | what |", "| --- | --- | --- | --- |"]
        for i, field in enumerate(message.field):
            note = _cell(notes.get((*path, 2, i), ""))
            lines.append(f"| `{field.name}` | `{_field_type(field)}` | {field.number} | {note} |")
        lines.append("")
    for i, enum in enumerate(message.enum_type):
        lines += _enum(enum, (*path, 4, i), notes, f"{qualified}.{enum.name}")
    for i, nested in enumerate(message.nested_type):
        if not nested.options.map_entry:
            lines += _message(nested, (*path, 3, i), notes, f"{qualified}.{nested.name}")
    return lines


def _enum(enum: Any, path: tuple[int, ...], notes: dict[tuple[int, ...], str], qualified: str) -> list[str]:
    lines = [f"### `{qualified}` (enum)", "", notes.get(path, ""), ""]
    lines += ["| value | number | what |", "| --- | --- | --- |"]
    for i, value in enumerate(enum.value):
        lines.append(f"| `{value.name}` | {value.number} | {_cell(notes.get((*path, 2, i), ''))} |")
    return [*lines, ""]


def grpc_page() -> str:
    lines = [
        "# gRPC API reference",
        "",
        "Generated from `protos/cheems/v1/*.proto` and the comments they carry when the manual is built: every",
        "service with its RPCs, then every message (requests, replies and the Kafka events' payloads) and enum.",
        "",
    ]
    for file in descriptor_set().file:
        if not file.name.startswith("cheems/"):
            continue
        notes = _comments(file.source_code_info)
        lines += [f"## `{file.name}`", ""]
        for s, service in enumerate(file.service):
            lines += [f"### service `{service.name}`", "", notes.get((6, s), ""), ""]
            lines += ["| RPC | request | reply | what |", "| --- | --- | --- | --- |"]
            for m, method in enumerate(service.method):
                request = ("stream " if method.client_streaming else "") + method.input_type.rsplit(".", 1)[-1]
                reply = ("stream " if method.server_streaming else "") + method.output_type.rsplit(".", 1)[-1]
                note = _cell(notes.get((6, s, 2, m), ""))
                lines.append(f"| `{method.name}` | `{request}` | `{reply}` | {note} |")
            lines.append("")
        for i, enum in enumerate(file.enum_type):
            lines += _enum(enum, (5, i), notes, enum.name)
        for i, message in enumerate(file.message_type):
            lines += _message(message, (4, i), notes, message.name)
    return "\n".join(lines)


# ---------------------------------------------------------------- settings


def field_comments(cls: type) -> dict[str, str]:
    """The comment beside each field of a class body, else the comment lines right above it."""
    path = Path(inspect.getsourcefile(cls) or "")
    source = path.read_text(encoding="utf-8")
    comments: dict[int, str] = {}
    with path.open("rb") as handle:
        for token in tokenize.tokenize(handle.readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string.lstrip("#").strip()
    body = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    found: dict[str, str] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        beside = [comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1) if n in comments]
        above: list[str] = []
        line = node.lineno - 1
        while line in comments and source.splitlines()[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        found[node.target.id] = " ".join(above + beside)
    return found


def _default(value: Any) -> str:
    return "" if value is dataclasses.MISSING else f"`{value!r}`"


def _settings_table(model: Any, prefix: str) -> list[str]:
    notes = field_comments(model)
    lines = ["| field | environment | type | default | what |", "| --- | --- | --- | --- | --- |"]
    for name, info in model.model_fields.items():
        kind = _cell(getattr(info.annotation, "__name__", None) or info.annotation)
        words = _cell(info.description or notes.get(name, ""))
        default = info.get_default(call_default_factory=True)
        lines.append(f"| `{name}` | `{prefix}{name.upper()}` | `{kind}` | `{default!r}` | {words} |")
    return [*lines, ""]


def train_fields() -> list[tuple[str, str, str, str]]:
    """(name, type, default, words) of every `TrainConfig` field."""
    from trainer.config import TrainConfig

    notes = field_comments(TrainConfig)
    rows = []
    for f in dataclasses.fields(TrainConfig):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        rows.append((f.name, str(f.type), _default(default), notes.get(f.name, "")))
    return rows


def settings_page() -> str:
    from cheems.settings import ENV_PREFIX, Settings
    from services.scorer.config import ENV_PREFIX as SCORER_PREFIX
    from services.scorer.config import ScorerConfig

    lines = [
        "# Settings reference",
        "",
        "Generated from the configuration objects when the manual is built.",
        "",
        "## Shared settings: `cheems.settings.Settings`",
        "",
        _cell(inspect.getdoc(Settings) or ""),
        "Each reads its environment variable; a command-line option, where one exists, wins.",
        "",
        *_settings_table(Settings, ENV_PREFIX),
        "## The scorer: `services.scorer.config.ScorerConfig`",
        "",
        _cell(inspect.getdoc(ScorerConfig) or ""),
        "`cheems serve`'s options are made from these fields (`--grpc-port` for `grpc_port`).",
        "",
        *_settings_table(ScorerConfig, SCORER_PREFIX),
        "## A training run: `trainer.config.TrainConfig`",
        "",
        "The one configuration object of a training run: `cheems train --set key=value` sets any field (values",
        "parsed by the field's type), and recipes (`trainer.recipes`) return one.",
        "",
        "| field | type | default | what |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| `{n}` | `{_cell(t)}` | {d} | {_cell(w)} |" for n, t, d, w in train_fields()]
    return "\n".join([*lines, ""])


PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": cli_page,
    "reference/grpc.md": grpc_page,
    "reference/settings.md": settings_page,
}


def main(argv: list[str]) -> int:
    names = {Path(page).stem: build for page, build in PAGES.items()}
    if len(argv) != 1 or argv[0] not in names:
        print(f"usage: docs_reference.py {'|'.join(names)}", file=sys.stderr)
        return 2
    sys.stdout.write(names[argv[0]]())
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
