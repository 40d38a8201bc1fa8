#!/usr/bin/env bash
# Soak (a benchmark, not CI): two endpoints (iwarpd + iwarp-control each, embedded Unix-socket
# Ethernet); two application pairs that run `rdma_pair` round after round, every byte checked;
# and a third application (`iwarp-bench` streaming RDMA Writes) killed with SIGKILL and started
# again every few seconds. At the end: every checked round passed, and each daemon's resident
# memory and the applications' shared-memory files are back to their baseline.
#
#   bash scripts/soak.sh [MINUTES]       default 10
#   BIN=target/release bash scripts/soak.sh 3
#
# Binaries come from $BIN (default target/debug): iwarpd, iwarp-control, iwarp-bench,
# examples/rdma_pair. Exit status 0 only when everything held.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=${1:-10}
bin=${BIN:-target/debug}
# How far above its baseline a daemon's resident memory may end (KiB).
slack_kib=${SLACK_KIB:-8192}
for b in iwarpd iwarp-control iwarp-bench examples/rdma_pair; do
    [ -x "$bin/$b" ] || { echo "soak: $bin/$b missing (cargo build -p iwarpd -p iwarp-control -p iwarp-bench; cargo build -p iwarp-verbs --examples)" >&2; exit 2; }
done

run=$(mktemp -d "${TMPDIR:-/tmp}/iwarp-soak.XXXXXX")
pids=()
stop() {
    local p
    for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
    rm -rf "$run"
}
trap stop EXIT
trap 'echo "soak: interrupted"; exit 130' INT TERM

wait_file() {
    local i
    for i in $(seq 1 400); do
        [ -e "$1" ] && return 0
        sleep 0.05
    done
    echo "soak: timed out waiting for $1" >&2
    exit 1
}

declare -A daemon
endpoint() {
    local name=$1 n=$2
    mkdir -p "$run/$name"
    "$bin/iwarpd" --name "soak-$name-$$" --port unix --segment "$run/ethernet" \
        --mac "02:00:00:00:50:0$n" --ip "10.77.0.$n/24" --polling adaptive \
        --runtime-dir "$run/$name" >"$run/$name-iwarpd.log" 2>&1 &
    pids+=($!)
    daemon[$name]=$!
    wait_file "$run/$name/daemon.shm"
    "$bin/iwarp-control" --runtime-dir "$run/$name" >"$run/$name-control.log" 2>&1 &
    pids+=($!)
    wait_file "$run/$name/control.sock"
}
endpoint a 1
endpoint b 2

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
# Shared-memory files of the applications this soak started (their names carry the pid).
app_files() {
    local n=0 p
    [ -s "$run/app-pids" ] || { echo 0; return; }
    for p in $(sort -u "$run/app-pids"); do
        n=$((n + $(find /dev/shm /dev/hugepages -maxdepth 1 -name "iwarp-app-$p-*" 2>/dev/null | wc -l)))
    done
    echo "$n"
}

# One checked round of pair $1 on port $2: server at b, client at a.
round() {
    local port=$2 s c
    "$bin/examples/rdma_pair" server --runtime-dir "$run/b" --port "$port" >>"$run/pair$1.log" 2>&1 &
    s=$!
    echo "$s" >>"$run/app-pids"
    sleep 0.2
    "$bin/examples/rdma_pair" client --runtime-dir "$run/a" --connect "10.77.0.2:$port" >>"$run/pair$1.log" 2>&1 &
    c=$!
    echo "$c" >>"$run/app-pids"
    # Both waited for, whatever the client's fate: the next round's server listens on the
    # same port.
    local rc=0
    wait "$c" || rc=1
    wait "$s" || rc=1
    return "$rc"
}

# A warm-up round, then the baseline.
round 0 7000 || { echo "soak: the warm-up round failed; see $run/pair0.log" >&2; exit 1; }
sleep 2
base_a=$(rss_kib "${daemon[a]}")
base_b=$(rss_kib "${daemon[b]}")
echo "soak: baseline: iwarpd a ${base_a} KiB, b ${base_b} KiB; $minutes min"

end=$(($(date +%s) + minutes * 60))
pair_loop() {
    local ok=0 bad=0
    while [ "$(date +%s)" -lt "$end" ]; do
        if round "$1" "$2"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
    done
    echo "$ok $bad" >"$run/pair$1.result"
}
pair_loop 1 7001 &
l1=$!
pair_loop 2 7002 &
l2=$!

kills=0
while [ "$(date +%s)" -lt "$end" ]; do
    "$bin/iwarp-bench" --daemons running --runtime-dir "$run/a" --runtime-dir "$run/b" \
        --mode bandwidth --ops write --sizes 4K --window 16 --duration 600s --warmup 10 \
        --baselines none --quiet --cm-port 19000 >>"$run/victim.log" 2>&1 &
    v=$!
    echo "$v" >>"$run/app-pids"
    sleep $((2 + RANDOM % 4))
    kill -KILL "$v" 2>/dev/null || true
    wait "$v" 2>/dev/null || true
    kills=$((kills + 1))
    echo "soak: $(date -u +%T) victim killed $kills time(s); iwarpd a $(rss_kib "${daemon[a]}") KiB, b $(rss_kib "${daemon[b]}") KiB"
done
wait "$l1" "$l2"
read -r ok1 bad1 <"$run/pair1.result"
read -r ok2 bad2 <"$run/pair2.result"

# Give the daemons and control time to reclaim what the last applications left.
status=0
for _ in $(seq 1 60); do
    ra=$(rss_kib "${daemon[a]}")
    rb=$(rss_kib "${daemon[b]}")
    files=$(app_files)
    if [ "$ra" -le $((base_a + slack_kib)) ] && [ "$rb" -le $((base_b + slack_kib)) ] && [ "$files" -eq 0 ]; then
        break
    fi
    sleep 1
done
echo "soak: checked rounds: pair 1 $ok1 passed, $bad1 failed; pair 2 $ok2 passed, $bad2 failed"
echo "soak: victim killed $kills times"
echo "soak: end: iwarpd a ${ra} KiB (baseline ${base_a}), b ${rb} KiB (baseline ${base_b}); application shm files left: $files"
[ "$bad1" -eq 0 ] && [ "$bad2" -eq 0 ] && [ "$ok1" -gt 0 ] && [ "$ok2" -gt 0 ] || { echo "soak: FAILED: a checked round failed (logs: $run/pair*.log)"; status=1; }
[ "$ra" -le $((base_a + slack_kib)) ] && [ "$rb" -le $((base_b + slack_kib)) ] || { echo "soak: FAILED: daemon memory did not return to baseline"; status=1; }
[ "$files" -eq 0 ] || { echo "soak: FAILED: shared-memory files left behind"; status=1; }
[ "$status" -eq 0 ] && echo "soak: OK"
if [ "$status" -ne 0 ]; then
    # Keep the logs for a look.
    keep=$(mktemp -d "${TMPDIR:-/tmp}/iwarp-soak-logs.XXXXXX")
    cp "$run"/*.log "$keep"/ 2>/dev/null || true
    echo "soak: logs kept in $keep"
fi
exit "$status"
