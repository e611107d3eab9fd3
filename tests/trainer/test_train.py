"""Training end to end on the tiny real-vocabulary RM: learning, torchrun DDP, exact resume, export."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cheems.chat import Conversation, encode_many
from cheems.errors import ConfigError
from cheems.formats.cheemsbench import BenchItem, write_bench
from cheems.formats.responses import Response
from cheems.forward import forward_rewards
from cheems.model import load_model
from trainer.config import TrainConfig
from trainer.distributed import World
from trainer.evaluation import evaluate_model
from trainer.train import TrainResult, train

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

TOPICS = ["天气", "历史", "数学", "编程", "旅行", "美食", "音乐", "健康", "法律", "教育", "体育", "电影"]
GOOD = ["谢谢提问，下面给出详细、准确的解答。", "这是一个好问题，答案如下，并附上理由。"]
BAD = ["不知道。", "answer answer 的的的 ok ok"]


def synthetic_bench(path: Path, prompts: range, seed: int) -> Path:
    """Prompts whose responses are good (rank 1), plain (rank 2) or bad (rank 3): a learnable signal."""
    rng = random.Random(seed)
    items = []
    for n in prompts:
        topic = TOPICS[n % len(TOPICS)]
        texts = [
            (1, rng.choice(GOOD) + f"关于{topic}的第{n}个问题。"),
            (2, f"关于{topic}，我说一点。"),
            (3, rng.choice(BAD)),
            (1, rng.choice(GOOD) + "总结完毕。"),
            (3, rng.choice(BAD) + "嗯。"),
        ]
        rng.shuffle(texts)
        responses = tuple(Response(f"r{i}", t) for i, (_, t) in enumerate(texts))
        rank = {r.id: level for r, (level, _) in zip(responses, texts, strict=True)}
        items.append(BenchItem(f"请介绍一下{topic}（问题{n}）", responses, rank, (topic[:1] + "类",)))
    write_bench(path, items)
    return path


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("data")
    return synthetic_bench(root / "train.jsonl", range(0, 24), 1), synthetic_bench(
        root / "heldout.jsonl", range(100, 112), 2
    )


def config(tiny: Path, files: tuple[Path, Path], out: Path, **changes: object) -> TrainConfig:
    base = TrainConfig(
        model=str(tiny),
        train_files=[str(files[0])],
        eval_files=[str(files[1])],
        out_dir=str(out),
        max_length=128,
        micro_batch_size=10,
        epochs=2,
        lr=3e-3,
        warmup_ratio=0.1,
        reg_coef=0.1,
        progress=False,
        seed=0,
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


@pytest.fixture(scope="module")
def single(tiny: Path, files: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TrainResult]:
    """One epoch in this process, every prompt's responses unpacked: the baseline the torchrun runs (DDP and FSDP)
    are compared with, and the run whose export is loaded in transformers. (folder, result); read-only."""
    out = tmp_path_factory.mktemp("single") / "one"
    return out, train(config(tiny, files, out, epochs=1, prefix_sharing=False))


def test_heldout_accuracy_rises_well_above_chance(tiny: Path, files: tuple[Path, Path], tmp_path: Path) -> None:
    untrained, tokenizer = load_model(tiny)
    before = evaluate_model(untrained, tokenizer, [files[1]], World(0, 1, 0, torch.device("cpu")), 128)
    result = train(config(tiny, files, tmp_path / "run", epochs=3, eval_every=12))
    log = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert result.steps == len(log) == 3 * -(-120 // 10)
    assert {r["total_steps"] for r in log} == {result.steps}  # what the training service reports progress against
    assert [r["step"] for r in log if "eval" in r] == [12, 24, 36]
    assert result.eval is not None
    start, final = before.subsets["heldout"].accuracy, result.eval.subsets["heldout"].accuracy
    assert final >= 0.9 and final > start + 0.2, (start, final)


def test_export_loads_in_transformers_with_the_trainers_scores(single: tuple[Path, TrainResult]) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    result = single[1]
    assert result.model_dir is not None
    metadata = json.loads((result.model_dir / "cheems_metadata.json").read_text())
    assert metadata["steps"] == result.steps and len(metadata["data_sha256"]) == 64
    assert metadata["config"]["lr"] == 3e-3 and metadata["final_eval"]["subsets"]["heldout"]
    hf = AutoModelForSequenceClassification.from_pretrained(result.model_dir, use_safetensors=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(result.model_dir)
    ours, _ = load_model(result.model_dir)
    conversations = [
        Conversation("你好", "你好！很高兴见到你。"),
        Conversation("1+1等于几？", "等于2。", "你是数学老师"),
    ]
    encoded = [e.input_ids for e in encode_many(tokenizer, conversations)]
    with torch.no_grad():
        expected = [hf(input_ids=torch.tensor([ids])).logits[0, 0].item() for ids in encoded]
        batched = forward_rewards(ours.eval(), encoded).tolist()
    assert batched == pytest.approx(expected, abs=1e-5)
    # Self-describing: the default pipeline on the standard chat-template text gives the same rewards.
    assert hf.config.problem_type == "regression" and hf.config.id2label == {0: "reward"}
    texts = [tokenizer.apply_chat_template(c.messages(), tokenize=False) for c in conversations]
    classify = pipeline("text-classification", model=str(result.model_dir))
    assert [r["score"] for r in classify(texts)] == pytest.approx(expected, abs=1e-4)


def test_resume_reproduces_an_uninterrupted_run(tiny: Path, files: tuple[Path, Path], tmp_path: Path) -> None:
    whole = train(config(tiny, files, tmp_path / "whole", epochs=2, micro_batch_size=7, grad_accum_steps=2))
    cut = train(config(tiny, files, tmp_path / "cut", epochs=2, micro_batch_size=7, grad_accum_steps=2, stop_after=5))
    assert cut.steps == 5 and cut.model_dir is None
    resumed = train(config(tiny, files, tmp_path / "cut", epochs=2, micro_batch_size=7, grad_accum_steps=2))
    assert resumed.steps == whole.steps
    a = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    b = load_file(tmp_path / "cut" / "model" / "model.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)
    losses = [json.loads(line)["loss"] for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    resumed_losses = [
        json.loads(line)["loss"] for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
    ]
    assert resumed_losses == pytest.approx(losses, abs=1e-6)


@pytest.mark.parametrize("fsdp", ["false", "true"], ids=["ddp", "fsdp"])
def test_two_processes_match_one_process(
    tiny: Path, files: tuple[Path, Path], tmp_path: Path, fsdp: str, single: tuple[Path, TrainResult]
) -> None:
    """torchrun with gloo: 2 ranks x micro batch 5 == 1 rank x micro batch 10, same global batches; the ranks
    pack each prompt's responses into one sequence (prefix sharing, the default), the single process does not,
    so the trained weights also show that packed gradients equal unpacked ones under DDP and FSDP."""
    shared = [
        "--set",
        f"model={tiny}",
        "--set",
        f"train_files={files[0]}",
        "--set",
        f"eval_files={files[1]}",
        "--set",
        "max_length=128",
        "--set",
        "epochs=1",
        "--set",
        "lr=3e-3",
        "--set",
        "progress=false",
    ]
    one, result = single
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "cheems_cli",
        "train",
        "--recipe",
        "tiny-cpu",
        "--nproc",
        "2",
        *shared,
        "--set",
        "micro_batch_size=5",
        "--set",
        f"out_dir={tmp_path / 'two'}",
        "--set",
        f"fsdp={fsdp}",
        "--set",
        "save_every=8",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    one_log = [json.loads(x) for x in (one / "metrics.jsonl").read_text().splitlines()]
    two_log = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [r["pairs"] for r in two_log] == [r["pairs"] for r in one_log]
    assert [r["loss"] for r in two_log] == pytest.approx([r["loss"] for r in one_log], abs=1e-4)
    a = load_file(one / "model" / "model.safetensors")
    b = load_file(tmp_path / "two" / "model" / "model.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-3, atol=1e-4, msg=name)
    assert result.eval is not None
    if fsdp == "true":
        sharded_checkpoints_resume_and_export(tmp_path / "two", cmd, env)


def sharded_checkpoints_resume_and_export(run: Path, cmd: list[str], env: dict[str, str]) -> None:
    """FSDP's checkpoints are per-rank shards (torch.distributed.checkpoint); a run resumed from the step-8 one
    ends with the uninterrupted run's losses and weights; the export is the final checkpoint's weights, and what
    plain transformers loads from it."""
    import shutil

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from transformers import AutoModelForSequenceClassification

    step8, step12 = run / "checkpoints" / "step-00000008", run / "checkpoints" / "step-00000012"
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= {p.name for p in step8.iterdir()}
    assert not list(step8.glob("*.safetensors")) and json.loads((step8 / "position.json").read_text())["step"] == 8
    exported = load_file(run / "model" / "model.safetensors")
    dcp_to_torch_save(step12, run / "final.pt")
    trained = torch.load(run / "final.pt", weights_only=True)["model"]
    assert trained.keys() == exported.keys()
    hf = AutoModelForSequenceClassification.from_pretrained(run / "model", use_safetensors=True)
    for name, value in exported.items():
        torch.testing.assert_close(value, trained[name], rtol=0, atol=0, msg=name)
        torch.testing.assert_close(hf.state_dict()[name], value, rtol=0, atol=0, msg=name)
    cut = run.parent / "cut"
    shutil.copytree(run, cut, ignore=shutil.ignore_patterns("step-00000012", "model", "final.pt"))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (cut / "metrics.jsonl").write_text("\n".join(lines[:8]) + "\n")
    resumed = subprocess.run([*cmd, "--set", f"out_dir={cut}"], capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = [json.loads(x)["loss"] for x in (cut / "metrics.jsonl").read_text().splitlines()]
    assert again == pytest.approx([json.loads(x)["loss"] for x in lines], abs=1e-5)
    for name, value in load_file(cut / "model" / "model.safetensors").items():
        torch.testing.assert_close(value, exported[name], rtol=0, atol=1e-6, msg=name)


def test_trains_on_a_file_mixing_every_community_layout(tiny: Path, tmp_path: Path) -> None:
    from tests.trainer.data.test_tokens import layouts_of

    records = []
    for n in range(10):
        records += layouts_of(n, f"请介绍{TOPICS[n]}。", GOOD[n % 2] + TOPICS[n], BAD[n % 2])
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    run = config(tiny, (path, path), tmp_path / "run", epochs=1, eval_files=[], micro_batch_size=8)
    result = train(run)
    meta = json.loads((tmp_path / "run" / "model" / "cheems_metadata.json").read_text(encoding="utf-8"))
    assert result.steps >= 1
    # five layouts of one preference merge into one prompt: 10 prompts, 2 responses each, none dropped
    assert (meta["length_stats"]["responses"], meta["length_stats"]["dropped_responses"]) == (20, 0)


def test_training_through_flex_attention_on_the_cpu_is_refused_at_the_start(
    tiny: Path, files: tuple[Path, Path], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="flex_attention cannot train on cpu") as caught:
        train(config(tiny, files, tmp_path / "run", attn_implementation="flex_attention"))
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "run").exists()  # refused before anything ran
