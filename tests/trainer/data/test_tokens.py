"""Training data: bench and preference files into prompt groups, tokenized with the length policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cheems.chat import Conversation, encode
from cheems.formats.cheemsbench import ranked_pairs
from cheems.formats.responses import Response, content_id
from trainer.data import (
    Dataset,
    LengthPolicy,
    LengthStats,
    PromptGroup,
    read_groups,
    tokenize_groups,
)

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "sample"
IM_END = 151645
MAX = 64
LONG = "这是一个非常冗长而且反复啰嗦的回答。" * 40  # hundreds of tokens: over MAX


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def responses(**contents: str) -> list[dict[str, str]]:
    return [{"id": rid, "content": text} for rid, text in contents.items()]


# --- read_groups -------------------------------------------------------------------------------


def test_read_bench_file(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "bench.jsonl",
        [
            {
                "input": "北京是哪个国家的首都？",
                "responses": responses(r1="中国。", r2="北京是中国的首都。", r3="不知道。", r4="日本。"),
                "rank": {"r1": 2, "r2": "1", "r3": 2, "r4": 3},
                "category": ["知识", "地理"],
                "sys_prompt": "请用简体中文回答。",
            },
            {
                "input": "写一句关于春天的诗。",
                "responses": responses(a="春风又绿江南岸。", b="春天来了。"),
                "rank": {"a": 1, "b": 1},
                "category": ["写作"],
                "sys_prompt": "",
            },
        ],
    )
    first, second = read_groups(path)
    assert first.prompt == "北京是哪个国家的首都？"
    assert [r.id for r in first.responses] == ["r1", "r2", "r3", "r4"]
    assert first.pairs == tuple(ranked_pairs([2, 1, 2, 3]))
    assert first.pairs == ((1, 0), (0, 3), (1, 2), (1, 3), (2, 3))  # better first, ties skipped
    assert first.category == "知识"
    assert first.system_prompt == "请用简体中文回答。"
    assert second.pairs == ()  # all tied
    assert second.category == "写作"
    assert second.system_prompt is None  # an empty sys_prompt is no system prompt


def test_read_pairwise_preference_file(tmp_path: Path) -> None:
    a, b, c = "答案甲：一加一等于二。", "答案乙：一加一等于三。", "答案丙：等于二。"
    path = write_jsonl(
        tmp_path / "pref.jsonl",
        [
            {
                "input": "一加一等于几？",
                "answer1": a,
                "answer2": b,
                "preference": 1,
                "category": ["数学", "算术"],
            },
            {"input": "一加一等于几？", "answer1": b, "answer2": c, "preference": 2},
            {
                "input": "你是谁？",
                "answer1": "我是助手。",
                "answer2": "走开。",
                "preference": "1",
                "sys_prompt": "你是一个礼貌的助手。",
            },
        ],
    )
    math_group, who = read_groups(path)
    assert [r.content for r in math_group.responses] == [a, b, c]
    assert [r.id for r in math_group.responses] == [content_id(a), content_id(b), content_id(c)]
    assert math_group.pairs == ((0, 1), (2, 1))  # response indices, chosen first
    assert math_group.category == "数学"
    assert math_group.system_prompt is None
    assert who.pairs == ((0, 1),)
    assert who.category is None
    assert who.system_prompt == "你是一个礼貌的助手。"


def test_read_annotation_preference_file(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "pref.jsonl",
        [
            {
                "input": "推荐一本书。",
                "responses": responses(x="《红楼梦》。", y="不推荐。", z="《三体》，很好看。"),
                "annotations": [
                    ["z", "y", "1"],
                    ["x", "y", "1"],
                    {"answer1": "《西游记》。", "answer2": "《水浒传》。", "preference": 2},
                ],
                "category": ["推荐"],
                "sys_prompt": "简短回答。",
            }
        ],
    )
    (group,) = read_groups(path)
    assert isinstance(group, PromptGroup)
    # an object annotation names its responses by content: they join the group with md5 ids
    assert [r.id for r in group.responses] == [
        "x",
        "y",
        "z",
        content_id("《西游记》。"),
        content_id("《水浒传》。"),
    ]
    assert group.pairs == ((2, 1), (0, 1), (4, 3))
    assert group.category == "推荐"
    assert group.system_prompt == "简短回答。"


# --- tokenize_groups ---------------------------------------------------------------------------


def length_groups() -> list[PromptGroup]:
    def group(prompt: str, pairs: list[tuple[int, int]], *contents: str) -> PromptGroup:
        return PromptGroup(prompt, tuple(Response(f"r{i}", c) for i, c in enumerate(contents)), tuple(pairs))

    return [
        # the long response 2 goes with its pairs (2,0) and (3,2); response 3 is left unpaired
        group(
            "问题一：天空为什么是蓝的？",
            [(0, 1), (2, 0), (3, 2)],
            "因为瑞利散射。",
            "不知道。",
            LONG,
            "因为颜色。",
        ),
        # the only pair goes with the long response: the prompt is left with nothing
        group("问题二：水的沸点是多少？", [(1, 0)], LONG, "一百摄氏度。"),
        group("问题三：一周有几天？", [(0, 1)], "七天。", "五天。"),
        group("问题四：你好吗？", [], "很好。", "还行。"),  # no pair at all
    ]


def test_lengths_of_the_fixture(tokenizer: Any) -> None:
    for g in length_groups():
        for r in g.responses:
            n = len(encode(tokenizer, Conversation(g.prompt, r.content)).input_ids)
            assert (n > MAX) == (r.content == LONG), (g.prompt, r.content, n)


def test_drop_policy_drops_long_responses_their_pairs_then_unpaired_responses_and_empty_prompts(
    tokenizer: Any,
) -> None:
    groups = length_groups()
    data = tokenize_groups(groups, tokenizer, MAX, LengthPolicy.DROP)
    assert data.stats == LengthStats(
        responses=10, dropped_responses=2, dropped_pairs=3, unpaired_dropped=4, truncated=0, dropped_prompts=2
    )
    assert [(e.group, e.index) for e in data.examples] == [(0, 0), (0, 1), (2, 0), (2, 1)]
    assert data.groups == [[0, 1], [2, 3]]
    assert data.pairs == [[(0, 1)], [(2, 3)]]
    assert data.num_pairs == 2
    assert data.group_of == [0, 0, 1, 1]
    for e in data.examples:
        group = groups[e.group]
        expected = encode(tokenizer, Conversation(group.prompt, group.responses[e.index].content)).input_ids
        assert list(e.input_ids) == expected
        assert len(e.input_ids) <= MAX


def test_drop_policy_can_keep_unpaired_responses(tokenizer: Any) -> None:
    data = tokenize_groups(length_groups(), tokenizer, MAX, LengthPolicy.DROP, keep_unpaired=True)
    assert data.stats == LengthStats(
        responses=10, dropped_responses=2, dropped_pairs=3, unpaired_dropped=0, truncated=0, dropped_prompts=0
    )
    assert [(e.group, e.index) for e in data.examples] == [
        (0, 0),
        (0, 1),
        (0, 3),
        (1, 1),
        (2, 0),
        (2, 1),
        (3, 0),
        (3, 1),
    ]
    assert data.pairs == [[(0, 1)], [], [(4, 5)], []]


@pytest.mark.parametrize("policy", [LengthPolicy.LEFT, LengthPolicy.RIGHT])
def test_truncating_policies_keep_every_paired_response_and_count_truncations(
    tokenizer: Any, policy: LengthPolicy
) -> None:
    groups = length_groups()
    data = tokenize_groups(groups, tokenizer, MAX, policy)
    assert data.stats == LengthStats(
        responses=10, dropped_responses=0, dropped_pairs=0, unpaired_dropped=2, truncated=2, dropped_prompts=1
    )
    assert [(e.group, e.index) for e in data.examples] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
    ]
    assert data.pairs == [[(0, 1), (2, 0), (3, 2)], [(5, 4)], [(6, 7)]]
    long_examples = [e for e in data.examples if groups[e.group].responses[e.index].content == LONG]
    assert len(long_examples) == 2
    for e in long_examples:
        full = encode(tokenizer, Conversation(groups[e.group].prompt, LONG)).input_ids
        assert len(e.input_ids) == MAX
        if policy is LengthPolicy.LEFT:
            assert list(e.input_ids) == full[-MAX:]
            assert e.input_ids[-1] == IM_END  # the pooled token survives
        else:
            assert list(e.input_ids) == full[:MAX]
            assert e.input_ids[-1] != IM_END
    assert all(len(e.input_ids) <= MAX for e in data.examples)


def test_a_groups_system_prompt_is_honoured(tokenizer: Any) -> None:
    plain = PromptGroup("你好", (Response("a", "你好！"), Response("b", "滚。")), ((0, 1),))
    with_sys = PromptGroup(plain.prompt, plain.responses, plain.pairs, system_prompt="你是一只名叫小柴的狗。")
    data = tokenize_groups([plain, with_sys], tokenizer)
    first, second = data.examples[0], data.examples[2]
    assert first.input_ids != second.input_ids
    assert (
        list(second.input_ids) == encode(tokenizer, Conversation("你好", "你好！", "你是一只名叫小柴的狗。")).input_ids
    )
    assert "你是一只名叫小柴的狗。" in tokenizer.decode(list(second.input_ids))
    assert "You are a helpful assistant." in tokenizer.decode(list(first.input_ids))
    assert "You are a helpful assistant." not in tokenizer.decode(list(second.input_ids))


def test_system_prompt_from_a_file_reaches_the_tokens(tokenizer: Any, tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "bench.jsonl",
        [
            {
                "input": "你好",
                "responses": responses(a="你好！", b="滚。"),
                "rank": {"a": 1, "b": 2},
                "category": ["闲聊"],
                "sys_prompt": "你是一只名叫小柴的狗。",
            }
        ],
    )
    data = tokenize_groups(read_groups(path), tokenizer)
    assert "你是一只名叫小柴的狗。" in tokenizer.decode(list(data.examples[0].input_ids))
    assert data.pairs == [[(0, 1)]]


@pytest.mark.parametrize("name", ["open.jsonl", "human.jsonl"])
def test_group_of_and_pairs_stay_within_groups_on_the_sample(tokenizer: Any, name: str) -> None:
    groups = read_groups(SAMPLE / name)
    data = tokenize_groups(groups, tokenizer, 2048)
    assert isinstance(data, Dataset)
    owner = data.group_of
    assert len(owner) == len(data.examples)
    assert sorted(x for members in data.groups for x in members) == list(range(len(data.examples)))
    for g, members in enumerate(data.groups):
        assert all(owner[x] == g for x in members)
        assert len({data.examples[x].group for x in members}) == 1
        for a, b in data.pairs[g]:
            assert a in members and b in members and a != b
    # every pair of the file survives (nothing is over-length) with the same response indices
    assert data.stats.dropped_responses == 0
    assert data.num_pairs == sum(len(g.pairs) for g in groups)
    for g, members in enumerate(data.groups):
        source = groups[data.examples[members[0]].group]
        as_indices = [(data.examples[a].index, data.examples[b].index) for a, b in data.pairs[g]]
        assert as_indices == list(source.pairs)


# --- every community layout, through the one reader --------------------------------------------


def layouts_of(n: int, question: str, chosen: str, rejected: str) -> list[dict[str, Any]]:
    """One preference in each layout (system prompt and an earlier exchange where the layout holds them)."""
    system, history = f"你是第{n}号助手。", [("你好！", "你好，请问有什么事？")]
    msgs = [{"role": "system", "content": system}]
    for q, a in history:
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    msgs.append({"role": "user", "content": question})
    c, r = content_id(chosen), content_id(rejected)
    return [
        {"prompt": msgs, "chosen": [{"role": "assistant", "content": chosen}],
         "rejected": [{"role": "assistant", "content": rejected}]},
        {"chosen": [*msgs, {"role": "assistant", "content": chosen}],
         "rejected": [*msgs, {"role": "assistant", "content": rejected}]},
        {"conversations": [{"from": "human", "value": history[0][0]}, {"from": "gpt", "value": history[0][1]},
                           {"from": "human", "value": question}],
         "chosen": {"from": "gpt", "value": chosen}, "rejected": {"from": "gpt", "value": rejected}, "system": system},
        {"instruction": question, "input": "", "chosen": chosen, "rejected": rejected, "system": system,
         "history": [list(history[0])]},
        {"input": question, "sys_prompt": system, "history": msgs[1:-1],
         # the md5 ids the other layouts give their texts, so that all five merge into one pair
         "responses": [{"id": c, "content": chosen}, {"id": r, "content": rejected}], "annotations": [[c, r, "1"]]},
    ]  # fmt: skip


def test_every_layout_gives_the_same_groups(tmp_path: Path) -> None:
    per_layout: list[list[list[Any]]] = [[] for _ in range(5)]
    for n in range(3):
        for k, record in enumerate(layouts_of(n, f"问题{n}", f"好的回答{n}", f"差的回答{n}")):
            per_layout[k].append(record)
    seen = []
    for k, records in enumerate(per_layout):
        groups = read_groups(write_jsonl(tmp_path / f"layout{k}.jsonl", records))
        seen.append([(g.prompt, g.system_prompt, g.history, [r.content for r in g.responses], g.pairs) for g in groups])
    assert all(s == seen[0] for s in seen)
    assert seen[0][0] == ("问题0", "你是第0号助手。", (("user", "你好！"), ("assistant", "你好，请问有什么事？")),
                          ["好的回答0", "差的回答0"], ((0, 1),))  # fmt: skip


def test_history_reaches_the_tokens(tokenizer: Any, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "trl.jsonl", layouts_of(0, "问题", "好", "差")[:1])
    data = tokenize_groups(read_groups(path), tokenizer)
    text = tokenizer.decode(list(data.examples[0].input_ids))
    assert text.endswith(
        "<|im_start|>user\n你好！<|im_end|>\n<|im_start|>assistant\n你好，请问有什么事？<|im_end|>\n"
        "<|im_start|>user\n问题<|im_end|>\n<|im_start|>assistant\n好<|im_end|>"
    )
    assert text.startswith("<|im_start|>system\n你是第0号助手。<|im_end|>")
