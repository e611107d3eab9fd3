"""Exported checkpoints are self-describing: standard Hugging Face paths score them as `cheems score` does.

The reference is the scorer itself (gRPC, in-process torch backend). Against it: the default
`pipeline("text-classification")` on `apply_chat_template(messages, tokenize=False)` text, and TRL's
reward-model tokenization followed by a plain `AutoModelForSequenceClassification` forward. The old
export (no problem_type, a template ending in a newline) is kept as a fixture to show the checks bite.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from cheems.chat import Conversation, encode, render
from cheems.model import describe_checkpoint, load_model, stripped_template
from trainer.tiny import CHAT_TEMPLATE, build_model, build_tokenizer

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

CONVERSATIONS = [
    Conversation("你好", "你好！有什么可以帮你？"),
    Conversation("1+1等于几？", "等于2。", "你是一位耐心的数学老师。"),
    Conversation(
        "那北京呢？",
        "北京是中国的首都，故宫和长城都很值得一去。",
        "你是一名导游，回答要简洁。",
        (("user", "上海有什么好玩的？"), ("assistant", "外滩和豫园都值得一去。")),
    ),
    Conversation(
        "再解释一下递归。",
        "递归就是函数调用自身，直到满足终止条件。",
        None,
        (
            ("user", "什么是函数？"),
            ("assistant", "函数是一段可复用的代码。"),
            ("user", "明白了。"),
            ("assistant", "好的。"),
        ),
    ),
    Conversation("Write one line of Python.", "print('你好，世界')"),
]
# Whitespace at the edges of contents, to check the template change against render()'s strip.
ODD = [
    Conversation("  空格开头", "结尾换行\n"),
    Conversation("问题\n\n", "  \n回答  ", "\n系统\n", (("assistant", "先说一句\n"),)),
]


def messages(conversation: Conversation) -> list[dict[str, str]]:
    return conversation.messages()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tokenizer()  # the template every checkpoint had before this change


@pytest.fixture(scope="module")
def exported(tiny_checkpoint: Callable[..., Path]) -> Path:
    """`init_tiny_model`'s export (the session's, read only here)."""
    return tiny_checkpoint(hidden_size=32, layers=2, seed=1)


@pytest.fixture(scope="module")
def exported_tokenizer(exported: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(exported)


@pytest.fixture(scope="module")
def old_export(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same weights written as before: plain save_pretrained, nothing described."""
    directory = tmp_path_factory.mktemp("old") / "tiny"
    build_model(tokenizer, hidden_size=32, layers=2, seed=1).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def scorer_rewards(exported: Path) -> Iterator[list[float]]:
    """Our reward of each conversation in CONVERSATIONS, from a running scorer (torch backend, gRPC)."""
    from services.scorer.client import RewardClient
    from services.scorer.config import ENV_PREFIX, ScorerConfig
    from services.scorer.runtime import ScorerServer

    with pytest.MonkeyPatch.context() as env:
        for name in [n for n in os.environ if n.upper().startswith(ENV_PREFIX)]:
            env.delenv(name)
        config = ScorerConfig(model=str(exported), backend="torch", host="127.0.0.1", grpc_port=0, http_port=-1)
        server = ScorerServer(config).start()
    try:
        with RewardClient(f"127.0.0.1:{server.grpc_port}") as client:
            yield [client.score(c.prompt, [c.response], c.system_prompt or "", c.history)[0] for c in CONVERSATIONS]
    finally:
        server.stop(grace=1)


def pipeline_rewards(directory: Path, tokenizer: Any = None) -> list[float]:
    """The default text-classification pipeline on the standard chat-template text."""
    return classified(directory, tokenizer)[0]


def classified(directory: Path, tokenizer: Any = None) -> tuple[list[float], Any]:
    """(rewards, the pipeline): `pipeline_rewards` and the model and tokenizer it loaded from `directory`
    (`tokenizer`: `AutoTokenizer.from_pretrained(directory)` when the caller has it already, as the pipeline
    would load it)."""
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(directory), tokenizer=tokenizer)
    texts = [classify.tokenizer.apply_chat_template(messages(c), tokenize=False) for c in CONVERSATIONS]
    results = classify(texts)
    assert {r["label"] for r in results} <= {"reward", "LABEL_0"}
    return [r["score"] for r in results], classify


def test_saved_config_says_regression_with_one_reward_label(exported: Path) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(exported)
    assert config.problem_type == "regression" and config.num_labels == 1
    assert config.id2label == {0: "reward"} and config.label2id == {"reward": 0}
    assert config.pad_token_id == 151643


def test_default_pipeline_on_the_chat_template_text_gives_the_scorers_reward(
    exported: Path, exported_tokenizer: Any, scorer_rewards: list[float]
) -> None:
    got = pipeline_rewards(exported, exported_tokenizer)
    assert got == pytest.approx(scorer_rewards, abs=1e-4)
    assert max(abs(r) for r in scorer_rewards) > 0.01  # not all ~0, so the comparison means something


def test_the_old_export_fails_that_check(old_export: Path, exported: Path, scorer_rewards: list[float]) -> None:
    """Same weights, old files: a sigmoid over the reward read one token late (after `<|im_end|>\\n`)."""
    old, classify = classified(old_export)
    assert all(0 < s < 1 for s in old)
    assert max(abs(a - b) for a, b in zip(old, scorer_rewards, strict=True)) > 0.1
    model, tokenizer = classify.model.eval(), classify.tokenizer  # what the pipeline loaded from old_export
    assert type(model).__name__ == "Qwen2ForSequenceClassification"  # the plain sequence-classification model
    texts = [tokenizer.apply_chat_template(messages(c), tokenize=False) for c in CONVERSATIONS]
    assert all(t.endswith("<|im_end|>\n") for t in texts)
    with torch.no_grad():
        late = [model(**tokenizer(t, return_tensors="pt")).logits[0, 0].item() for t in texts]
    assert old == pytest.approx([1 / (1 + math.exp(-x)) for x in late], abs=1e-5)
    assert late != pytest.approx(scorer_rewards, abs=1e-4)


def test_trl_reward_tokenization_then_a_plain_forward_gives_the_scorers_reward(
    exported: Path, exported_tokenizer: Any, scorer_rewards: list[float]
) -> None:
    from transformers import AutoModelForSequenceClassification
    from trl.data_utils import _tokenize, is_conversational

    model = AutoModelForSequenceClassification.from_pretrained(exported).eval()
    tokenizer = exported_tokenizer
    for conversation, expected in zip(CONVERSATIONS, scorer_rewards, strict=True):
        example = {"chosen": messages(conversation), "rejected": messages(conversation)}
        assert is_conversational(example)
        trl_ids = _tokenize(tokenizer, example["chosen"], tools=None)["input_ids"]  # as RewardTrainer does
        text = tokenizer.apply_chat_template(messages(conversation), tokenize=False)
        text_ids = tokenizer(text)["input_ids"]
        assert trl_ids == text_ids == encode(tokenizer, conversation).input_ids
        with torch.no_grad():
            got = model(input_ids=torch.tensor([text_ids])).logits[0, 0].item()
        assert got == pytest.approx(expected, abs=1e-4)


def test_render_is_unchanged_by_the_exported_template(tokenizer: Any, exported_tokenizer: Any) -> None:
    new = exported_tokenizer
    assert new.chat_template == stripped_template(CHAT_TEMPLATE) != CHAT_TEMPLATE
    for conversation in CONVERSATIONS + ODD:
        assert render(new, conversation) == render(tokenizer, conversation)
        assert encode(new, conversation).input_ids == encode(tokenizer, conversation).input_ids
        standard = new.apply_chat_template(messages(conversation), tokenize=False)
        assert standard == render(tokenizer, conversation)
        prompt = messages(conversation)[:-1]
        assert new.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) == (
            tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        )


def test_any_template_is_stripped_exactly_as_render_strips(tokenizer: Any) -> None:
    """Every chat template TRL ships (Qwen, Llama, Gemma, DeepSeek, ...): stripped rendering, same prompts."""
    import trl

    templates = sorted((Path(trl.__file__).parent / "chat_templates").glob("*.jinja"))
    assert len(templates) > 10
    checked = 0
    for path in templates:
        original = path.read_text(encoding="utf-8")
        wrapped = stripped_template(original)
        assert stripped_template(wrapped) == wrapped
        for conversation in CONVERSATIONS + ODD:
            try:
                before = tokenizer.apply_chat_template(messages(conversation), chat_template=original, tokenize=False)
            except Exception:  # a template may refuse a shape (no system turn, say)
                continue
            after = tokenizer.apply_chat_template(messages(conversation), chat_template=wrapped, tokenize=False)
            assert after == before.strip(), path.name
            prompt = messages(conversation)[:-1]
            kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
            assert tokenizer.apply_chat_template(prompt, chat_template=wrapped, **kwargs) == (
                tokenizer.apply_chat_template(prompt, chat_template=original, **kwargs)
            ), path.name
            checked += 1
    assert checked > 100


def test_an_old_checkpoint_still_loads_and_can_be_described_in_place(
    old_export: Path, scorer_rewards: list[float], tmp_path: Path
) -> None:
    from transformers import AutoConfig

    model, tok = load_model(old_export)
    assert model.config.problem_type is None
    with torch.no_grad():
        ids = [encode(tok, c).input_ids for c in CONVERSATIONS]
        ours = [model(input_ids=torch.tensor([i])).logits[0, 0].item() for i in ids]
    assert ours == pytest.approx(scorer_rewards, abs=1e-5)  # same weights, same scores
    upgraded = describe_checkpoint(shutil.copytree(old_export, tmp_path / "upgraded"))
    assert AutoConfig.from_pretrained(upgraded).problem_type == "regression"
    assert pipeline_rewards(upgraded) == pytest.approx(scorer_rewards, abs=1e-4)
