"""The operators' own CRDs (vendored in tests/k8s/crds/, see its README) as JSON Schemas that refuse unknown fields.

    schema = crd_schema("kafka.strimzi.io/v1", "Kafka")   # None when no vendored CRD serves that kind
    jsonschema.validate(resource, schema)

A CRD's `openAPIV3Schema` is a structural schema: an object lists its `properties`, and the API server prunes
(or, with `kubectl apply --validate=strict`, refuses) any other field unless the object says
`x-kubernetes-preserve-unknown-fields`. JSON Schema lets unknown fields through by default, so the conversion
closes every object that lists properties; `x-kubernetes-int-or-string` becomes integer-or-string and
`nullable` admits null. `metadata` is the API server's to check (a CRD may not constrain it beyond name).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parent / "crds"


@functools.cache
def _served() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every version a vendored CRD serves."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                if version.get("served"):
                    found[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return found


def served_kinds() -> set[tuple[str, str]]:
    return set(_served())


def groups() -> set[str]:
    """The API groups the vendored CRDs define (a resource of such a group must match a served version)."""
    return {api.split("/")[0] for api, _ in _served()}


def crd_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    schema = _served().get((api_version, kind))
    if schema is None:
        return None
    strict = strict_schema(schema)
    strict.setdefault("properties", {})["metadata"] = {"type": "object"}
    return strict


def strict_schema(node: Any) -> Any:
    """An OpenAPI v3 structural schema as a JSON Schema that refuses fields it does not declare."""
    if isinstance(node, list):
        return [strict_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if isinstance(out.get("pattern"), str):
        out["pattern"] = python_pattern(out["pattern"])
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    closed = "properties" in node and "additionalProperties" not in node
    if closed and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    return out


def python_pattern(pattern: str) -> str:
    """A Go (RE2) pattern as Python's `re` reads it: RE2 takes a global flag anywhere (`^(?i)(abort|warn)?$`, the
    PrometheusRule CRD's), Python only at the start."""
    flags = re.findall(r"\(\?[imsU]+\)", pattern)
    for flag in flags:
        pattern = pattern.replace(flag, "", 1)
    return "".join(flags) + pattern


@functools.cache
def strimzi_kafka_versions() -> dict[str, bool]:
    """Kafka version -> supported, from the vendored Strimzi release's kafka-versions.yaml."""
    (path,) = CRDS.glob("strimzi-*-kafka-versions.yaml")
    return {str(v["version"]): bool(v["supported"]) for v in yaml.safe_load(path.read_text())}
