#!/usr/bin/env bash
# `make image-test`: runs the image IMAGE (default cheems:0.1.0, built by `make image`) the way the pods
# run it and checks each role in it (docker/image_test.py says which checks).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=docker/engine.sh
. docker/engine.sh
choose_engine
IMAGE=${IMAGE:-cheems:0.1.0}
exec "${PYTHON:-python3}" docker/image_test.py --engine "$ENGINE" --image "$IMAGE"
