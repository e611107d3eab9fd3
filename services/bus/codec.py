"""Encoding events for Kafka: protobuf bytes plus headers naming the payload type and schema version.

Every encoded event carries three headers (UTF-8 values):

    content-type            application/x-protobuf; messageType=cheems.v1.SampleEvent
    cheems-schema-version   1
    cheems-type             cheems.v1.SampleEvent

`content-type` is for consumers the project did not write. The header name is the one CloudEvents'
Kafka protocol binding gives a value's media type; `application/x-protobuf; messageType=<full name>`
is a widely used way to name the protobuf message a payload holds (IANA registers
`application/x-protobuf` as an alias of `application/protobuf`, whose own parameters cannot name a
message). The value is the plain serialized message, without Confluent Schema Registry framing
(no magic byte, no schema id): decode it with the `.proto` files in protos/cheems/v1.

Decoding checks the two `cheems-*` headers; anything else (garbage bytes, an unknown version, the
wrong type) raises BadMessage, which consumers route to the dead-letter topic.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message

from cheems import errors
from services.bus.topics import PAYLOADS, SCHEMA_VERSION

VERSION_HEADER = "cheems-schema-version"
TYPE_HEADER = "cheems-type"
CONTENT_TYPE_HEADER = "content-type"
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
    name = expected.DESCRIPTOR.full_name
    headers = [
        (CONTENT_TYPE_HEADER, content_type(name).encode()),
        (VERSION_HEADER, str(SCHEMA_VERSION).encode()),
        (TYPE_HEADER, name.encode()),
    ]
    return Encoded(event.SerializeToString(), headers)


def content_type(message_type: str) -> str:
    """The `content-type` header of a serialized protobuf `message_type` (a full name, cheems.v1.X)."""
    return f"application/x-protobuf; messageType={message_type}"


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
