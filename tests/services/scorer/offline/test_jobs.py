"""Offline batched scoring: many prompts a forward give the rewards of one prompt at a time, in the jobs' order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cheems.chat import Truncation
from cheems.errors import ConfigError
from cheems.execution import Execution
from cheems.forward import plan
from cheems.model import load_model
from services.scorer.offline.jobs import OfflineScoring, ahead, score_jobs, windows
from services.scorer.tokenization import ScoreJob, make_job, tokenize_job

LONG = "很长的回答，" * 40  # ~240 tokens: over max_length below, so its beginning is cut
SYSTEM = "你是一个乐于助人的助手，请认真回答用户的问题。" * 4  # a long shared prefix, short responses: packed


def jobs() -> list[ScoreJob]:
    return [
        make_job("什么是奖励模型？", ["打分的模型", "一种评价回答的模型", "不知"]),
        make_job("你好", ["你好！", LONG, "嗯"], "你是助手", [("user", "在吗"), ("assistant", "在")]),
        make_job("一加一", ["二"]),
        make_job("写一首诗", ["床前明月光", "疑是地上霜", "举头望明月", "低头思故乡"], SYSTEM),
        make_job("长问题" * 30, [LONG, "短"]),
    ]


def one_prompt_at_a_time(model_dir: Path, max_length: int) -> list[list[float]]:
    """The path `cheems rewards --model` took before: each prompt's responses in forwards of their own."""
    model, tokenizer = load_model(model_dir)
    execution = Execution()
    return [
        execution.score(model.eval(), [e.input_ids for e in tokenize_job(tokenizer, job, max_length, Truncation.LEFT)])
        for job in jobs()
    ]


def test_batched_rewards_equal_one_prompt_at_a_time(tiny_model: Path) -> None:
    # a few hundred tokens a window and a forward: several windows, forwards that hold several prompts
    scoring = OfflineScoring("cpu", "float32", max_length=64, max_batch_tokens=300, window_tokens=200)
    model, tokenizer = load_model(tiny_model)
    assert len(list(windows(tokenizer, jobs(), scoring))) > 1
    poem = [e.input_ids for e in tokenize_job(tokenizer, jobs()[3], 64, Truncation.LEFT)]
    assert any(len(row.members) > 1 for row in plan(model, poem, True, "cpu"))  # sharing within that prompt
    batched = score_jobs(jobs(), tiny_model, scoring, progress=False)
    expected = one_prompt_at_a_time(tiny_model, 64)
    assert [len(values) for values in batched] == [len(job.responses) for job in jobs()]
    for got, want in zip(batched, expected, strict=True):
        assert got == pytest.approx(want, abs=1e-5)
    assert batched[1][1] == pytest.approx(batched[4][0], abs=1e-5)  # both cut to LONG's last 64 tokens


def test_a_device_or_setting_that_cannot_work_is_refused_before_loading() -> None:
    with pytest.raises(ConfigError, match=r"^device cuda: CUDA is not available here"):
        OfflineScoring("cuda").execution()
    with pytest.raises(ConfigError, match=r"^device 'gpu' is not a torch device"):
        OfflineScoring("gpu").execution()
    with pytest.raises(ValueError, match="max_batch_tokens must be at least 1"):
        OfflineScoring(max_batch_tokens=0)
    assert OfflineScoring().execution().device == "cpu"  # auto, with no GPU here


def test_ahead_keeps_order_and_passes_errors_on() -> None:
    assert list(ahead(iter([1, 2, 3]))) == [1, 2, 3]

    def failing() -> Iterator[int]:
        yield 1
        raise RuntimeError("tokenizer broke")

    with pytest.raises(RuntimeError, match="tokenizer broke"):
        list(ahead(failing()))
