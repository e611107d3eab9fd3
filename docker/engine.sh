# shellcheck shell=bash
# Sourced by docker/build.sh and docker/image-test.sh: picks the container engine and prepares it.
#
# ENGINE=docker when a Docker engine answers (`docker info`; the docker client alone is not enough),
# else ENGINE=podman, building with buildah: Debian's buildah, podman, runc and debootstrap are
# installed when missing. For podman and buildah a containers.conf of our own (CONTAINERS_CONF,
# unless the caller set one) makes them work in sandboxes such as CI machines:
#   - runc as the runtime (crun fails there: "setrlimit RLIMIT_NOFILE: Operation not permitted",
#     then "cgroups in hybrid mode not supported");
#   - default ulimits no higher than this shell's hard limits nor than nofile=20000, nproc=4096 (the
#     engines' defaults are higher, and a sandbox may not let them be raised: "setting RLIMIT_NPROC
#     ... operation not permitted" was seen with the shell's own hard limit);
#   - cgroupfs and a file event log where systemd does not run.
# Builds use `--isolation chroot` (no nested namespaces needed).

IMAGE_STATE_DIR=${IMAGE_STATE_DIR:-out/image}
IMAGE_PACKAGES="buildah podman runc debootstrap"

install_engine_packages() {
    local missing=() pkg sudo=""
    for pkg in $IMAGE_PACKAGES; do
        command -v "$pkg" >/dev/null || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing Debian's ${missing[*]} (no Docker engine answers)"
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get install -y -q "${missing[@]}" || { $sudo apt-get update -q && $sudo apt-get install -y -q "${missing[@]}"; }
}

# The lower of this shell's hard limit and CAP (also where the shell says "unlimited")
capped_limit() {
    local hard=$1 cap=$2
    if [ "$hard" = unlimited ] || [ "$hard" -gt "$cap" ]; then echo "$cap"; else echo "$hard"; fi
}

write_containers_conf() {
    local conf="$IMAGE_STATE_DIR/containers.conf" nofile nproc
    # caps: values seen to work in sandboxes that allow no more (the pods need far fewer)
    nofile=$(capped_limit "$(ulimit -Hn)" 20000)
    nproc=$(capped_limit "$(ulimit -Hu)" 4096)
    mkdir -p "$IMAGE_STATE_DIR"
    {
        echo "# Written by docker/engine.sh for make image / make image-test."
        echo "[containers]"
        echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
        echo "[engine]"
        echo "runtime = \"runc\""
        if [ ! -d /run/systemd/system ]; then
            echo "cgroup_manager = \"cgroupfs\""
            echo "events_logger = \"file\""
        fi
    } >"$conf"
    echo "$conf"
}

choose_engine() {
    if [ -z "${ENGINE:-}" ]; then
        if command -v docker >/dev/null && docker info >/dev/null 2>&1; then ENGINE=docker; else ENGINE=podman; fi
    fi
    if [ "$ENGINE" = podman ]; then
        install_engine_packages
        if [ -z "${CONTAINERS_CONF:-}" ]; then
            CONTAINERS_CONF=$(write_containers_conf)
            CONTAINERS_CONF=$(realpath "$CONTAINERS_CONF")
        fi
        export CONTAINERS_CONF
    fi
    export ENGINE
}
