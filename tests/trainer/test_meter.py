"""trainer.meter: the peak-FLOPs table, peak memory, and the figures a Meter adds to a step record."""

from __future__ import annotations

import pytest
import torch

from trainer.meter import Meter, non_embedding_parameters, peak_flops, peak_memory


@pytest.mark.parametrize(
    ("name", "flops"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_peak_bf16_flops_by_device_name(name: str, flops: float | None) -> None:
    assert peak_flops(name) == flops


def test_on_the_cpu_there_is_no_mfu_and_memory_is_the_resident_peak() -> None:
    import resource

    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(100, 8)  # type: ignore[assignment]
    model.proj = torch.nn.Linear(8, 4)  # type: ignore[assignment]
    model.get_input_embeddings = lambda: model.embed  # type: ignore[assignment,method-assign]
    assert non_embedding_parameters(model) == 8 * 4 + 4
    meter = Meter.for_run(model, torch.device("cpu"), bf16=True)
    assert meter.peak_flops is None and meter.flops_per_token == 6 * 36
    model.proj.weight.requires_grad_(False)  # frozen as a LoRA base is: no weight gradient, only the bias's
    assert Meter.for_run(model, torch.device("cpu"), bf16=True).flops_per_token == 4 * 36 + 2 * 4
    record = {"tokens_per_s": 100.0}
    meter.stamp(record)
    meter.finish(record)
    assert "mfu" not in record and "memory_planned_bytes" not in record
    assert record["memory_peak_bytes"] == peak_memory(torch.device("cpu"))
    assert record["memory_peak_bytes"] >= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - 1
