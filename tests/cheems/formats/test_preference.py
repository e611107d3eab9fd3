"""CheemsPreference jsonl: pairwise and annotation-list layouts, merging by prompt, round trips."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from cheems.errors import FormatError
from cheems.formats.preference import PreferenceItem, read_preference, write_preference
from cheems.formats.responses import Response, content_id

GOOD_A, GOOD_B, OK, BAD = "很好。", "不好。", "还行。", "走开。"


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def write_lines(path: Path, lines: list[Any]) -> Path:
    text = "\n".join(line if isinstance(line, str) else dumps(line) for line in lines)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def pairwise(answer1: str, answer2: str, preference: Any = 1, text: str = "你好吗？", **extra: Any) -> dict[str, Any]:
    return {"input": text, "answer1": answer1, "answer2": answer2, "preference": preference, **extra}


def annotated(annotations: list[Any], text: str = "你好吗？", **extra: Any) -> dict[str, Any]:
    return {
        "input": text,
        "responses": [
            {"id": "a", "content": GOOD_A},
            {"id": "b", "content": GOOD_B},
            {"id": "c", "content": OK},
        ],
        "annotations": annotations,
        **extra,
    }


def read_error(path: Path) -> FormatError:
    with pytest.raises(FormatError) as info:
        read_preference(path)
    assert info.value.path == str(path)
    return info.value


# --- pairwise layout --------------------------------------------------------------------------


def test_content_id_is_md5_of_utf8() -> None:
    assert content_id(GOOD_A) == md5(GOOD_A) == hashlib.md5("很好。".encode()).hexdigest()
    assert len(content_id("")) == 32


def test_pairwise_lines_with_same_input_merge(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "pref.jsonl",
        [pairwise(GOOD_A, GOOD_B, 1), pairwise(GOOD_A, OK, 1), pairwise(OK, GOOD_B, 1, text="别的问题")],
    )
    first, second = read_preference(path)
    assert first == PreferenceItem(
        "你好吗？",
        (Response(md5(GOOD_A), GOOD_A), Response(md5(GOOD_B), GOOD_B), Response(md5(OK), OK)),
        ((md5(GOOD_A), md5(GOOD_B)), (md5(GOOD_A), md5(OK))),
    )
    assert second.input == "别的问题"
    assert second.pairs == ((md5(OK), md5(GOOD_B)),)


@pytest.mark.parametrize("preference", [2, "2"])
def test_pairwise_preference_2_swaps(tmp_path: Path, preference: Any) -> None:
    path = write_lines(tmp_path / "pref.jsonl", [pairwise(GOOD_B, GOOD_A, preference)])
    [got] = read_preference(path)
    assert got.pairs == ((md5(GOOD_A), md5(GOOD_B)),)
    assert [r.content for r in got.responses] == [GOOD_B, GOOD_A]


@pytest.mark.parametrize("preference", [1, "1"])
def test_pairwise_preference_1_keeps_order(tmp_path: Path, preference: Any) -> None:
    path = write_lines(tmp_path / "pref.jsonl", [pairwise(GOOD_A, GOOD_B, preference)])
    [got] = read_preference(path)
    assert got.pairs == ((md5(GOOD_A), md5(GOOD_B)),)


def test_pairwise_prompt_key_accepted(tmp_path: Path) -> None:
    record = pairwise(GOOD_A, GOOD_B)
    record["prompt"] = record.pop("input")
    [got] = read_preference(write_lines(tmp_path / "pref.jsonl", [record]))
    assert got.input == "你好吗？"
    assert got.extra == {}


def _without(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != key}


PAIRWISE_MALFORMED = [
    pytest.param(pairwise(GOOD_A, OK, 0), "preference", id="preference-0"),
    pytest.param(pairwise(GOOD_A, OK, 3), "preference", id="preference-3"),
    pytest.param(pairwise(GOOD_A, OK, "x"), "preference", id="preference-x"),
    pytest.param(pairwise(GOOD_A, OK, True), "preference", id="preference-true"),
    pytest.param(pairwise(GOOD_A, OK, None), "preference", id="preference-null"),
    pytest.param(pairwise(GOOD_A, OK, 1.5), "preference", id="preference-1.5"),
    pytest.param(pairwise(GOOD_A, GOOD_A, 1), "answer2", id="same-answer-twice"),
    pytest.param(pairwise(GOOD_A, 7, 1), "answer2", id="answer2-not-str"),
    pytest.param(_without(pairwise(GOOD_A, OK, 1), "input"), "input", id="missing-input"),
    # A line that clearly means the pairwise layout but lacks one of its fields should name that field.
    pytest.param(_without(pairwise(GOOD_A, OK, 1), "preference"), "preference", id="missing-preference"),
    pytest.param(_without(pairwise(GOOD_A, OK, 1), "answer1"), "answer1", id="missing-answer1"),
]


@pytest.mark.parametrize(("bad", "field"), PAIRWISE_MALFORMED)
def test_pairwise_malformed(tmp_path: Path, bad: dict[str, Any], field: str) -> None:
    path = write_lines(tmp_path / "pref.jsonl", [pairwise(GOOD_A, GOOD_B), pairwise(OK, GOOD_B, 2), bad])
    err = read_error(path)
    assert err.line == 3
    assert err.field == field
    assert str(err).startswith(f"{path}:3: {field}: ")


# --- annotation-list layout -------------------------------------------------------------------


def test_annotation_lists(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "pref.jsonl", [annotated([["a", "b", "1"], ["c", "b", "1"]])])
    [got] = read_preference(path)
    assert got == PreferenceItem(
        "你好吗？",
        (Response("a", GOOD_A), Response("b", GOOD_B), Response("c", OK)),
        (("a", "b"), ("c", "b")),
    )


def test_dict_annotations(tmp_path: Path) -> None:
    record = {
        "input": "你好吗？",
        "responses": [{"id": md5(GOOD_A), "content": GOOD_A}, {"id": md5(GOOD_B), "content": GOOD_B}],
        "annotations": [
            {"answer1": GOOD_B, "answer2": GOOD_A, "preference": 2},
            {"answer1": GOOD_A, "answer2": OK, "preference": "1"},
            [md5(OK), md5(GOOD_B), "1"],
        ],
    }
    [got] = read_preference(write_lines(tmp_path / "pref.jsonl", [record]))
    assert [r.id for r in got.responses] == [md5(GOOD_A), md5(GOOD_B), md5(OK)]
    assert got.pairs == ((md5(GOOD_A), md5(GOOD_B)), (md5(GOOD_A), md5(OK)), (md5(OK), md5(GOOD_B)))


def test_dict_annotation_bad_preference_names_annotation(tmp_path: Path) -> None:
    record = annotated([["a", "b", "1"], {"answer1": GOOD_A, "answer2": OK, "preference": 0}])
    err = read_error(write_lines(tmp_path / "pref.jsonl", [annotated([]), annotated([], text="二"), record]))
    assert (err.line, err.field) == (3, "annotations[1].preference")


def test_lines_merge_across_layouts_by_prompt_in_context(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "pref.jsonl",
        [
            annotated([["a", "b", "1"]], category=["闲聊"]),
            pairwise(GOOD_A, GOOD_B, text="别的问题"),
            {"input": "你好吗？", "responses": [{"id": "c", "content": OK}], "note": "无偏好"},  # samples: no pair
            pairwise(BAD, OK, 2),
            # the same text under a system prompt is another prompt
            {**annotated([["c", "a", "1"]]), "sys_prompt": "你是一个助手。"},
        ],
    )
    first, second, third = read_preference(path)
    assert first.input == "你好吗？"
    # the pairwise line knows OK only by its md5, so it is added beside "c" with the same text
    assert [r.id for r in first.responses] == ["a", "b", "c", md5(BAD), md5(OK)]
    assert first.pairs == (("a", "b"), (md5(OK), md5(BAD)))
    assert first.extra == {"category": ["闲聊"], "note": "无偏好"}
    assert second.input == "别的问题"
    assert second.extra == {}
    assert (third.input, third.pairs, third.extra) == ("你好吗？", (("c", "a"),), {"sys_prompt": "你是一个助手。"})


def test_an_annotation_names_only_responses_of_its_own_line(tmp_path: Path) -> None:
    lines = [annotated([["a", "b", "1"]]), {"input": "你好吗？", "responses": [{"id": "d", "content": BAD}],
             "annotations": [["d", "a", "1"]]}]  # fmt: skip
    err = read_error(write_lines(tmp_path / "pref.jsonl", lines))
    assert (err.line, err.field) == (2, "annotations[0]")
    assert "unknown response id 'a'" in str(err)


def test_duplicate_pairs_kept_once(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "pref.jsonl",
        [
            annotated([["a", "b", "1"], ["a", "b", "1"], ["b", "c", "1"]]),
            annotated([["b", "c", "1"], ["a", "b", "1"]]),
            pairwise(GOOD_A, GOOD_B, text="二"),
            pairwise(GOOD_B, GOOD_A, 2, text="二"),
        ],
    )
    first, second = read_preference(path)
    assert first.pairs == (("a", "b"), ("b", "c"))
    assert len(first.responses) == 3
    assert second.pairs == ((md5(GOOD_A), md5(GOOD_B)),)


def test_extra_fields_kept(tmp_path: Path) -> None:
    record = annotated([["a", "b", "1"]], category=["闲聊", "问候"], sys_prompt="你是一个助手。")
    [got] = read_preference(write_lines(tmp_path / "pref.jsonl", [record]))
    assert got.extra == {"category": ["闲聊", "问候"], "sys_prompt": "你是一个助手。"}
    assert got.to_json() == record


ANNOTATION_MALFORMED = [
    pytest.param(annotated([["a", "z", "1"]]), "annotations[0]", "unknown response id 'z'", id="unknown-id"),
    pytest.param(
        annotated([["a", "b", "1"], ["zz", "b", "1"]]),
        "annotations[1]",
        "unknown response id 'zz'",
        id="unknown-2nd",
    ),
    pytest.param(annotated([["a", "a", "1"]]), "annotations[0]", "itself", id="self-pair"),
    pytest.param(annotated([["a", "b", "0"]]), "annotations[0]", "expected [chosen_id", id="third-0"),
    pytest.param(annotated([["a", "b", "2"]]), "annotations[0]", "expected [chosen_id", id="third-2"),
    pytest.param(annotated([["a", "b", True]]), "annotations[0]", "expected [chosen_id", id="third-true"),
    pytest.param(annotated([["a", "b", None]]), "annotations[0]", "expected [chosen_id", id="third-null"),
    pytest.param(annotated([["a", "b"]]), "annotations[0]", "expected [chosen_id", id="too-short"),
    pytest.param(annotated([["a", "b", "1", "1"]]), "annotations[0]", "expected [chosen_id", id="too-long"),
    pytest.param(annotated([["a", 2, "1"]]), "annotations[0]", "expected [chosen_id", id="id-not-str"),
    pytest.param(annotated(["a>b"]), "annotations[0]", "expected [chosen_id", id="string-annotation"),
    pytest.param(annotated({"a": "b"}), "annotations", "expected list", id="annotations-not-list"),
    pytest.param({"input": "你好吗？"}, None, "no known layout fits the fields (input); accepted:", id="only-input"),
    pytest.param(
        {**annotated([]), "responses": [{"id": "a", "content": GOOD_A}, {"id": "a", "content": GOOD_B}]},
        "responses[1].id",
        "duplicate response id",
        id="duplicate-id-in-line",
    ),
    pytest.param({**annotated([]), "responses": []}, "responses", "empty", id="empty-responses"),
    pytest.param(
        {"input": "你好吗？", "responses": [{"id": "a", "content": OK}], "annotations": []},
        "responses",
        "reused with other content",
        id="id-reused-other-content",
    ),
]


@pytest.mark.parametrize(("bad", "field", "fragment"), ANNOTATION_MALFORMED)
def test_annotations_malformed(tmp_path: Path, bad: dict[str, Any], field: str | None, fragment: str) -> None:
    # Line 1 declares ids a, b, c for "你好吗？"; line 2 is another prompt; the bad line 3 merges into line 1.
    path = write_lines(tmp_path / "pref.jsonl", [annotated([["a", "b", "1"]]), annotated([], text="二"), bad])
    err = read_error(path)
    assert err.line == 3
    assert err.field == field
    assert fragment in str(err)
    assert str(err).startswith(f"{path}:3: {field}: " if field else f"{path}:3: ")


def test_pairwise_content_conflicting_with_declared_id(tmp_path: Path) -> None:
    # Line 1 declares md5(GOOD_A) as the id of different content; the pairwise line 2 reuses that id.
    first = {
        "input": "你好吗？",
        "responses": [{"id": md5(GOOD_A), "content": OK}, {"id": "b", "content": GOOD_B}],
        "annotations": [],
    }
    err = read_error(write_lines(tmp_path / "pref.jsonl", [first, pairwise(GOOD_A, GOOD_B)]))
    assert (err.line, err.field) == (2, "responses")


# --- writing ----------------------------------------------------------------------------------


def test_write_read_round_trip(tmp_path: Path) -> None:
    items = [
        PreferenceItem(
            "你好吗？",
            (Response("a", GOOD_A), Response("b", GOOD_B), Response("c", OK)),
            (("a", "b"), ("c", "b"), ("a", "c")),
            {"category": ["闲聊"], "sys_prompt": "你是一个助手。"},
        ),
        PreferenceItem("二", (Response(md5(BAD), BAD), Response(md5(OK), OK)), ((md5(OK), md5(BAD)),)),
    ]
    path = tmp_path / "pref.jsonl"
    assert write_preference(path, items) == 2
    assert read_preference(path) == items
    first_line = path.read_text(encoding="utf-8").splitlines()[0]
    assert json.loads(first_line)["annotations"] == [["a", "b", "1"], ["c", "b", "1"], ["a", "c", "1"]]
    assert "你好吗？" in first_line


def test_pairwise_file_rewritten_in_annotation_layout_reads_back_equal(tmp_path: Path) -> None:
    src = write_lines(
        tmp_path / "pairs.jsonl",
        [
            pairwise(GOOD_A, GOOD_B, category=["闲聊"]),
            pairwise(OK, GOOD_A, 2),
            pairwise(BAD, OK, "2", text="二"),
        ],
    )
    items = read_preference(src)
    out = tmp_path / "lists.jsonl"
    write_preference(out, items)
    assert read_preference(out) == items
    assert all("annotations" in json.loads(line) for line in out.read_text(encoding="utf-8").splitlines())


def test_failed_write_leaves_existing_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "pref.jsonl"
    good = PreferenceItem("你好吗？", (Response("a", GOOD_A), Response("b", GOOD_B)), (("a", "b"),))
    write_preference(path, [good])
    before = path.read_bytes()
    bad = PreferenceItem("二", good.responses, good.pairs, {"score": float("inf")})
    with pytest.raises(ValueError):
        write_preference(path, [good, bad])
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["pref.jsonl"]
