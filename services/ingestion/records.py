"""Records of a data file -> samples to store; a bad record gives a RecordError with its line, never an exception.

Any layout `cheems.formats.layouts` reads (CheemsBench, CheemsPreference, samples, TRL/OpenRLHF,
UltraFeedback, HH-RLHF, LLaMA-Factory sharegpt/alpaca), from jsonl, a JSON array or Parquet. A
sample is a prompt in context (system prompt, earlier turns) with its responses; the preferences a
file may hold are not samples (they are annotations), so only the responses are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cheems.errors import FormatError
from cheems.formats.layouts import iter_records, parse_record
from cheems.formats.record import Record


@dataclass(frozen=True)
class SampleRecord:
    prompt: str
    responses: tuple[tuple[str, str], ...]  # (key, content)
    category: tuple[str, ...] = ()
    system_prompt: str | None = None
    line: int = 0
    history: tuple[tuple[str, str], ...] = ()  # (role, content), oldest first
    source: str = ""  # where it came from, when the record says (gRPC Ingest's Sample.source)


@dataclass(frozen=True)
class RecordError:
    line: int
    field: str
    message: str

    @classmethod
    def of(cls, error: FormatError) -> RecordError:
        return cls(error.line, error.field or "", error.message)


@dataclass
class Parsed:
    samples: list[SampleRecord] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)


def sample_of(record: Record) -> SampleRecord:
    responses = tuple((r.id, r.content) for r in record.responses)
    return SampleRecord(record.prompt, responses, record.category, record.system_prompt, record.line, record.history)


def parse_sample(obj: Any, path: str | Path = "<record>", line: int = 0) -> SampleRecord:
    """A sample from one decoded object of the `samples` layout; FormatError naming the field otherwise."""
    return sample_of(parse_record(obj, path, line, "samples"))


def read_samples(path: str | Path, layout: str | None = None) -> Parsed:
    """Every record of the file: good ones as samples, bad ones as RecordErrors with their line numbers."""
    parsed = Parsed()
    for _, record in iter_records(path, layout):
        if isinstance(record, FormatError):
            parsed.errors.append(RecordError.of(record))
        else:
            parsed.samples.append(sample_of(record))
    return parsed
