"""bench/prefix_bench.py: its options and `alternate`'s warm-ups, rounds and synchronisation. No timings asserted."""

from __future__ import annotations

import pytest
from prefix_bench import alternate, parse_args


def test_defaults_are_those_of_before() -> None:
    args = parse_args([])
    assert (args.sections, args.rounds, args.device, args.dtype) == (["score", "train"], 7, "cpu", "auto")
    assert (args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate) == (256, 4, 4, 2, None)


def test_the_shape_and_device_options_are_read() -> None:
    argv = ["train", "--device", "cuda", "--dtype", "bfloat16", "--hidden", "896", "--layers", "24"]
    args = parse_args([*argv, "--heads", "14", "--kv-heads", "2", "--intermediate", "4864"])
    assert (args.sections, args.device, args.dtype) == (["train"], "cuda", "bfloat16")
    assert (args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate) == (896, 24, 14, 2, 4864)


@pytest.mark.parametrize(
    ("argv", "error"), [(["--dtype", "half"], "invalid choice: 'half'"), (["scroe"], "unknown section scroe")]
)
def test_a_bad_dtype_or_section_is_refused(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert error in capsys.readouterr().err


def test_alternate_warms_up_then_measures_each_round_synchronised() -> None:
    calls: list[str] = []
    syncs: list[int] = []
    runs = {name: (lambda name=name: calls.append(name)) for name in ("off", "on")}
    times = alternate(runs, rounds=3, sync=lambda: syncs.append(1), warm_ups=2)
    assert calls == ["off", "off", "on", "on"] + ["off", "on"] * 3
    assert len(syncs) == 2 * 2 * 3  # before and after each measured call
    assert set(times) == {"off", "on"}
