"""A record of preference or sample data in the project's terms, and the pieces every layout reads it with.

`cheems.formats.layouts` tells a record's layout and reads it into a `Record`: a prompt in context (system
prompt, earlier turns), its responses, and what is known of their order (pairs or a ranking).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cheems.errors import FormatError
from cheems.formats.responses import Response

Pair = tuple[str, str]  # (chosen id, rejected id)
Turn = tuple[str, str]  # (role, content)
ROLES = ("system", "user", "assistant", "tool")
CONTEXT_FIELDS = {"sys_prompt", "system_prompt", "history"}  # how the official layouts carry a context


@dataclass(frozen=True)
class Record:
    """A prompt in context, its responses and what is known of their order."""

    prompt: str
    responses: tuple[Response, ...]
    pairs: tuple[Pair, ...] = ()  # (chosen id, rejected id), each naming one of `responses`
    rank: Mapping[str, int] | None = None  # a full ranking (CheemsBench), lower is better
    category: tuple[str, ...] = ()
    system_prompt: str | None = None
    history: tuple[Turn, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)  # other fields of the record, kept
    layout: str = ""
    line: int = 0

    @property
    def context(self) -> tuple[str | None, tuple[Turn, ...], str]:
        """What identifies the prompt: two records with the same context are the same prompt."""
        return self.system_prompt, self.history, self.prompt


@dataclass(frozen=True)
class Tags:
    """How a layout spells a message: its role and content keys, and its role names -> ours."""

    role: str = "role"
    content: str = "content"
    roles: Mapping[str, str] = field(default_factory=lambda: {r: r for r in ROLES})


CHAT = Tags()


def messages(value: Any, path: str | Path, line: int, where: str, tags: Tags = CHAT) -> list[Turn]:
    """A list of messages as (role, content) turns."""
    if not isinstance(value, list):
        raise FormatError(path, line, f"expected a list of messages, got {type(value).__name__}", field=where)
    return [message(m, path, line, f"{where}[{i}]", tags) for i, m in enumerate(value)]


def message(message: Any, path: str | Path, line: int, where: str, tags: Tags = CHAT) -> Turn:
    if not isinstance(message, dict):
        raise FormatError(path, line, f"expected a message object, got {type(message).__name__}", field=where)
    role, content = message.get(tags.role), message.get(tags.content)
    if not isinstance(content, str):
        problem = "missing" if content is None else f"expected a string, got {type(content).__name__}"
        raise FormatError(path, line, problem, field=f"{where}.{tags.content}")
    if not isinstance(role, str) or role not in tags.roles:
        allowed = ", ".join(tags.roles)
        raise FormatError(path, line, f"expected a role ({allowed}), got {role!r}", field=f"{where}.{tags.role}")
    return tags.roles[role], content


def other_fields(obj: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """The fields of `obj` a layout does not read (nor the context fields), kept as they are."""
    return {k: v for k, v in obj.items() if k not in known and k not in CONTEXT_FIELDS}


def add_responses(responses: list[Response], more: Iterable[Response], path: str | Path, line: int) -> None:
    """Add responses not known yet; a known id with other content is a FormatError."""
    known = {r.id: r.content for r in responses}
    for response in more:
        if response.id not in known:
            responses.append(response)
            known[response.id] = response.content
        elif known[response.id] != response.content:
            raise FormatError(path, line, f"response id {response.id!r} reused with other content", "responses")


def check_pair(pair: Pair, ids: set[str], path: str | Path, line: int, where: str) -> None:
    for rid in pair:
        if rid not in ids:
            raise FormatError(path, line, f"names unknown response id {rid!r}", field=where)
    if pair[0] == pair[1]:
        raise FormatError(path, line, f"a response cannot be preferred to itself ({pair[0]!r})", field=where)
