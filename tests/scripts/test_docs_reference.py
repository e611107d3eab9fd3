"""scripts/docs_reference.py: every CLI option, RPC, message field and setting is in the generated references.

Each check reads what it expects from the code by another road than the page's own (the compiled `cheems.v1`
descriptors for the protos, pydantic's and dataclasses' fields for the settings), so a part left out fails here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cheems.protogen import proto_files

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


reference = load_script()


@pytest.fixture(scope="module")
def cli_sections() -> dict[str, str]:
    """The CLI page cut at its `## `cheems ...`` headings: command path -> its section."""
    page = reference.cli_page()
    sections = {}
    for chunk in page.split("\n## `")[1:]:
        path, _, body = chunk.partition("`")
        sections[path] = body
    return sections


def test_every_command_and_option_is_in_the_cli_reference(cli_sections: dict[str, str]) -> None:
    commands = reference.cli_commands()
    assert len(commands) > 40 and {"cheems train", "cheems serve", "cheems eval", "cheems up"} <= set(cli_sections)
    for path, command in commands:
        section = cli_sections[path]
        for param in command.params:
            if param.hidden:
                continue
            shown = f"`{param.name.upper()}`" if param.param_type_name == "argument" else f"`{param.opts[0]}`"
            assert shown in section, f"{path}: {shown} missing from the CLI reference"
        if command.help:
            assert command.help.split("\n")[0].strip() in section, f"{path}: its help is missing"


def test_a_known_option_reads_with_its_type_default_and_help(cli_sections: dict[str, str]) -> None:
    row = next(line for line in cli_sections["cheems train"].splitlines() if line.startswith("| `--nproc`"))
    assert "`1`" in row and "one per GPU" in row


def test_every_service_rpc_message_and_field_is_in_the_grpc_reference() -> None:
    page = reference.grpc_page()
    files = {p.stem for p in proto_files()}
    assert files == {"annotation", "common", "evaluation", "events", "ingestion", "reward", "training"}
    seen = 0
    for name in sorted(files):
        descriptor = importlib.import_module(f"cheems.v1.{name}_pb2").DESCRIPTOR
        assert f"## `cheems/v1/{name}.proto`" in page
        for service in descriptor.services_by_name.values():
            assert f"### service `{service.name}`" in page
            for method in service.methods:
                assert f"| `{method.name}` | " in page, f"{service.name}.{method.name}"
                seen += 1
        for message in descriptor.message_types_by_name.values():
            seen += _check_message(page, message, message.name)
        for enum in descriptor.enum_types_by_name.values():
            assert f"### `{enum.name}` (enum)" in page
    assert seen > 100


def _check_message(page: str, message: object, qualified: str) -> int:
    assert f"### `{qualified}`" in page, qualified
    start = page.index(f"### `{qualified}`\n")
    end = page.find("\n### ", start + 1)
    section = page[start : end if end > 0 else None]
    count = 1
    for field in message.fields:  # type: ignore[attr-defined]
        assert f"| `{field.name}` | " in section, f"{qualified}.{field.name}"
        count += 1
    for nested in message.nested_types:  # type: ignore[attr-defined]
        if not nested.GetOptions().map_entry:
            count += _check_message(page, nested, f"{qualified}.{nested.name}")
    return count


def test_a_proto_comment_reaches_the_page() -> None:
    page = reference.grpc_page()
    assert "A prompt with its candidate responses: the unit that is ingested, annotated and scored." in page


def test_every_setting_scorer_and_training_field_is_in_the_settings_reference() -> None:
    from cheems.settings import Settings
    from services.scorer.config import ScorerConfig
    from trainer.config import TrainConfig

    page = reference.settings_page()
    for name in Settings.model_fields:
        assert f"| `{name}` | `CHEEMS_{name.upper()}` |" in page, name
    for name, info in ScorerConfig.model_fields.items():
        assert f"| `{name}` | `CHEEMS_SCORER_{name.upper()}` |" in page, name
        if info.description:
            assert " ".join(info.description.split()) in page.replace("\\|", "|"), name
    training = page.split("## A training run", 1)[1]
    for field in dataclasses.fields(TrainConfig):
        assert f"| `{field.name}` | " in training, field.name


def test_a_fields_comment_becomes_its_words() -> None:
    from trainer.config import TrainConfig

    notes = reference.field_comments(TrainConfig)
    assert notes["reg_coef"] == "Gaussian prior on rewards (paper default)"  # beside the field
    assert notes["max_tokens"].startswith("tokens per forward per process")  # the lines above it
