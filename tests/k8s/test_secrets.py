"""No committed manifest under k8s/ carries a secret: the dev overlay's Secrets are generated (scripts/dev_secrets.py,
`make dev-secrets`) into git-ignored env files; prod's are created out of band."""

from __future__ import annotations

import base64
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.k8s.manifests import K8S, ROOT, by_kind, dev_secrets, render, tree

SECRET_NAME = re.compile(r"token|password|passwd|secret|api[-_]?key|credential", re.IGNORECASE)
URL_PASSWORD = re.compile(r"://[^/\s:@]+:[^@\s/]+@")  # user:password@host
SECRET_ARG = re.compile(r"--(?:[a-z-]*token|password|api-key)=(?!/)", re.IGNORECASE)  # a value, not a file path


def committed_manifests() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "k8s"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.split() if name.endswith((".yaml", ".yml", ".env"))]


def literals(node: Any, where: str) -> list[str]:
    """Every place in a YAML document that holds a secret's value written out."""
    found: list[str] = []
    if isinstance(node, dict):
        if node.get("kind") == "Secret" and (node.get("data") or node.get("stringData")):
            found.append(f"{where}: a Secret with its data")
        for generator in node.get("secretGenerator") or []:
            if generator.get("literals"):
                found.append(f"{where}: secretGenerator {generator.get('name')} has literals")
        name, value = str(node.get("name", "")), node.get("value")
        if isinstance(value, str) and value and SECRET_NAME.search(name) and not name.endswith("_FILE"):  # a path
            found.append(f"{where}: env {name} has a value")
        for key, child in node.items():
            found += literals(child, f"{where}.{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found += literals(child, f"{where}[{i}]")
    elif isinstance(node, str) and (URL_PASSWORD.search(node) or SECRET_ARG.search(node)):
        found.append(f"{where}: {node[:60]!r}")
    return found


def test_no_committed_manifest_holds_a_token_or_password() -> None:
    files = committed_manifests()
    assert any(p.name == "kustomization.yaml" for p in files)
    found = []
    for path in files:
        for i, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            found += literals(doc, f"{path.relative_to(ROOT)}#{i}")
    assert found == [], "\n".join(found)


def test_the_check_finds_a_literal() -> None:
    """The scan above can fail: each way of writing a secret into a manifest is caught."""
    caught = [
        {"secretGenerator": [{"name": "s", "literals": ["scorer-token=dev-token"]}]},
        {"kind": "Secret", "stringData": {"token": "x"}},
        {"env": [{"name": "CHEEMS_SCORER_TOKEN", "value": "dev-token"}]},
        {"args": ["--token=abc"]},
        {"value": "postgresql+psycopg://cheems:cheems-dev@db:5432/cheems"},
    ]
    assert all(literals(doc, "doc") for doc in caught)
    assert literals({"args": ["--token-file=/var/run/secrets/cheems/account/token"]}, "doc") == []


def test_the_dev_overlay_takes_its_secrets_from_the_generated_files() -> None:
    secrets = by_kind(render("overlays/dev"), "Secret")
    decoded = {name: {k: base64.b64decode(v).decode() for k, v in d["data"].items()} for name, d in secrets.items()}
    assert len(decoded) == 3  # cheems-secrets-HASH, cheems-account-eval-worker-HASH and cheems-account-judge-HASH
    values = {name.rsplit("-", 1)[0].removeprefix("cheems-account-").removeprefix("cheems-"): v
              for name, v in decoded.items()}  # fmt: skip
    values["cheems"] = values.pop("secrets")
    env = (tree() / "overlays" / "dev" / "secrets" / "cheems.env").read_text()
    cheems = values["cheems"]
    assert set(cheems) == {"postgres-password", "database-url", "scorer-token", "judge-api-key"}
    assert f"scorer-token={cheems['scorer-token']}\n" in env
    assert f":{cheems['postgres-password']}@" in cheems["database-url"]
    assert len(values["eval-worker"]["token"]) >= 43  # 32 random bytes, URL-safe base64
    assert len(values["judge"]["token"]) >= 43 and values["judge"]["token"] != values["eval-worker"]["token"]
    committed = "".join(p.read_text(encoding="utf-8") for p in committed_manifests())
    assert not any(v in committed for secret in values.values() for v in secret.values())


def test_dev_secrets_are_random_private_and_kept_on_a_rerun(tmp_path: Path) -> None:
    module = dev_secrets()
    folder = tmp_path / "secrets"
    assert {p.name for p in module.write(folder)} == {"cheems.env", "eval-worker.env", "judge.env"}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    first = {p.name: p.read_text() for p in folder.iterdir()}
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert module.write(folder) == [] and {p.name: p.read_text() for p in folder.iterdir()} == first
    other = tmp_path / "other"
    module.write(other)
    assert (other / "eval-worker.env").read_text() != first["eval-worker.env"]  # a new one each time
    token = first["eval-worker.env"].strip().partition("=")[2]
    assert len(token) >= 43 and re.fullmatch(r"[A-Za-z0-9_-]+", token)


def test_the_checkout_ignores_the_generated_files() -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(K8S / "overlays" / "dev" / "secrets" / "cheems.env")], cwd=ROOT
    )
    assert ignored.returncode == 0
