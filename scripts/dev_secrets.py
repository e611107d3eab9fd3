"""The development overlay's Secrets, generated here, never committed: `make dev-secrets` before `kubectl apply -k`.

    python scripts/dev_secrets.py [--dir k8s/overlays/dev/secrets]

Writes the env files `k8s/overlays/dev/kustomization.yaml`'s secretGenerator reads (git-ignored, 0600 in a 0700
folder), each secret `secrets.token_urlsafe(32)` (256 bits):

    cheems.env       postgres-password, database-url (with that password), scorer-token, judge-api-key
    eval-worker.env  token (the eval worker's service account)
    judge.env        token (the AI judge's service account)

A file that exists is kept, so running it again changes nothing and the cluster's tokens stay; delete a file to
rotate what it holds (then `kubectl apply -k` again and `cheems accounts reset` the service account).
"""

from __future__ import annotations

import argparse
import os
import secrets
from collections.abc import Callable
from pathlib import Path

OVERLAY = Path(__file__).resolve().parents[1] / "k8s" / "overlays" / "dev"
DIRECTORY = OVERLAY / "secrets"


def cheems_env(token: Callable[[], str]) -> dict[str, str]:
    password = token()
    return {
        "postgres-password": password,
        "database-url": f"postgresql+psycopg://cheems:{password}@cheems-postgres:5432/cheems",
        "scorer-token": token(),
        "judge-api-key": token(),  # the dev overlay runs no judge: a placeholder no one knows
    }


def eval_worker_env(token: Callable[[], str]) -> dict[str, str]:
    """A service account's Secret (the eval worker's, the judge's): its token."""
    return {"token": token()}


FILES = {"cheems.env": cheems_env, "eval-worker.env": eval_worker_env, "judge.env": eval_worker_env}


def write(directory: Path = DIRECTORY, token: Callable[[], str] = lambda: secrets.token_urlsafe(32)) -> list[Path]:
    """The env files missing in `directory` (made 0700), each 0600; the paths written."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    written = []
    for name, values in FILES.items():
        path = directory / name
        if path.exists():
            continue
        text = "".join(f"{key}={value}\n" for key, value in values(token).items())
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(text)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=DIRECTORY, help="where the env files go")
    args = parser.parse_args()
    written = write(args.dir)
    print(f"wrote {', '.join(str(p) for p in written)}" if written else f"kept the env files in {args.dir}")


if __name__ == "__main__":
    main()
