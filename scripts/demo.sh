#!/usr/bin/env bash
# The main job: two iWARP endpoints on this machine, each an `iwarpd` and an `iwarp-control` on
# the embedded Unix-socket Ethernet (no root, no DPDK, no hugepages needed); an application pair
# (verbs-api/verbs/examples/rdma_pair.rs) that runs every RDMA operation between them with the
# data checked; then a short latency table from `iwarp-bench` over the same endpoints, beside
# kernel TCP and shared-memory baselines measured in the same run.
#
#   bash scripts/demo.sh              set up (scripts/setup.sh), build, run
#   bash scripts/demo.sh --no-setup   skip the package set-up (already done)
#
# Ctrl-C stops everything; the script removes what it created (runtime directories, the
# Ethernet segment, shared-memory segments).
set -euo pipefail
cd "$(dirname "$0")/.."

[ "${1:-}" = "--no-setup" ] || bash scripts/setup.sh
# setup.sh may just have installed rustup, whose PATH only later login shells get.
[ -f "$HOME/.cargo/env" ] && ! command -v cargo >/dev/null && . "$HOME/.cargo/env"

echo "demo: building (release)"
cargo build --release -q -p iwarpd -p iwarp-control -p iwarp-bench
cargo build --release -q -p iwarp-verbs --example rdma_pair
bin=target/release

run=$(mktemp -d "${TMPDIR:-/tmp}/iwarp-demo.XXXXXX")
apps=()
daemons=()

stop() {
    local p
    # Applications first (control cleans up after them), then the control planes, then the
    # daemons (which remove their segments and runtime files on SIGTERM).
    for group in apps controls daemons; do
        case $group in
            apps) set -- "${apps[@]:-}" ;;
            controls) set -- "${controls[@]:-}" ;;
            daemons) set -- "${daemons[@]:-}" ;;
        esac
        for p in "$@"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
        for p in "$@"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
    done
    rm -rf "$run"
}
controls=()
trap stop EXIT
trap 'echo; echo "demo: interrupted, cleaning up"; exit 130' INT TERM

wait_file() {
    local f=$1 pid=$2 log=$3 i
    for i in $(seq 1 400); do
        [ -e "$f" ] && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "demo: a process failed to start; its log ($log):" >&2
            tail -n 20 "$log" >&2
            exit 1
        fi
        sleep 0.05
    done
    echo "demo: timed out waiting for $f" >&2
    exit 1
}

endpoint() {
    local name=$1 n=$2
    mkdir -p "$run/$name"
    "$bin/iwarpd" --name "demo-$name-$$" --port unix --segment "$run/ethernet" \
        --mac "02:00:00:00:de:0$n" --ip "10.77.0.$n/24" --polling adaptive \
        --runtime-dir "$run/$name" >"$run/$name-iwarpd.log" 2>&1 &
    daemons+=($!)
    wait_file "$run/$name/daemon.shm" $! "$run/$name-iwarpd.log"
    "$bin/iwarp-control" --runtime-dir "$run/$name" >"$run/$name-control.log" 2>&1 &
    controls+=($!)
    wait_file "$run/$name/control.sock" $! "$run/$name-control.log"
    echo "demo: endpoint $name: iwarpd + iwarp-control at 10.77.0.$n (runtime $run/$name)"
}

endpoint a 1
endpoint b 2

echo "demo: every RDMA operation between two applications, data checked"
"$bin/examples/rdma_pair" server --runtime-dir "$run/b" --port 7000 &
apps+=($!)
server=$!
"$bin/examples/rdma_pair" client --runtime-dir "$run/a" --connect 10.77.0.2:7000
wait "$server"
apps=()

echo
echo "demo: latency over the same endpoints (iwarp-bench), with baselines from this run"
"$bin/iwarp-bench" --daemons running --runtime-dir "$run/a" --runtime-dir "$run/b" \
    --endpoint-ip 10.77.0.1 --endpoint-ip 10.77.0.2 \
    --sizes 8,64,4K --iterations 2000 --warmup 200 --baselines tcp,shm
