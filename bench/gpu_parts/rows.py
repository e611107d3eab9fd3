"""The report's rows: every GPU goal still unmeasured, in a fixed order, each a figure or "not measured: why" (pure).

A part (`gpu_parts.serving`, `.training`, `.fsdp`, `.adapters`) returns `{row key: Cell}` for the rows it owns;
`fill` makes the whole table from what the parts returned, so a part that failed, ran out of time or gave no
figure for a row still leaves that row in the table, saying why. `render` prints it as Markdown (what
docs/performance.md takes), `to_json` the same with each cell's raw figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

NOT_MEASURED = "not measured: "


@dataclass(frozen=True)
class Row:
    key: str
    part: str  # the part that measures it
    label: str
    goal: str = ""  # what the issue that asked for it wants, when it says


ROWS: tuple[Row, ...] = (
    Row("served", "serving", "scorer served (gRPC, torch backend) / in-process batched, concurrency 32", ">= 0.8"),
    Row("served_p50", "serving", "served p50 latency at concurrency 32 / at concurrency 1", "< 4x"),
    Row("train_mfu", "training", "training step MFU (`trainer.train`, sequence tokens, 6 x params)"),
    Row("train_vs_bare", "training", "training step / bare forward + backward of the same batches (tokens/s)"),
    Row("fsdp_load", "fsdp", "FSDP2 load: meta device, each rank reads its rows"),
    Row("fsdp_step", "fsdp", "FSDP2 step (forward, BT loss, backward, AdamW), activation checkpointing"),
    Row("fixed_costs", "fsdp", "fixed costs against the memory plan's (CUDA context, NCCL, fragmentation)"),
    Row("lora_memory", "adapters", "LoRA r16 / full fine-tuning: peak memory"),
    Row("lora_time", "adapters", "LoRA r16 / full fine-tuning: seconds a step"),
    Row("qlora", "adapters", "QLoRA (NF4 base, r16) / full fine-tuning: peak memory, seconds a step"),
)
PARTS: tuple[str, ...] = tuple(dict.fromkeys(r.part for r in ROWS))


@dataclass(frozen=True)
class Cell:
    value: str  # a figure as printed, or NOT_MEASURED + why
    figures: Mapping[str, Any] = field(default_factory=dict)  # the raw numbers behind it (the JSON keeps them)

    @property
    def measured(self) -> bool:
        return not self.value.startswith(NOT_MEASURED)


def missing(why: str) -> Cell:
    """A row without a figure, and why (one line)."""
    line = " ".join(why.split()) or "no reason given"
    return Cell(NOT_MEASURED + line)


def rows_of(part: str) -> list[Row]:
    return [r for r in ROWS if r.part == part]


def fill(cells: Mapping[str, Cell], failures: Mapping[str, str]) -> list[tuple[Row, Cell]]:
    """Every row with its cell: the part's figure, else why its part gave none (`failures`: part -> why)."""
    out = []
    for row in ROWS:
        cell = cells.get(row.key)
        if cell is None:
            cell = missing(failures.get(row.part, f"the {row.part} part gave no figure for it"))
        out.append((row, cell))
    return out


def render(table: list[tuple[Row, Cell]], header: str) -> str:
    """The table in Markdown under `header` (the card, the software, the model)."""
    lines = [header, "", "| goal | measured | wanted |", "| --- | --- | --- |"]
    lines += [f"| {row.label} | {cell.value} | {row.goal or '-'} |" for row, cell in table]
    return "\n".join(lines)


def to_json(table: list[tuple[Row, Cell]], about: Mapping[str, Any], parts: Mapping[str, Any]) -> dict[str, Any]:
    """What `--json` writes: the run's setting (`about`), each row with its raw figures, each part's time and end."""
    rows = [{**asdict(row), "value": cell.value, "measured": cell.measured, "figures": dict(cell.figures)}
            for row, cell in table]  # fmt: skip
    return {**about, "rows": rows, "parts": dict(parts)}


def cells_from_json(data: Mapping[str, Any]) -> dict[str, Cell]:
    """A part's cells as its process wrote them (`{key: {"value", "figures"}}`)."""
    return {key: Cell(str(c["value"]), dict(c.get("figures", {}))) for key, c in data.items()}


def cells_to_json(cells: Mapping[str, Cell]) -> dict[str, Any]:
    return {key: {"value": c.value, "figures": dict(c.figures)} for key, c in cells.items()}


def ratio(new: float, base: float) -> str:
    return f"{new / base:.2f}" if base else "n/a"


def gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"
