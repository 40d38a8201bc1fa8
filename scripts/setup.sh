#!/usr/bin/env bash
# One-time set-up of a Debian 12 machine for building, testing and running the stack.
#   scripts/setup.sh        install packages (as root, or through sudo), rust components, build
#   scripts/setup.sh --ci   the same, plus hugepages and the tools CI's root-only tests use
# Idempotent: re-running it does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=0
[ "${1:-}" = "--ci" ] && ci=1

# Debian packages: DPDK 22.11 and libclang (bindgen) for dpdk-sys, tshark to decode our pcaps with
# Wireshark's iWARP dissectors, iproute2/nftables for the namespace and loss tests, ethtool for the
# veth test (the kernel's checksum offload), gcc for the C ABI example, iperf3 for the kernel TCP
# flow of the fairness test; rdma-core's headers (bindgen for the drop-in libibverbs/librdmacm)
# and the unmodified rdma-core, perftest and rdmacm programs the drop-in libraries are tested with;
# jq for the benchmark scripts to read iwarp-bench's and iperf3's JSON; curl to fetch rustup when
# there is no Rust toolchain.
pkgs=(build-essential pkg-config libdpdk-dev dpdk libclang-dev clang tshark iproute2 nftables ethtool
    iperf3 libibverbs-dev librdmacm-dev ibverbs-utils perftest rdmacm-utils jq curl ca-certificates)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Rust: Debian 12's cargo is older than the workspace's rust-version, so a user (or root) without a
# toolchain gets rustup's stable one in ~/.cargo, which also puts ~/.cargo/bin on the PATH of later
# login shells (~/.profile); this script's own later steps read ~/.cargo/env.
[ -f "$HOME/.cargo/env" ] && ! command -v cargo >/dev/null && . "$HOME/.cargo/env"
if ! command -v cargo >/dev/null; then
    echo "setup: no cargo on PATH: installing rustup's stable toolchain into ~/.cargo"
    curl --proto '=https' --tlsv1.2 -sSf https://static.rust-lang.org/rustup/rustup-init.sh |
        sh -s -- -y -q --profile minimal --component rustfmt,clippy
    . "$HOME/.cargo/env"
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

if [ $ci -eq 1 ] && [ "$(id -u)" -eq 0 ]; then
    # Hugepages for DPDK and for hugepage-backed rings; failure is not fatal (the stack falls back
    # to ordinary shared memory and says so).
    echo 256 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages 2>/dev/null || true
    mkdir -p /dev/hugepages
    mountpoint -q /dev/hugepages || mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null || true
    echo "setup: hugepages free: $(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)"
    # The Linux siw guest the interop tests run rdma-core's rping in (QEMU, no KVM needed).
    bash scripts/siw-guest/build.sh
fi

cargo build --workspace
