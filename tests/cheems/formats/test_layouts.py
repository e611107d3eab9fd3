"""The community's preference layouts, each in the exact shape its project documents, read into one Record;
every bad record a FormatError naming its line and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cheems.errors import FormatError, InvalidInput
from cheems.formats.layouts import detect, iter_records, parse_record, read_records
from cheems.formats.record import Record
from cheems.formats.responses import content_id

SYSTEM = "你是一个乐于助人的助手。"
FIRST_Q, FIRST_A = "你好！", "你好，有什么可以帮你？"
QUESTION = "天空为什么是蓝色的？"
CHOSEN = "因为瑞利散射：短波长的蓝光被大气散射得更多。"
REJECTED = "因为大海是蓝色的。"


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


# One conversation (system prompt, one earlier exchange, the question; chosen and rejected answers) in
# every layout that can hold it, shaped as each project documents its format.
MULTI_TURN: dict[str, dict[str, Any]] = {
    # TRL "conversational, explicit prompt" (docs: dataset_formats, preference); OpenRLHF reads it too
    "trl-conversational": {
        "prompt": [msg("system", SYSTEM), msg("user", FIRST_Q), msg("assistant", FIRST_A), msg("user", QUESTION)],
        "chosen": [msg("assistant", CHOSEN)],
        "rejected": [msg("assistant", REJECTED)],
    },
    # TRL "conversational, implicit prompt"; OpenRLHF's preference_dataset_mixture2_and_safe_pku shape
    "trl-implicit": {
        "chosen": [
            msg("system", SYSTEM),
            msg("user", FIRST_Q),
            msg("assistant", FIRST_A),
            msg("user", QUESTION),
            msg("assistant", CHOSEN),
        ],
        "rejected": [
            msg("system", SYSTEM),
            msg("user", FIRST_Q),
            msg("assistant", FIRST_A),
            msg("user", QUESTION),
            msg("assistant", REJECTED),
        ],
    },
    # LLaMA-Factory data/README: sharegpt preference, default tags, `system` column
    "sharegpt": {
        "conversations": [
            {"from": "human", "value": FIRST_Q},
            {"from": "gpt", "value": FIRST_A},
            {"from": "human", "value": QUESTION},
        ],
        "chosen": {"from": "gpt", "value": CHOSEN},
        "rejected": {"from": "gpt", "value": REJECTED},
        "system": SYSTEM,
    },
    # LLaMA-Factory data/README: alpaca preference with the optional system and history columns
    "alpaca": {
        "instruction": QUESTION,
        "input": "",
        "chosen": CHOSEN,
        "rejected": REJECTED,
        "system": SYSTEM,
        "history": [[FIRST_Q, FIRST_A]],
    },
    # the official layout with our context fields
    "annotations": {
        "input": QUESTION,
        "sys_prompt": SYSTEM,
        "history": [msg("user", FIRST_Q), msg("assistant", FIRST_A)],
        "responses": [{"id": "c", "content": CHOSEN}, {"id": "r", "content": REJECTED}],
        "annotations": [["c", "r", "1"]],
    },
}

# One question without system prompt or history, in the layouts that have no room for them.
SINGLE_TURN: dict[str, dict[str, Any]] = {
    "trl-standard": {"prompt": QUESTION, "chosen": CHOSEN, "rejected": REJECTED},  # TRL "standard, explicit prompt"
    # HuggingFaceH4/ultrafeedback_binarized (train_prefs): a string prompt beside full conversations
    "ultrafeedback": {
        "prompt": QUESTION,
        "prompt_id": "4f9c1a",
        "chosen": [msg("user", QUESTION), msg("assistant", CHOSEN)],
        "rejected": [msg("user", QUESTION), msg("assistant", REJECTED)],
        "messages": [msg("user", QUESTION), msg("assistant", CHOSEN)],
        "score_chosen": 8.5,
        "score_rejected": 3.0,
    },
    # Anthropic/hh-rlhf: two transcripts
    "hh-rlhf": {
        "chosen": f"\n\nHuman: {QUESTION}\n\nAssistant: {CHOSEN}",
        "rejected": f"\n\nHuman: {QUESTION}\n\nAssistant: {REJECTED}",
    },
    "alpaca-input": {"instruction": "天空为什么是", "input": "蓝色的？", "chosen": CHOSEN, "rejected": REJECTED},
    "pairwise": {"input": QUESTION, "answer1": REJECTED, "answer2": CHOSEN, "preference": 2},  # official
}


def check(record: Record, system: str | None, history: tuple[tuple[str, str], ...]) -> None:
    assert record.system_prompt == system
    assert record.history == history
    by_id = {r.id: r.content for r in record.responses}
    [(chosen, rejected)] = record.pairs
    assert (by_id[chosen], by_id[rejected]) == (CHOSEN, REJECTED)


@pytest.mark.parametrize("name", MULTI_TURN)
def test_multi_turn_layouts_keep_system_prompt_and_history(name: str) -> None:
    record = parse_record(MULTI_TURN[name], "data.jsonl", 7)
    assert record.prompt == QUESTION and record.line == 7
    check(record, SYSTEM, (("user", FIRST_Q), ("assistant", FIRST_A)))


@pytest.mark.parametrize("name", SINGLE_TURN)
def test_single_turn_layouts(name: str) -> None:
    record = parse_record(SINGLE_TURN[name], "data.jsonl", 1)
    assert record.prompt == (QUESTION if name != "alpaca-input" else "天空为什么是\n蓝色的？")
    check(record, None, ())


def test_layouts_are_told_by_their_fields() -> None:
    told = {name: detect(obj) for name, obj in {**MULTI_TURN, **SINGLE_TURN}.items()}
    assert told == {
        "trl-conversational": "trl",
        "trl-implicit": "trl",
        "sharegpt": "sharegpt",
        "alpaca": "alpaca",
        "annotations": "annotations",
        "trl-standard": "trl",
        "ultrafeedback": "trl",
        "hh-rlhf": "hh-rlhf",
        "alpaca-input": "alpaca",
        "pairwise": "pairwise",
    }


def test_text_known_responses_get_the_official_md5_ids_and_other_fields_are_kept() -> None:
    record = parse_record(SINGLE_TURN["ultrafeedback"], "uf.jsonl", 1)
    assert [r.id for r in record.responses] == [content_id(CHOSEN), content_id(REJECTED)]
    assert record.extra["score_chosen"] == 8.5 and record.extra["prompt_id"] == "4f9c1a"


def test_hh_rlhf_multi_turn_transcript() -> None:
    head = f"\n\nHuman: {FIRST_Q}\n\nAssistant: {FIRST_A}\n\nHuman: {QUESTION}\n\nAssistant: "
    record = parse_record({"chosen": head + CHOSEN, "rejected": head + REJECTED}, "hh.jsonl", 1)
    assert record.prompt == QUESTION
    check(record, None, (("user", FIRST_Q), ("assistant", FIRST_A)))


BAD = [
    pytest.param(
        {"prompt": QUESTION}, None, "no known layout fits the fields (prompt); accepted: cheemsbench", id="none"
    ),
    pytest.param({"chosen": CHOSEN, "rejected": REJECTED}, "prompt", "need a prompt", id="trl-strings-no-prompt"),
    pytest.param(
        {"prompt": QUESTION, "chosen": CHOSEN, "rejected": [msg("assistant", REJECTED)]},
        "rejected",
        "must both be strings or both messages",
        id="trl-mixed",
    ),
    pytest.param({"prompt": QUESTION, "chosen": CHOSEN, "rejected": CHOSEN}, "rejected", "same text", id="trl-same"),
    pytest.param(
        {"prompt": [msg("user", QUESTION)], "chosen": [msg("user", CHOSEN)], "rejected": [msg("assistant", REJECTED)]},
        "chosen",
        "the last turn must be the assistant's",
        id="trl-chosen-is-user",
    ),
    pytest.param(
        {
            "prompt": [msg("robot", QUESTION)],
            "chosen": [msg("assistant", CHOSEN)],
            "rejected": [msg("assistant", REJECTED)],
        },
        "prompt[0].role",
        "expected a role",
        id="bad-role",
    ),
    pytest.param(
        {
            "prompt": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "chosen": [msg("assistant", CHOSEN)],
            "rejected": [msg("assistant", REJECTED)],
        },
        "prompt[0].content",
        "expected a string",
        id="multimodal-content",
    ),
    pytest.param(
        {"chosen": f"\n\nHuman: a\n\nAssistant: {CHOSEN}", "rejected": "\n\nHuman: b\n\nAssistant: x"},
        "rejected",
        "differ before their last Assistant turn",
        id="hh-different-context",
    ),
    pytest.param(
        {"chosen": "\n\nHuman: a", "rejected": "\n\nHuman: a\n\nAssistant: x"},
        "chosen",
        "end with an Assistant",
        id="hh-no-answer",
    ),
    pytest.param(
        {**MULTI_TURN["sharegpt"], "chosen": {"from": "human", "value": CHOSEN}},
        "chosen.from",
        "assistant's (gpt) turn",
        id="sharegpt-chosen-human",
    ),
    pytest.param(
        {**MULTI_TURN["sharegpt"], "conversations": [{"from": "gpt", "value": "x"}]},
        "conversations",
        "must end in a user turn",
        id="sharegpt-ends-with-gpt",
    ),
    pytest.param(
        {**MULTI_TURN["alpaca"], "history": [["only the question"]]}, "history[0]", "two strings", id="alpaca-history"
    ),
    pytest.param({**MULTI_TURN["alpaca"], "instruction": "  "}, "instruction", "empty prompt", id="alpaca-empty"),
    pytest.param(
        {**MULTI_TURN["annotations"], "history": [msg("system", "x")]},
        "history",
        "belongs in sys_prompt",
        id="history-system",
    ),
    pytest.param(
        {**MULTI_TURN["annotations"], "annotations": [["c", "z", "1"]]},
        "annotations[0]",
        "unknown response id 'z'",
        id="annotation-unknown-id",
    ),
]


@pytest.mark.parametrize(("obj", "field", "fragment"), BAD)
def test_a_bad_record_names_its_line_and_field(obj: dict[str, Any], field: str | None, fragment: str) -> None:
    with pytest.raises(FormatError) as info:
        parse_record(obj, "data.jsonl", 12)
    assert (info.value.line, info.value.field) == (12, field)
    assert fragment in str(info.value)


def test_a_forced_layout_reads_only_that_layout(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join(json.dumps(o, ensure_ascii=False) for o in (MULTI_TURN["alpaca"], SINGLE_TURN["trl-standard"])),
        encoding="utf-8",
    )
    assert [r.layout for r in read_records(path)] == ["alpaca", "trl"]
    results = list(iter_records(path, "alpaca"))
    assert isinstance(results[0][1], Record)
    assert isinstance(results[1][1], FormatError) and results[1][1].field == "instruction"
    with pytest.raises(InvalidInput, match="unknown format 'csv'; accepted: cheemsbench"):
        list(iter_records(path, "csv"))


# --- files of other kinds: JSON arrays (LLaMA-Factory ships .json) and Parquet (dataset hubs) -------


def test_a_json_array_file_is_read_record_by_record_with_line_numbers(tmp_path: Path) -> None:
    records = [MULTI_TURN["sharegpt"]] * 300
    path = tmp_path / "dpo_zh_demo.json"
    path.write_text(json.dumps(records, ensure_ascii=False, indent=2), encoding="utf-8")  # LLaMA-Factory's style
    items = list(iter_records(path))
    assert len(items) == 300  # not one "record" per physical line
    assert all(isinstance(r, Record) for _, r in items)
    lines_per_record = path.read_text(encoding="utf-8").count("\n") // 300
    assert [line for line, _ in items[:3]] == [2, 2 + lines_per_record, 2 + 2 * lines_per_record]


def test_a_bad_element_of_a_json_array_is_reported_and_the_others_read(tmp_path: Path) -> None:
    path = tmp_path / "arr.json"
    good = json.dumps(SINGLE_TURN["trl-standard"], ensure_ascii=False)
    path.write_text(f'[\n{good},\n{{"prompt": "\\ud800"}},\n"text",\n{good}\n]\n', encoding="utf-8")
    items = list(iter_records(path))
    assert [line for line, _ in items] == [2, 3, 4, 5]
    assert [type(r).__name__ for _, r in items] == ["Record", "FormatError", "FormatError", "Record"]
    assert "lone surrogate" in str(items[1][1]) and "expected a JSON object" in str(items[2][1])


def test_a_broken_json_array_reports_where_reading_stopped(tmp_path: Path) -> None:
    path = tmp_path / "arr.json"
    good = json.dumps(SINGLE_TURN["trl-standard"], ensure_ascii=False)
    path.write_text(f"[\n{good},\n{{broken\n", encoding="utf-8")
    items = list(iter_records(path))
    assert isinstance(items[0][1], Record)
    assert items[1][0] == 3 and "the rest of the file cannot be read" in str(items[1][1])


def test_parquet_rows_are_records(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")  # a dev dependency: installed by `make setup`
    import pyarrow.parquet as pq

    rows = [
        SINGLE_TURN["ultrafeedback"],
        {**SINGLE_TURN["ultrafeedback"], "chosen": SINGLE_TURN["ultrafeedback"]["rejected"]},
    ]
    path = tmp_path / "train_prefs-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    (one, first), (two, second) = list(iter_records(path))
    assert (one, two) == (1, 2)
    assert isinstance(first, Record) and first.prompt == QUESTION
    assert isinstance(second, FormatError) and "same text" in str(second)


def test_a_file_that_is_not_parquet_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_text("not parquet", encoding="utf-8")
    with pytest.raises(InvalidInput, match="not a readable Parquet file"):
        list(iter_records(path))
