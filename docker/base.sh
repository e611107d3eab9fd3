#!/usr/bin/env bash
# The image's base when no container registry is reachable: Debian bookworm, debootstrapped from
# Debian's package mirror, with only what docker/Dockerfile needs (Python 3.11, its venv module,
# libpython3.11 for Triton's Python backend stub, CA certificates), imported into podman's storage.
#
#   docker/base.sh          # prints the image's name; builds it only when podman does not hold it yet
#
# The name carries a hash of this script, so changing it builds a new base and an unchanged one is
# reused by every later `make image`. DEBIAN_MIRROR picks another mirror.
set -euo pipefail

SUITE=bookworm
PACKAGES=python3,python3-venv,python-is-python3,libpython3.11,ca-certificates
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
tag="$SUITE-$(sha256sum <"$0" | cut -c1-12)"  # this script's hash: a changed recipe is a new base
name="localhost/cheems-base:$tag"

if podman image exists "$name"; then
    echo "reusing the base image $name" >&2
    echo "$name"
    exit 0
fi

root=$(mktemp -d "${TMPDIR:-/var/tmp}/cheems-base.XXXXXX")
trap 'rm -rf "$root"' EXIT
echo "debootstrapping $SUITE with $PACKAGES from $MIRROR" >&2
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" >&2
# What an image does not need: downloaded packages, package lists, logs, documentation (the packages'
# copyright files stay), translations
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log \
    "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
find "$root"/usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
tar -C "$root" --numeric-owner -c . |
    podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$name" >&2
echo "$name"
