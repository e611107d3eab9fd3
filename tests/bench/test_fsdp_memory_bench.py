"""bench/fsdp_memory_bench.py's pure pieces: its defaults, the peak reader and the table. No torchrun."""

from __future__ import annotations

import pytest
from fsdp_memory_bench import parse_args, peak_mib, print_table


def test_defaults_and_the_ratio_of_the_worst_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args([])
    assert (args.hidden, args.layers, args.heads, args.kv_heads, args.nproc, args.worker) == (1024, 8, 8, 2, 2, None)
    assert peak_mib() > 10
    old = [{"floor": 200.0, "loaded": 1200.0, "stepped": 2000.0}, {"floor": 200.0, "loaded": 1100.0, "stepped": 2100.0}]
    new = [{"floor": 200.0, "loaded": 700.0, "stepped": 2100.0}, {"floor": 200.0, "loaded": 600.0, "stepped": 2000.0}]
    print_table({"old": old, "new": new})
    out = capsys.readouterr().out
    assert "loaded: new / old = 700 / 1200 MiB = 0.58; above the floor 500 / 1000 MiB = 0.50" in out
    assert "stepped: new / old = 2100 / 2100 MiB = 1.00" in out
