#!/usr/bin/env bash
# Builds every fuzz target and runs each for N seconds (default 10).
#   scripts/fuzz.sh [SECONDS]
# cargo-fuzz wants a nightly toolchain for sanitizers; we build on the stable toolchain with
# RUSTC_BOOTSTRAP=1 and no sanitizer (libFuzzer's coverage guidance still works), which is
# what this machine has. With a nightly toolchain, drop RUSTC_BOOTSTRAP and `-s none`.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
cd fuzz
targets=$(cargo fuzz list)
cargo fuzz build -s none --release
for t in $targets; do
    echo "fuzz: $t for ${secs}s"
    mkdir -p corpus/"$t"
    cargo fuzz run -s none --release "$t" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | tail -n 3
done
