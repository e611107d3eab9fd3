"""Generate the `cheems.v1` Python modules from `protos/` with grpcio-tools.

Run: `python -m cheems.protogen OUT_ROOT` (the Makefile's `proto` target passes the repo root,
so modules land in `cheems/v1/`). Tests call `generate()` into a temporary directory to check
that the working tree's modules are not stale.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent.parent / "protos"


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    """Every .proto under `root`, sorted so generation order is stable."""
    return sorted(root.rglob("*.proto"))


def generate(out_root: Path, root: Path = PROTO_ROOT) -> list[Path]:
    """Run protoc over every proto; returns the generated files. Raises RuntimeError on failure."""
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    well_known = resources.files("grpc_tools") / "_proto"
    files = [str(p.relative_to(root)) for p in proto_files(root)]
    out = str(out_root)
    args = ["protoc", f"-I{root}", f"-I{well_known}", f"--python_out={out}", f"--pyi_out={out}"]
    args += [f"--grpc_python_out={out}", *files]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {root}")
    dirs = {Path(out_root) / Path(f).parent for f in files}
    return sorted(p for d in dirs for p in d.glob("*_pb2*.py*"))


if __name__ == "__main__":
    generated = generate(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    print(f"generated {len(generated)} files")
