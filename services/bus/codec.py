"""Encoding events for Kafka: protobuf bytes plus headers naming the payload type and schema version.

Decoding checks both; anything else (garbage bytes, an unknown version, the wrong type) raises
BadMessage, which consumers route to the dead-letter topic.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message

from cheems import errors
from services.bus.topics import PAYLOADS, SCHEMA_VERSION

VERSION_HEADER = "cheems-schema-version"
TYPE_HEADER = "cheems-type"
Headers = list[tuple[str, bytes]]


class BadMessage(errors.InvalidInput):
    """A message that cannot be decoded as its topic's event."""


@dataclass(frozen=True)
class Encoded:
    value: bytes
    headers: Headers


def encode(topic: str, event: Message) -> Encoded:
    expected = PAYLOADS.get(topic)
    if expected is None or not isinstance(event, expected):
        raise ValueError(
            f"topic {topic!r} carries {expected.__name__ if expected else 'nothing known'}, not {type(event).__name__}"
        )
    header = getattr(event, "header", None)
    if header is not None:
        header.schema_version = header.schema_version or SCHEMA_VERSION
        header.event_id = header.event_id or uuid.uuid4().hex
        if not header.HasField("produced_at"):
            header.produced_at.GetCurrentTime()
    headers = [(VERSION_HEADER, str(SCHEMA_VERSION).encode()), (TYPE_HEADER, expected.DESCRIPTOR.full_name.encode())]
    return Encoded(event.SerializeToString(), headers)


def decode(topic: str, value: bytes | None, headers: Headers) -> Message:
    expected = PAYLOADS.get(topic)
    if expected is None:
        raise BadMessage(f"unknown topic {topic!r}")
    found = {k: v for k, v in headers or []}
    version = found.get(VERSION_HEADER, b"").decode(errors="replace")
    if version != str(SCHEMA_VERSION):
        raise BadMessage(f"unsupported schema version {version or 'missing'!r} on {topic} (expected {SCHEMA_VERSION})")
    kind = found.get(TYPE_HEADER, b"").decode(errors="replace")
    if kind != expected.DESCRIPTOR.full_name:
        raise BadMessage(f"{topic} carries {expected.DESCRIPTOR.full_name}, got {kind or 'no type header'!r}")
    try:
        return expected.FromString(value or b"")
    except DecodeError as e:
        raise BadMessage(f"undecodable {kind} on {topic}: {e}") from None
