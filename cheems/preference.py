"""CheemsPreference jsonl, in both layouts the official loader accepts.

Pairwise, one pair per line (response ids are the md5 of the content):
    {"input": str, "answer1": str, "answer2": str, "preference": 1 | 2}
Annotation lists, one prompt per line:
    {"input": str, "responses": [{"id", "content"}], "annotations": [[chosen_id, rejected_id, "1"], ...]}
where an annotation may also be an `{"answer1", "answer2", "preference"}` object. Lines sharing
an `input` are merged into one prompt, as the official loader does. Other fields are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cheems.cheemsbench import prompt_key
from cheems.errors import FormatError
from cheems.jsonl import iter_objects, require, write_objects
from cheems.responses import Response, content_id, parse_responses

Pair = tuple[str, str]  # (chosen id, rejected id)
_PAIRWISE = {"answer1", "answer2", "preference"}
_KNOWN = {"input", "prompt", "responses", "annotations", *_PAIRWISE}


@dataclass(frozen=True)
class PreferenceItem:
    input: str
    responses: tuple[Response, ...]
    pairs: tuple[Pair, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "responses": [r.to_json() for r in self.responses],
            "annotations": [[chosen, rejected, "1"] for chosen, rejected in self.pairs],
            **self.extra,
        }


@dataclass
class _Draft:
    responses: dict[str, Response] = field(default_factory=dict)
    pairs: dict[Pair, None] = field(default_factory=dict)  # ordered set
    extra: dict[str, Any] = field(default_factory=dict)

    def add_response(self, response: Response, path: str | Path, line: int) -> None:
        known = self.responses.get(response.id)
        if known is not None and known.content != response.content:
            raise FormatError(path, line, f"response id {response.id!r} reused with other content", "responses")
        self.responses[response.id] = response

    def add_pair(self, pair: Pair, path: str | Path, line: int, where: str) -> None:
        for rid in pair:
            if rid not in self.responses:
                raise FormatError(path, line, f"names unknown response id {rid!r}", field=where)
        if pair[0] == pair[1]:
            raise FormatError(path, line, f"a response cannot be preferred to itself ({pair[0]!r})", where)
        self.pairs[pair] = None


def read_preference(path: str | Path) -> list[PreferenceItem]:
    """Read a preference file, merging lines that share a prompt; FormatError names file and line."""
    drafts: dict[str, _Draft] = {}
    for line, obj in iter_objects(path):
        text = require(obj, prompt_key(obj), str, path, line)
        draft = drafts.setdefault(text, _Draft())
        if "responses" in obj:
            for response in parse_responses(obj["responses"], path, line):
                draft.add_response(response, path, line)
        if _PAIRWISE & obj.keys() and "annotations" not in obj:
            _add_answer_pair(draft, obj, path, line, "")
        elif "annotations" in obj:
            _add_annotations(draft, obj["annotations"], path, line)
        else:
            raise FormatError(path, line, "needs answer1/answer2/preference or responses/annotations")
        draft.extra.update({k: v for k, v in obj.items() if k not in _KNOWN})
    return [PreferenceItem(text, tuple(d.responses.values()), tuple(d.pairs), d.extra) for text, d in drafts.items()]


def _add_annotations(draft: _Draft, value: Any, path: str | Path, line: int) -> None:
    if not isinstance(value, list):
        raise FormatError(path, line, f"expected a list, got {type(value).__name__}", field="annotations")
    for i, anno in enumerate(value):
        where = f"annotations[{i}]"
        if isinstance(anno, dict):
            _add_answer_pair(draft, anno, path, line, where + ".")
            continue
        ok = isinstance(anno, list) and len(anno) == 3 and all(isinstance(x, str) for x in anno[:2])
        if not ok or str(anno[2]) != "1":
            raise FormatError(path, line, f'expected [chosen_id, rejected_id, "1"], got {anno!r}', field=where)
        draft.add_pair((anno[0], anno[1]), path, line, where)


def _add_answer_pair(draft: _Draft, obj: dict[str, Any], path: str | Path, line: int, prefix: str) -> None:
    """An {answer1, answer2, preference} record; `prefix` locates it in the line (e.g. "annotations[2].")."""
    answers = []
    for key in ("answer1", "answer2"):
        try:
            answers.append(require(obj, key, str, path, line))
        except FormatError as e:
            raise FormatError(path, line, e.message, field=prefix + key) from None
    preference = obj.get("preference")
    if isinstance(preference, bool) or str(preference) not in {"1", "2"}:
        problem = "missing field" if "preference" not in obj else f"expected 1 or 2, got {preference!r}"
        raise FormatError(path, line, problem, field=prefix + "preference")
    ids = []
    for content in answers:
        response = Response(content_id(content), content)
        draft.add_response(response, path, line)
        ids.append(response.id)
    chosen, rejected = ids if str(preference) == "1" else ids[::-1]
    draft.add_pair((chosen, rejected), path, line, prefix + "preference")


def write_preference(path: str | Path, items: Iterable[PreferenceItem]) -> int:
    """Write items in the annotation-list layout, atomically."""
    return write_objects(path, (item.to_json() for item in items))
