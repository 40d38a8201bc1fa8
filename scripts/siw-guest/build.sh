#!/usr/bin/env bash
# Builds a small Linux guest that runs the kernel's soft-iWARP (siw) and rdma-core's rping and
# ucmatose, so the interop tests can put a real siw peer on the other end of a TAP link (QEMU,
# no KVM needed), with perftest's ib_write_bw, ib_read_lat and ib_send_lat.
#
#   scripts/siw-guest/build.sh [OUT]     (root or sudo; default OUT: target/siw-guest)
#
# OUT gets `vmlinuz` and `initrd.gz`. Everything comes from Debian 12's packages: the kernel
# image, and siw.ko built from Debian's kernel source against its headers (Debian's kernel
# is built without CONFIG_RDMA_SIW), busybox, rping, ucmatose, perftest and the `rdma` tool
# with their libraries, and rdma-core's siw provider. Idempotent: an OUT finished by this
# version of the script (its `contents` stamp names its init and the programs it holds) is
# left alone; an older one is rebuilt.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:-target/siw-guest}")
programs="/usr/bin/rping /usr/bin/ucmatose /usr/bin/rdma /usr/bin/ib_write_bw /usr/bin/ib_read_lat /usr/bin/ib_send_lat"
stamp="guest init $(sha256sum scripts/siw-guest/init | cut -c1-16), programs: $programs"
[ -s "$out/vmlinuz" ] && [ -s "$out/initrd.gz" ] && [ "$(cat "$out/contents" 2>/dev/null)" = "$stamp" ] &&
    { echo "siw-guest: $out is built"; exit 0; }

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
apt_get() { DEBIAN_FRONTEND=noninteractive $sudo apt-get "$@"; }

# The kernel Debian ships as linux-image-amd64 today, e.g. 6.1.0-56-amd64.
apt_get update -qq
kver=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: linux-image-\(.*\)$/\1/p' | head -1)
[ -n "$kver" ] || { echo "siw-guest: cannot tell which kernel linux-image-amd64 is" >&2; exit 1; }
series=$(echo "$kver" | cut -d. -f1,2)
echo "siw-guest: kernel $kver"
apt_get install -y -qq --no-install-recommends qemu-system-x86 busybox-static rdmacm-utils \
    ibverbs-providers perftest iproute2 kmod cpio xz-utils make "linux-headers-$kver" >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -qq "linux-image-$kver" "linux-source-$series" 2>/dev/null)
dpkg-deb -x "$work"/linux-image-*.deb "$work/kernel"
dpkg-deb --fsys-tarfile "$work"/linux-source-*.deb |
    tar -x -C "$work" "./usr/src/linux-source-$series.tar.xz"
tar -xJf "$work/usr/src/linux-source-$series.tar.xz" -C "$work" \
    "linux-source-$series/drivers/infiniband/sw/siw"
siw="$work/linux-source-$series/drivers/infiniband/sw/siw"
make -s -C "/usr/src/linux-headers-$kver" M="$siw" CONFIG_RDMA_SIW=m modules >/dev/null
moddir="$work/kernel/lib/modules/$kver"
mkdir -p "$moddir/extra"
cp "$siw/siw.ko" "$moddir/extra/"
depmod -b "$work/kernel" "$kver"

root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,etc/libibverbs.d,lib/modules}
cp /bin/busybox "$root/bin/busybox"
cp "$(dirname "$0")/init" "$root/init"
chmod +x "$root/init"

# The modules and everything they need, in load order.
: > "$root/modules"
add_module() {
    local m=$1 dep
    for dep in $(modinfo -b "$work/kernel" -k "$kver" -F depends "$m" | tr , ' '); do
        add_module "$dep"
    done
    local f
    f=$(modinfo -b "$work/kernel" -k "$kver" -n "$m")
    grep -qx "$(basename "$f")" "$root/modules" && return 0
    cp "$f" "$root/lib/modules/"
    basename "$f" >> "$root/modules"
}
for m in virtio_pci virtio_net crc32c_generic ib_uverbs rdma_ucm iw_cm siw; do
    add_module "$m"
done

# rping, ucmatose, perftest and the rdma tool, their libraries, the dynamic loader and the siw
# provider; and libgcc_s, which glibc loads at run time for pthread_exit (rping's threads end
# with it).
provider=$(dpkg -L ibverbs-providers | grep '/libsiw-rdmav[0-9]*\.so$' | head -1)
libgcc=$(ldconfig -p | sed -n 's/.*libgcc_s\.so\.1 (libc6,x86-64) => //p' | head -1)
for bin in $programs "$provider" "$libgcc"; do
    mkdir -p "$root$(dirname "$bin")"
    cp -L "$bin" "$root$bin"
    for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -Ln "$lib" "$root$lib"
    done
done
echo "driver siw" > "$root/etc/libibverbs.d/siw.driver"

mkdir -p "$out"
cp "$work/kernel/boot/vmlinuz-$kver" "$out/vmlinuz.tmp"
(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 > "$out/initrd.gz.tmp"
mv "$out/initrd.gz.tmp" "$out/initrd.gz"
mv "$out/vmlinuz.tmp" "$out/vmlinuz"
echo "$stamp" > "$out/contents"
echo "siw-guest: built $out (kernel $kver, $(du -h "$out/initrd.gz" | cut -f1) initrd)"
