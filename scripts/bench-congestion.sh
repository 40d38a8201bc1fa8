#!/usr/bin/env bash
# Usage: scripts/bench-congestion.sh none|cubic|newreno|dctcp  (after cargo build --release).
# Run it alternately for two settings: this machine's speed drifts.
# Two endpoints with tcp.congestion=$1, then iwarp-bench read/write 8 and 64 B.
set -e
cd "$(dirname "$0")/.."
bin=${BIN:-target/release}
cc=$1; run=$(mktemp -d)
printf '[tcp]\ncongestion = "%s"\n' "$cc" > $run/cfg.toml
pids=()
for n in 1 2; do
  name=$([ $n = 1 ] && echo a || echo b)
  mkdir -p $run/$name
  $bin/iwarpd --config $run/cfg.toml --name "cc-$name-$$" --port unix --segment $run/eth --mac 02:00:00:00:cc:0$n --ip 10.78.0.$n/24 --polling adaptive --runtime-dir $run/$name > $run/$name-d.log 2>&1 & pids+=($!)
  while [ ! -e $run/$name/daemon.shm ]; do sleep 0.05; done
  $bin/iwarp-control --config $run/cfg.toml --runtime-dir $run/$name > $run/$name-c.log 2>&1 & pids+=($!)
  while [ ! -e $run/$name/control.sock ]; do sleep 0.05; done
done
$bin/iwarp-bench --daemons running --runtime-dir $run/a --runtime-dir $run/b --endpoint-ip 10.78.0.1 --endpoint-ip 10.78.0.2 --ops read,write --sizes 8,64 --iterations 3000 --warmup 300 --baselines tcp 2>&1 | grep -E "^(verbs|tcp) " | awk -v cc=$cc '{print cc, $1, $2, $3, "p50", $6, "p99", $8}'
for p in "${pids[@]}"; do kill $p; done; wait 2>/dev/null; rm -rf $run
