#!/usr/bin/env bash
# `make image`: builds docker/Dockerfile as IMAGE (default cheems:0.1.0), with `docker build` where a
# Docker engine answers, else with buildah (installed from Debian's packages when missing).
#
#   IMAGE=cheems:dev PYTHON_IMAGE=python:3.11.7-slim-bookworm TORCH_VARIANT=cpu docker/build.sh
#   IMAGE=cheems-gpu-vllm:0.1.0 TORCH_VARIANT=cuda WITH_VLLM=on docker/build.sh   # vLLM in /opt/vllm too
#
# With buildah, the base is PYTHON_IMAGE when given, else a debootstrapped Debian (docker/base.sh,
# built once and reused), and the RUN steps see the build machine's pip configuration: its pip.conf
# (docker/pip_config.py) as /etc/pip.conf and every local path it names (wheel folders, file://
# indexes, the CA bundle) mounted read-only where it names them. When that configuration already
# resolves torch==TORCH_VERSION to a CPU build (a wheel folder holds it), TORCH_INDEX_URL is left to
# it; set TORCH_INDEX_URL (empty included) to choose. With docker, pip in the build uses its own
# defaults (PyPI, the PyTorch CPU index): pass TORCH_INDEX_URL or a reachable PYTHON_IMAGE as needed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=docker/engine.sh
. docker/engine.sh

IMAGE=${IMAGE:-cheems:0.1.0}
TORCH_VARIANT=${TORCH_VARIANT:-cpu}
PYTHON=${PYTHON:-python3}
torch_version=$(sed -n 's/^ARG TORCH_VERSION=//p' docker/Dockerfile)

# Does this machine's pip configuration give the CPU build of torch==VERSION? (a dry run, nothing installed)
config_has_cpu_torch() {
    "$PYTHON" -m pip install --dry-run --no-deps --ignore-installed --quiet --report - "torch==$torch_version" 2>/dev/null |
        "$PYTHON" -c 'import json, sys; sys.exit("+cpu" not in json.load(sys.stdin)["install"][0]["metadata"]["version"])'
}

choose_engine
args=(-f docker/Dockerfile -t "$IMAGE" --build-arg TORCH_VARIANT="$TORCH_VARIANT")
if [ -n "${TORCH_INDEX_URL+set}" ]; then
    args+=(--build-arg TORCH_INDEX_URL="$TORCH_INDEX_URL")
fi
if [ -n "${WITH_VLLM:-}" ]; then  # unset: the Dockerfile's default (off)
    args+=(--build-arg WITH_VLLM="$WITH_VLLM")
fi

if [ "$ENGINE" = docker ]; then
    [ -z "${PYTHON_IMAGE:-}" ] || args+=(--build-arg PYTHON_IMAGE="$PYTHON_IMAGE")
    set -x
    exec docker build "${args[@]}" .
fi

base=${PYTHON_IMAGE:-$(docker/base.sh)}
args+=(--build-arg PYTHON_IMAGE="$base")
if [ -z "${TORCH_INDEX_URL+set}" ] && [ "$TORCH_VARIANT" = cpu ] && config_has_cpu_torch; then
    echo "this machine's pip configuration has the CPU build of torch $torch_version: using it" >&2
    args+=(--build-arg TORCH_INDEX_URL=)
fi
mkdir -p "$IMAGE_STATE_DIR"
pip_conf="$(realpath "$IMAGE_STATE_DIR")/pip.conf"
mapfile -t pip_paths < <("$PYTHON" docker/pip_config.py "$pip_conf")
args+=(--volume "$pip_conf:/etc/pip.conf:ro")
for path in "${pip_paths[@]}"; do
    args+=(--volume "$path:$path:ro")
done
previous=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
(
    set -x
    buildah build --isolation chroot --layers "${args[@]}" .
)
# The image this build replaced, with the layers only it used (the venv's copy, 1.7 GB): a later build
# still finds its cache in the intermediate images, which stay. Kept when a container still uses it.
current=$(podman image inspect --format '{{.Id}}' "$IMAGE")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
fi
podman image inspect --format "$IMAGE: {{.Size}} bytes" "$IMAGE"
