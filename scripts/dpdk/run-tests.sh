#!/usr/bin/env bash
# The DPDK tests, as root: reserves hugepages (falls back to --no-huge where the test
# supports it), builds iwarpd with the `dpdk` feature, and runs
#   - dpdk-sys  tests/memif_two_processes.rs: two processes exchange 3000 frames (60..1514
#     octets) over net_memif, with hugepages and with --no-huge; then an iwarpd daemon on a
#     memif client answers ARP from another process and stops cleanly on SIGTERM;
#   - iwarpd    tests/dpdk_memif.rs: two RNIC nodes (one process) over a memif pair, a 4 MiB
#     RDMA Write, bytes compared;
#   - net_af_packet on a veth pair: the Linux kernel in a network namespace is the peer;
#     iwarpd answers its ARP and refuses its TCP connection (RST) through DPDK, and the
#     capture shows both (tshark).
# Usage: scripts/dpdk/run-tests.sh [--release]
# Needs: libdpdk-dev (pulls the memif/af_packet/ring PMDs), libclang-dev, clang, pkg-config.
set -euo pipefail
cd "$(dirname "$0")/../.."

profile=()
[ "${1:-}" = "--release" ] && profile=(--release)

if [ "$(id -u)" -ne 0 ]; then
    echo "run-tests.sh: the DPDK tests need root (EAL locks /var/run/dpdk, maps hugepages)" >&2
    exit 2
fi

# 256 x 2 MiB: each memif peer asks EAL for 128 MiB (-m 128).
bash deploy/hugepages.sh 256 || echo "run-tests.sh: hugepages short; the --no-huge scenario still runs"

cargo build "${profile[@]}" -p iwarpd --features dpdk --bins
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
sub=debug
[ "${#profile[@]}" -gt 0 ] && sub=release
export IWARPD_BIN="$target/$sub/iwarpd"
echo "run-tests.sh: IWARPD_BIN=$IWARPD_BIN"

cargo test "${profile[@]}" -p dpdk-sys --test memif_two_processes -- --nocapture
cargo test "${profile[@]}" -p iwarpd --features dpdk --test dpdk_memif -- --nocapture
# --- net_af_packet on a veth pair, the kernel as the peer -----------------------------------
for tool in ip ethtool; do
    command -v "$tool" >/dev/null || { echo "run-tests.sh: needs $tool (apt-get install iproute2 ethtool)" >&2; exit 1; }
done
ns=iwdpdk$$; va=iwdpa$$; vb=iwdpb$$; work=$(mktemp -d)
cleanup() {
    [ -n "${daemon:-}" ] && kill -TERM "$daemon" 2>/dev/null || true
    ip link del "$va" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns"
ip link add "$va" type veth peer name "$vb"
ip link set "$vb" netns "$ns"
# The host side belongs to DPDK (af_packet): no address, no IPv6 chatter from the kernel.
sysctl -qw "net.ipv6.conf.$va.disable_ipv6=1"
ip link set "$va" up
ip -n "$ns" addr add 10.79.0.1/24 dev "$vb"
ip -n "$ns" link set "$vb" up
# veth hands af_packet frames with the TCP checksum not filled in (checksum offload): make
# the kernel compute it, or the daemon drops the segments as corrupt (bad_checksums, warned).
ip netns exec "$ns" ethtool -K "$vb" tx off >/dev/null
cat > "$work/af.toml" <<TOML
[daemon]
name = "af-packet-test"
runtime_dir = "$work/run"
[port]
kind = "dpdk"
ipv4 = "10.79.0.2/24"
eal_args = ["--in-memory", "--no-pci", "--no-telemetry", "--log-level=4", "-m", "128",
            "--vdev=net_af_packet0,iface=$va"]
[shm]
hugepages = "off"
TOML
"$IWARPD_BIN" --config "$work/af.toml" --pcap "$work/af.pcap" > "$work/iwarpd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -e "$work/run/stats" ] && break; sleep 0.1; done
if ip netns exec "$ns" timeout 10 bash -c 'echo > /dev/tcp/10.79.0.2/4791' 2> "$work/connect.err"; then
    echo "run-tests.sh: af_packet: a connection to a closed port succeeded?" >&2; exit 1
fi
grep -q "Connection refused" "$work/connect.err" || {
    echo "run-tests.sh: af_packet: no RST from iwarpd:" >&2; cat "$work/connect.err" "$work/iwarpd.log" >&2; exit 1; }
kill -TERM "$daemon"; wait "$daemon"; daemon=
if command -v tshark >/dev/null; then
    tshark -r "$work/af.pcap" -Y 'arp.opcode == 2 || tcp.flags.reset == 1' 2>/dev/null | tee "$work/t.txt"
    grep -q "ARP" "$work/t.txt" && grep -q "RST" "$work/t.txt" || {
        echo "run-tests.sh: af_packet capture lacks the ARP reply or the RST" >&2; exit 1; }
fi
echo "run-tests.sh: af_packet on veth: the kernel peer got iwarpd's ARP reply and RST"

echo "run-tests.sh: DPDK tests passed"
