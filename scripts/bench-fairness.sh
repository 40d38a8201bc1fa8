#!/usr/bin/env bash
# Fair sharing of a bottleneck (root; iperf3):
#   scripts/bench-fairness.sh [cubic|newreno|dctcp|none]   (default cubic)
# after `cargo build --release -p iwarpd -p iwarp-control -p iwarp-bench -p iwarp-testkit`.
#
# Two endpoints (iwarpd + iwarp-control) on TAP ports behind the bottleneck of
# testkit/src/bottleneck.rs (`iwarp-bottleneck`): two bridges, tbf at RATE_MBIT toward the
# receiver, iperf3 in namespaces on either side. For SECS seconds each:
#   (a) one of our RDMA Write streams (iwarp-bench bandwidth, 1 MiB Writes, 4 in flight)
#       against one kernel CUBIC flow (iperf3 -C cubic): ours counted at the receiving
#       daemon (its stats file's stream_bytes_rx, on the file's clock) over the kernel flow's
#       run, the kernel flow by iperf3's receiver;
#   (b) two of our streams (two iwarp-bench processes on the same endpoints, listening on
#       ports of their own), each counted by its iwarp-bench.
# Prints each flow's goodput, Jain's fairness index and the link's utilisation (goodputs over
# the shaped rate, which counts Ethernet headers too: about 96 % is the most goodput can
# reach), then our sender's congestion counters. The sender's stats file is sampled every
# second to $OUT/cwnd-<case>.txt (cwnd, bytes in flight, resends); CAPTURE=1 also captures
# the shaped link's first 128 octets of each frame to $OUT/<case>.pcap for tshark.
# Environment: SECS (20), RATE_MBIT (200), OUT (a fresh temporary directory, kept),
# BIN (target/release), KERNEL_CC (cubic).
set -euo pipefail
cd "$(dirname "$0")/.."
cc=${1:-cubic}
secs=${SECS:-20}
rate=${RATE_MBIT:-200}
bin=${BIN:-target/release}
kcc=${KERNEL_CC:-cubic}
[ "$(id -u)" = 0 ] || { echo "bench-fairness: needs root (TAP, bridges, namespaces)" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "bench-fairness: needs iperf3" >&2; exit 2; }
for b in iwarpd iwarp-control iwarp-bench iwarp-bottleneck; do
    [ -x "$bin/$b" ] || { echo "bench-fairness: no $bin/$b: build it (see the header)" >&2; exit 2; }
done

# Names unique to this run: other benchmarks and root tests share the machine.
p=iwm$(($$ % 10000))
run=$(mktemp -d "${TMPDIR:-/tmp}/iwarp-fair.XXXXXX")
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/iwarp-fair-out.XXXXXX")}
mkdir -p "$out"
ipa=10.87.0.1 ipb=10.87.0.2 ipc=10.87.0.20 ips=10.87.0.21
pids=()
stop() {
    local x
    for x in "${pids[@]:-}"; do [ -n "$x" ] && kill -TERM "$x" 2>/dev/null || true; done
    for x in "${pids[@]:-}"; do [ -n "$x" ] && wait "$x" 2>/dev/null || true; done
    "$bin/iwarp-bottleneck" down "$p" || true
    rm -rf "$run"
}
trap stop EXIT
trap 'exit 130' INT TERM

wait_file() {
    local i
    for i in $(seq 1 400); do
        [ -e "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || { echo "bench-fairness: $3 failed:" >&2; tail "$4" >&2; exit 1; }
        sleep 0.05
    done
    echo "bench-fairness: timed out waiting for $1" >&2
    exit 1
}

# A congested link may hold a flow's resends back for seconds: the user timeout is not what
# is measured here.
printf '[tcp]\ncongestion = "%s"\nuser_timeout_ms = 30000\n' "$cc" > "$run/cfg.toml"
for n in a b; do
    ip=$([ $n = a ] && echo $ipa || echo $ipb)
    mac=$([ $n = a ] && echo 02:00:00:00:fa:01 || echo 02:00:00:00:fa:02)
    mkdir -p "$run/$n"
    "$bin/iwarpd" --config "$run/cfg.toml" --name "$p$n" --port tap --tap "$p${n^^}" \
        --mac $mac --ip $ip/24 --polling adaptive --runtime-dir "$run/$n" > "$run/$n-d.log" 2>&1 &
    pids+=($!)
    wait_file "$run/$n/daemon.shm" $! iwarpd "$run/$n-d.log"
    "$bin/iwarp-control" --config "$run/cfg.toml" --runtime-dir "$run/$n" > "$run/$n-c.log" 2>&1 &
    pids+=($!)
    wait_file "$run/$n/control.sock" $! iwarp-control "$run/$n-c.log"
done
# a (iwarp-bench's initiator, the sender) and the kernel client on the sending bridge.
"$bin/iwarp-bottleneck" up "$p" "$rate" "${p}A" "${p}B" $ipc $ips

# Samples the sender's stats file every second until killed: its core line's window and
# resend counters, and each connection's line (cwnd, srtt, rto, resends).
trace() {
    local t0=$SECONDS
    while sleep 1; do
        sed -n -e 's/.*\(cwnd=[0-9]* bytes_in_flight=[0-9]* retransmits=[0-9]* fast_retransmits=[0-9]* rtos=[0-9]* ecn_marks=[0-9]* spurious_retransmits=[0-9]* dsack_spurious=[0-9]*\).*/\1/p' \
            -e 's/^conn /  conn /p' "$run/a/stats" 2>/dev/null | sed "s/^/t=$((SECONDS - t0)) /"
    done
}
# Prints "<mtime> <stream_bytes_rx>" of the receiver's stats file at each rewrite (every
# second) until killed: the octets our flows delivered, on the file's own clock.
received() {
    local last="" m v
    while :; do
        m=$(stat -c %.9Y "$run/b/stats" 2>/dev/null || true)
        if [ -n "$m" ] && [ "$m" != "$last" ]; then
            v=$(grep -o 'stream_bytes_rx=[0-9]*' "$run/b/stats" | head -1 | cut -d= -f2)
            echo "$m $v"
            last=$m
        fi
        sleep 0.05
    done
}
# Our goodput (Mbit/s) between wall-clock times $2 and $3 from the samples in $1: the
# first and last rewrites inside the interval.
ours_between() {
    awk -v t0="$2" -v t1="$3" '$1 >= t0 && $1 <= t1 && $2 != "" {
        if (!n++) { a = $1; ca = $2 } b = $1; cb = $2 }
        END { if (n < 2) print 0; else printf "%.1f\n", (cb - ca) * 8 / (b - a) / 1e6 }' "$1"
}
counters() {
    grep -o '^core.*' "$run/a/stats" | grep -o ' retransmits=[0-9]*\| fast_retransmits=[0-9]*\| rtos=[0-9]*\| spurious_retransmits=[0-9]*\| dsack_spurious=[0-9]*\| drops=[0-9]*' \
        | tr -d '\n'
}
# Waits until our flow's octets arrive at the receiver.
flowing() {
    local i c0 c
    c0=$(grep -o 'stream_bytes_rx=[0-9]*' "$run/b/stats" 2>/dev/null | head -1 | cut -d= -f2)
    for i in $(seq 1 600); do
        sleep 0.1
        c=$(grep -o 'stream_bytes_rx=[0-9]*' "$run/b/stats" 2>/dev/null | head -1 | cut -d= -f2)
        [ -n "$c" ] && [ "$c" != "${c0:-}" ] && return 0
    done
    echo "bench-fairness: our flow never started" >&2
    exit 1
}

bench() { # json, duration (s), port
    "$bin/iwarp-bench" --daemons running --runtime-dir "$run/a" --runtime-dir "$run/b" \
        --endpoint-ip $ipa,$ipb --mode bandwidth --ops write --sizes 1M --window 4 \
        --duration "${2}s" --warmup 2 --baselines none --quiet --json "$1" --cm-port "$3"
}
ours_mbit() { jq '.measurements[0] | .throughput.bytes * 8 / .seconds / 1e6' "$1"; }
report() { # case, rates (Mbit/s) ...
    local c=$1
    shift
    echo "$@" | awk -v c="$c" -v rate="$rate" -v cc="$cc" '{
        s = 0; q = 0
        for (i = 1; i <= NF; i++) { s += $i; q += $i * $i }
        printf "%s: flows", c
        for (i = 1; i <= NF; i++) printf " %.1f", $i
        printf " Mbit/s, Jain %.3f, utilisation %.1f %% of %d Mbit/s\n", s * s / (NF * q), s / rate * 100, rate
    }'
}

capture() {
    [ "${CAPTURE:-0}" = 1 ] || return 0
    tshark -q -i "${p}up1" -s 128 -w "$out/$1.pcap" 2>/dev/null &
    cap=$!
    sleep 1
}
capture_stop() {
    [ "${CAPTURE:-0}" = 1 ] || return 0
    kill -INT "$cap" 2>/dev/null || true
    wait "$cap" 2>/dev/null || true
}

echo "bench-fairness: $cc against kernel $kcc, $secs s through $rate Mbit/s; load: $(uptime)"
received > "$out/received.txt" &
rx=$!
pids+=($rx)

# (a) ours against one kernel flow: ours starts first (it runs past the kernel flow's end),
# the kernel flow runs $secs s once ours flows; ours is counted at the receiver over the
# kernel flow's run, the kernel flow by iperf3's receiver.
ip netns exec "${p}s" iperf3 -s -1 >/dev/null 2>&1 &
srv=$!
capture a
before=$(counters)
trace > "$out/cwnd-a.txt" &
tr=$!
bench "$out/a.json" $((secs + 30)) 18515 > "$out/a-bench.log" 2>&1 &
bp=$!
flowing
sleep 1
t0=$(date +%s.%N)
ip netns exec "${p}c" iperf3 -c $ips -C "$kcc" -t "$secs" -J > "$out/iperf3-a.json"
t1=$(date +%s.%N)
kill -INT $bp 2>/dev/null || true
wait $bp 2>/dev/null || true
kill $tr; wait $tr 2>/dev/null || true
wait $srv 2>/dev/null || true
capture_stop
kernel=$(jq '.end.sum_received.bits_per_second / 1e6' "$out/iperf3-a.json")
kretx=$(jq '.end.sum_sent.retransmits' "$out/iperf3-a.json")
report "(a) ours ($cc) vs kernel ($kcc)" "$(ours_between "$out/received.txt" "$t0" "$t1")" "$kernel"
echo "    kernel resends $kretx; our sender before:$before"
echo "    our sender after: $(counters)"

# (b) two of ours, started together, each measured by its iwarp-bench over $secs s (their
# windows differ by the connection set-up); the sum also at the receiver.
sleep 2
capture b
before=$(counters)
trace > "$out/cwnd-b.txt" &
tr=$!
t0=$(date +%s.%N)
bench "$out/b1.json" "$secs" 18515 > "$out/b1-bench.log" 2>&1 &
b1=$!
# A run fails when a message of its window is still missing seconds after its end (a flow
# stalled in retransmission backoff): said, and its figure left out.
ok=1
bench "$out/b2.json" "$secs" 18600 > "$out/b2-bench.log" 2>&1 || { echo "    flow 2: $(cat "$out/b2-bench.log")"; ok=0; }
wait $b1 || { echo "    flow 1: $(cat "$out/b1-bench.log")"; ok=0; }
t1=$(date +%s.%N)
kill $tr; wait $tr 2>/dev/null || true
capture_stop
[ $ok = 1 ] && report "(b) ours vs ours ($cc)" "$(ours_mbit "$out/b1.json")" "$(ours_mbit "$out/b2.json")"
echo "    at the receiver, both: $(ours_between "$out/received.txt" "$t0" "$t1") Mbit/s from set-up to end; seconds measured: $(jq .measurements[0].seconds "$out/b1.json") $(jq .measurements[0].seconds "$out/b2.json")"
echo "    our sender before:$before"
echo "    our sender after: $(counters)"
echo "bench-fairness: traces and reports in $out; load: $(uptime)"
