#!/usr/bin/env bash
# Reserves 2 MiB hugepages and mounts hugetlbfs, for DPDK's EAL (mbuf pools) and for the
# daemon's hugepage-backed shared memory (rings, registered memory: shm.hugepages).
#   deploy/hugepages.sh [PAGES] [NODE]
# PAGES: 2 MiB pages to reserve (default 512 = 1 GiB). NODE: reserve them on this NUMA node
# (the NIC's: cat /sys/bus/pci/devices/<addr>/numa_node) instead of across the machine.
# Idempotent; run as root (systemd runs it before iwarpd, see iwarpd@.service). Exit status 1
# when fewer pages than asked could be reserved (fragmented memory: reserve at boot with
# the kernel arguments `hugepagesz=2M hugepages=512`, or 1 GiB pages `default_hugepagesz=1G
# hugepagesz=1G hugepages=4`).
set -euo pipefail

pages="${1:-512}"
node="${2:-}"
mnt=/dev/hugepages

if [ "$(id -u)" -ne 0 ]; then
    echo "hugepages.sh: must run as root" >&2
    exit 2
fi

if [ -n "$node" ]; then
    nr=/sys/devices/system/node/node$node/hugepages/hugepages-2048kB/nr_hugepages
else
    nr=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
fi
if [ ! -w "$nr" ]; then
    echo "hugepages.sh: $nr is not writable (no 2 MiB hugepage support, or a container without it)" >&2
    exit 1
fi

# Only ever grow the reservation: other DPDK applications may use pages already.
have=$(cat "$nr")
if [ "$have" -lt "$pages" ]; then
    echo "$pages" > "$nr"
fi
have=$(cat "$nr")

mkdir -p "$mnt"
if ! mountpoint -q "$mnt"; then
    mount -t hugetlbfs -o pagesize=2M nodev "$mnt"
fi

free=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages)
echo "hugepages.sh: ${have} x 2 MiB reserved${node:+ on node $node}, ${free} free, hugetlbfs on $mnt"
if [ "$have" -lt "$pages" ]; then
    echo "hugepages.sh: asked for $pages, got $have (memory too fragmented: reserve at boot)" >&2
    exit 1
fi
