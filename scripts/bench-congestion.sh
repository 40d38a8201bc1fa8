#!/usr/bin/env bash
# Congestion control alone on an uncongested link, after
# `cargo build --release -p iwarpd -p iwarp-control -p iwarp-bench --features iwarpd/dpdk,iwarp-bench/dpdk --bins --example node-pair`:
#
#   scripts/bench-congestion.sh none|cubic|newreno|dctcp
#       Two endpoints on the Unix port with tcp.congestion=$1, then iwarp-bench read/write
#       8 and 64 B round trips.
#   scripts/bench-congestion.sh series [ROUNDS] [A] [B]     (default 3 rounds, none, cubic)
#       A and B alternately, ROUNDS times each (this machine's speed drifts, so a ratio holds
#       only within one series), each time:
#       - node-pair latency: the frame path's RDMA Write 64 B hop p50 (two nodes on one
#         thread, in-memory link);
#       - node-pair rate --op writes --link memif --threads 2: 64 KiB RDMA Writes over DPDK
#         memif, a pinned core per node (root);
#       - iwarp-bench bandwidth, 64 KiB Writes, window 64, through two daemons on DPDK memif
#         (root; spawned by iwarp-bench with tcp.congestion set);
#       - the Unix-port round trips above.
#       One line per figure: setting, round, test, value.
set -e
cd "$(dirname "$0")/.."
bin=${BIN:-target/release}

unix_rtt() {
    local cc=$1 run
    run=$(mktemp -d)
    printf '[tcp]\ncongestion = "%s"\n' "$cc" > $run/cfg.toml
    local pids=() n name
    for n in 1 2; do
      name=$([ $n = 1 ] && echo a || echo b)
      mkdir -p $run/$name
      $bin/iwarpd --config $run/cfg.toml --name "cc-$name-$$" --port unix --segment $run/eth --mac 02:00:00:00:cc:0$n --ip 10.78.0.$n/24 --polling adaptive --runtime-dir $run/$name > $run/$name-d.log 2>&1 & pids+=($!)
      while [ ! -e $run/$name/daemon.shm ]; do sleep 0.05; done
      $bin/iwarp-control --config $run/cfg.toml --runtime-dir $run/$name > $run/$name-c.log 2>&1 & pids+=($!)
      while [ ! -e $run/$name/control.sock ]; do sleep 0.05; done
    done
    $bin/iwarp-bench --daemons running --runtime-dir $run/a --runtime-dir $run/b --endpoint-ip 10.78.0.1 --endpoint-ip 10.78.0.2 --ops read,write --sizes 8,64 --iterations 3000 --warmup 300 --baselines tcp 2>&1 | grep -E "^(verbs|tcp) " | awk -v cc=$cc '{print cc, $1, $2, $3, "p50", $6, "p99", $8}'
    for p in "${pids[@]}"; do kill $p; done; wait "${pids[@]}" 2>/dev/null || true; rm -rf $run
}

if [ "${1:-}" != series ]; then
    unix_rtt "$1"
    exit 0
fi

rounds=${2:-3}
sa=${3:-none}
sb=${4:-cubic}
[ "$(id -u)" = 0 ] || { echo "bench-congestion series: needs root (DPDK memif)" >&2; exit 2; }
echo "bench-congestion: $sa against $sb, $rounds rounds, $(nproc) cores; load: $(uptime)"
for r in $(seq 1 "$rounds"); do
    for cc in $sa $sb; do
        $bin/examples/node-pair latency --iterations 50000 --congestion $cc |
            awk -v cc=$cc -v r=$r '/^one hop/ { print cc, r, "node-pair hop p50 us", $3 }'
        # EAL fails when other users take the hugepages it found free: try again.
        for try in 1 2 3; do
            line=$($bin/examples/node-pair rate --op writes --link memif --threads 2 --seconds 3 --congestion $cc 2>/dev/null | grep Gbit) && break
        done
        echo "$line" | awk -v cc=$cc -v r=$r '{ for (i = 1; i <= NF; i++) if ($i == "Gbit/s,") print cc, r, "node-pair memif 64KiB Gbit/s", $(i - 1) }'
        cfg=$(mktemp)
        printf '[tcp]\ncongestion = "%s"\n' "$cc" > "$cfg"
        $bin/iwarp-bench --port dpdk --dpdk-vdev net_memif --daemon-config "$cfg" --mode bandwidth \
            --ops write --sizes 64K --window 64 --duration 3s --warmup 200 --baselines none --quiet \
            --json - 2>/dev/null |
            jq -r --arg cc $cc --arg r $r '.measurements[0].throughput.gbit_per_s | "\($cc) \($r) daemons memif 64KiB Gbit/s \(.)"'
        rm -f "$cfg"
        unix_rtt $cc | awk -v r=$r '{ $1 = $1 " " r " unix round trip"; print $0, "us" }'
    done
done
echo "bench-congestion: done; load: $(uptime)"
