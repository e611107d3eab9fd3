"""The preference layouts of the community's tools, read into `Record`s (see `cheems.formats.layouts` for the table).

Each holds one preference: a conversation's context and two answers to it, chosen and rejected.
Responses get the official ids, the md5 of their text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cheems.errors import FormatError
from cheems.formats.jsonl import require
from cheems.formats.record import Record, Tags, Turn, message, messages, other_fields
from cheems.formats.responses import Response, content_id

SHAREGPT = Tags("from", "value", {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                                  "system": "system"})  # fmt: skip


def from_turns(
    context: list[Turn], chosen: str, rejected: str, path: str | Path, line: int, where: str, layout: str, **extra: Any
) -> Record:
    """A record from a conversation's context ([system?], ..., user) and the two responses that follow it."""
    system = context[0][1] if context and context[0][0] == "system" else None
    turns = context[1:] if system is not None else context
    if not turns or turns[-1][0] != "user":
        raise FormatError(path, line, "the conversation must end in a user turn before the responses", field=where)
    if any(role == "system" for role, _ in turns):
        raise FormatError(path, line, "a system message is only allowed first", field=where)
    if chosen == rejected:
        raise FormatError(path, line, "chosen and rejected are the same text", field="rejected")
    responses = (Response(content_id(chosen), chosen), Response(content_id(rejected), rejected))
    return Record(
        turns[-1][1],
        responses,
        ((responses[0].id, responses[1].id),),
        system_prompt=system or None,
        history=tuple(turns[:-1]),
        layout=layout,
        line=line,
        extra=extra,
    )


def trl(obj: dict[str, Any], path: str | Path, line: int) -> Record:
    """TRL's preference formats (standard and conversational, explicit or implicit prompt), which OpenRLHF
    reads too, and UltraFeedback-binarized (a string prompt beside full chosen/rejected conversations)."""
    chosen, rejected, prompt = obj.get("chosen"), obj.get("rejected"), obj.get("prompt")
    extra = other_fields(obj, {"prompt", "chosen", "rejected"})
    for key, value in (("chosen", chosen), ("rejected", rejected)):
        if not isinstance(value, (str, list)):
            problem = "missing field" if value is None else f"expected a string or messages, got {type(value).__name__}"
            raise FormatError(path, line, problem, field=key)
    if isinstance(chosen, str) and isinstance(rejected, str):
        if prompt is None:
            raise FormatError(
                path,
                line,
                "plain-text chosen/rejected need a prompt (hh-rlhf transcripts start with Human:)",
                field="prompt",
            )
        context = messages(prompt, path, line, "prompt") if isinstance(prompt, list) else [_user(prompt, path, line)]
        return from_turns(context, chosen, rejected, path, line, "prompt", "trl", **extra)
    if not (isinstance(chosen, list) and isinstance(rejected, list)):
        raise FormatError(path, line, "chosen and rejected must both be strings or both messages", field="rejected")
    full_c, full_r = messages(chosen, path, line, "chosen"), messages(rejected, path, line, "rejected")
    if full_c and full_c[0][0] != "assistant":  # whole conversations: the context is what they share
        if len(full_c) != len(full_r) or full_c[:-1] != full_r[:-1]:
            raise FormatError(path, line, "chosen and rejected differ before their last turn", field="rejected")
        context, answers = full_c[:-1], (full_c[-1], full_r[-1])
    else:
        if prompt is None:
            raise FormatError(path, line, "missing field (chosen holds only the assistant's turn)", field="prompt")
        context = messages(prompt, path, line, "prompt") if isinstance(prompt, list) else [_user(prompt, path, line)]
        if len(full_c) != 1 or len(full_r) != 1:
            raise FormatError(path, line, "expected exactly one assistant message", field="chosen")
        answers = (full_c[0], full_r[0])
    for key, (role, _) in zip(("chosen", "rejected"), answers, strict=True):
        if role != "assistant":
            raise FormatError(path, line, f"the last turn must be the assistant's, got {role!r}", field=key)
    return from_turns(context, answers[0][1], answers[1][1], path, line, "prompt", "trl", **extra)


def _user(prompt: Any, path: str | Path, line: int) -> Turn:
    if not isinstance(prompt, str):
        raise FormatError(path, line, f"expected a string or messages, got {type(prompt).__name__}", field="prompt")
    return "user", prompt


_HH_TURN = re.compile(r"\n\n(Human|Assistant): ?")


def hh_rlhf(obj: dict[str, Any], path: str | Path, line: int) -> Record:
    """Anthropic HH-RLHF: two transcripts that share everything but the last Assistant turn."""
    turns = {key: _transcript(require(obj, key, str, path, line), path, line, key) for key in ("chosen", "rejected")}
    chosen, rejected = turns["chosen"], turns["rejected"]
    if len(chosen) != len(rejected) or chosen[:-1] != rejected[:-1]:
        raise FormatError(path, line, "chosen and rejected differ before their last Assistant turn", field="rejected")
    extra = other_fields(obj, {"chosen", "rejected"})
    return from_turns(chosen[:-1], chosen[-1][1], rejected[-1][1], path, line, "chosen", "hh-rlhf", **extra)


def _transcript(text: str, path: str | Path, line: int, key: str) -> list[Turn]:
    parts = _HH_TURN.split("\n\n" + text.lstrip("\n"))
    if parts[0].strip():
        raise FormatError(path, line, "a transcript must start with Human:", field=key)
    turns = [
        ("user" if who == "Human" else "assistant", said.strip())
        for who, said in zip(parts[1::2], parts[2::2], strict=True)
    ]
    if not turns or turns[-1][0] != "assistant":
        raise FormatError(path, line, "a transcript must end with an Assistant: turn", field=key)
    return turns


def sharegpt(obj: dict[str, Any], path: str | Path, line: int) -> Record:
    """LLaMA-Factory's sharegpt preference layout (its default tags: from/value, human/gpt, system column)."""
    context = messages(obj["conversations"], path, line, "conversations", SHAREGPT)
    system = obj.get("system")
    if system is not None and not isinstance(system, str):
        raise FormatError(path, line, f"expected a string, got {type(system).__name__}", field="system")
    if system and not (context and context[0][0] == "system"):
        context.insert(0, ("system", system))
    answers = []
    for key in ("chosen", "rejected"):
        role, content = message(require(obj, key, dict, path, line), path, line, key, SHAREGPT)
        if role != "assistant":
            raise FormatError(path, line, f"expected the assistant's (gpt) turn, got {role!r}", field=f"{key}.from")
        answers.append(content)
    extra = other_fields(obj, {"conversations", "chosen", "rejected", "system"})
    return from_turns(context, answers[0], answers[1], path, line, "conversations", "sharegpt", **extra)


def alpaca(obj: dict[str, Any], path: str | Path, line: int) -> Record:
    """LLaMA-Factory's alpaca preference layout: the prompt is instruction, then input on the next line."""
    instruction = require(obj, "instruction", str, path, line)
    query = obj.get("input") or ""
    if not isinstance(query, str):
        raise FormatError(path, line, f"expected a string, got {type(query).__name__}", field="input")
    context: list[Turn] = []
    system = obj.get("system")
    if system:
        context.append(("system", require(obj, "system", str, path, line)))
    history = obj.get("history") or []
    if not isinstance(history, list):
        raise FormatError(path, line, "expected a list of [query, answer] pairs", field="history")
    for i, turn in enumerate(history):
        if not (isinstance(turn, list) and len(turn) == 2 and all(isinstance(t, str) for t in turn)):
            raise FormatError(path, line, "expected [query, answer], two strings", field=f"history[{i}]")
        context += [("user", turn[0]), ("assistant", turn[1])]
    context.append(("user", f"{instruction}\n{query}" if query else instruction))
    chosen, rejected = (require(obj, key, str, path, line) for key in ("chosen", "rejected"))
    extra = other_fields(obj, {"instruction", "input", "chosen", "rejected", "system", "history"})
    return from_turns(context, chosen, rejected, path, line, "instruction", "alpaca", **extra)
