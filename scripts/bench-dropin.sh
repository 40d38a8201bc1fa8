#!/usr/bin/env bash
# Drop-in against native, on the same two endpoints, in one series:
#   scripts/bench-dropin.sh [ROUNDS]   (default 3)
# after `cargo build --release -p iwarpd -p iwarp-control -p iwarp-bench -p iwarp-rdma-core`.
#
# Two endpoints (iwarpd + iwarp-control each, embedded Unix-socket Ethernet, adaptive
# polling). Each round runs, alternately, Debian's unmodified perftest through our
# libibverbs/librdmacm (LD_LIBRARY_PATH=target/release/rdma-core, rdma_cm with -R) and
# iwarp-bench's native path (iwarp-verbs) for the same operation:
#   ib_write_lat -s 64   vs  iwarp-bench --mode latency --ops write --sizes 64
#   ib_send_lat  -s 64   vs  iwarp-bench --mode latency --ops send  --sizes 64
#   ib_write_bw -s 65536 vs  iwarp-bench --mode bandwidth --ops write --sizes 64K --window 128
# and prints p50/p99 (µs) and bandwidth (Gbit/s) side by side with the ratio drop-in/native.
# perftest's ib_*_lat report half the round trip (Write and Send ping-pong); iwarp-bench
# reports the whole round trip, halved here to compare. perftest and iwarp-bench both
# busy-poll, as do the daemons when busy: on a machine with fewer cores than the four or
# five polling threads, they take turns and the tails measure the scheduler.
# Environment: ITERS (10000 latency exchanges), BW_ITERS (5000 64 KiB Writes), BIN
# (target/release).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
iters=${ITERS:-10000}
bw_iters=${BW_ITERS:-5000}
bin=${BIN:-target/release}
libs=$bin/rdma-core
for b in iwarpd iwarp-control iwarp-bench; do
    [ -x "$bin/$b" ] || { echo "bench-dropin: no $bin/$b: build it (see the header)" >&2; exit 2; }
done
[ -e "$libs/libibverbs.so.1" ] || { echo "bench-dropin: no $libs/libibverbs.so.1: build iwarp-rdma-core" >&2; exit 2; }
for t in ib_write_lat ib_send_lat ib_write_bw; do
    command -v $t >/dev/null || { echo "bench-dropin: no $t (Debian's perftest; scripts/setup.sh)" >&2; exit 2; }
done

run=$(mktemp -d "${TMPDIR:-/tmp}/iwarp-dropin.XXXXXX")
ipa=10.79.0.1 ipb=10.79.0.2
pids=()
stop() {
    local x
    for x in "${pids[@]:-}"; do [ -n "$x" ] && kill -TERM "$x" 2>/dev/null || true; done
    for x in "${pids[@]:-}"; do [ -n "$x" ] && wait "$x" 2>/dev/null || true; done
    rm -rf "$run"
}
trap stop EXIT
trap 'exit 130' INT TERM

wait_file() {
    local i
    for i in $(seq 1 400); do
        [ -e "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || { echo "bench-dropin: $3 failed:" >&2; tail "$4" >&2; exit 1; }
        sleep 0.05
    done
    echo "bench-dropin: timed out waiting for $1" >&2
    exit 1
}

for n in a b; do
    ip=$([ $n = a ] && echo $ipa || echo $ipb)
    mac=$([ $n = a ] && echo 02:00:00:00:d1:01 || echo 02:00:00:00:d1:02)
    mkdir -p "$run/$n"
    "$bin/iwarpd" --name "di-$n-$$" --port unix --segment "$run/eth" --mac $mac --ip $ip/24 \
        --polling adaptive --runtime-dir "$run/$n" > "$run/$n-d.log" 2>&1 &
    pids+=($!)
    wait_file "$run/$n/daemon.shm" $! iwarpd "$run/$n-d.log"
    "$bin/iwarp-control" --runtime-dir "$run/$n" > "$run/$n-c.log" 2>&1 &
    pids+=($!)
    wait_file "$run/$n/control.sock" $! iwarp-control "$run/$n-c.log"
done

# Runs perftest tool $1 (server on a, client on b) with the remaining arguments; prints the
# client's result line (the columns after #bytes).
perftest() {
    local tool=$1 try
    shift
    for try in $(seq 1 20); do
        LD_LIBRARY_PATH=$libs IWARP_RUNTIME_DIR=$run/a "$tool" -R "$@" > "$run/server.out" 2>&1 &
        local srv=$!
        sleep 0.3
        if LD_LIBRARY_PATH=$libs IWARP_RUNTIME_DIR=$run/b "$tool" -R "$@" $ipa > "$run/client.out" 2>&1; then
            wait $srv || true
            # The result line: starts with the size, then the iteration count.
            awk '$1 ~ /^[0-9]+$/ && NF >= 5 { line = $0 } END { print line }' "$run/client.out"
            return 0
        fi
        kill $srv 2>/dev/null || true
        wait $srv 2>/dev/null || true
        sleep 0.3
    done
    echo "bench-dropin: $tool failed; its output:" >&2
    cat "$run/client.out" "$run/server.out" >&2
    exit 1
}

native() {
    "$bin/iwarp-bench" --daemons running --runtime-dir "$run/a" --runtime-dir "$run/b" \
        --endpoint-ip $ipa,$ipb --baselines none --quiet --json "$run/native.json" "$@" >/dev/null
}

echo "bench-dropin: $rounds rounds, $(nproc) cores; load: $(uptime)"
printf '%-22s %10s %10s %10s %10s %8s %8s\n' test drop-in-p50 native-p50 drop-in-p99 native-p99 p50-x p99-x
for r in $(seq 1 "$rounds"); do
    for op in write send; do
        # perftest: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% (µs,
        # half round trips); t_typical is the median.
        line=$(perftest ib_${op}_lat -s 64 -n "$iters")
        dp50=$(echo "$line" | awk '{print $5}')
        dp99=$(echo "$line" | awk '{print $8}')
        native --mode latency --ops $op --sizes 64 --iterations "$iters" --warmup 1000
        np50=$(jq '.measurements[0].latency_us.p50 / 2' "$run/native.json")
        np99=$(jq '.measurements[0].latency_us.p99 / 2' "$run/native.json")
        awk -v t="$op 64 B lat, round $r" -v a="$dp50" -v b="$np50" -v c="$dp99" -v d="$np99" \
            'BEGIN { printf "%-22s %10.2f %10.2f %10.2f %10.2f %8.3f %8.3f\n", t, a, b, c, d, a / b, c / d }'
    done
    # perftest: #bytes #iterations BW-peak BW-average MsgRate[Mpps]; Gbit/s from the message
    # rate (whatever perftest's MB).
    line=$(perftest ib_write_bw -s 65536 -n "$bw_iters")
    dbw=$(echo "$line" | awk '{print $5 * 65536 * 8 / 1000}')
    native --mode bandwidth --ops write --sizes 64K --window 128 --iterations "$bw_iters" --warmup 500
    nbw=$(jq '.measurements[0].throughput.gbit_per_s' "$run/native.json")
    awk -v t="write 64 KiB bw, round $r" -v a="$dbw" -v b="$nbw" \
        'BEGIN { printf "%-22s %10.3f %10.3f %10s %10s %8.3f   (Gbit/s)\n", t, a, b, "-", "-", a / b }'
done
echo "bench-dropin: done; load: $(uptime)"
