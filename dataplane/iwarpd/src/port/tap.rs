//! A Linux TAP port (root, or CAP_NET_ADMIN): frames to and from the kernel's network stack,
//! so the daemon can sit on a bridge with VMs (a siw peer) or other stacks.
//!
//! Full queues: Linux gives a TAP's writer no back-pressure. A write hands the frame to the
//! kernel's receive path at once (a bridge forwards it, or the local stack takes it) and
//! succeeds; where the next queue is full, the frame is dropped there, unseen by the writer
//! (another TAP's queue counts it in that interface's `tx_dropped`). So [`Port::tx_ready`]
//! stays true here, and what the port can do is on its receiving side: the kernel queues
//! frames for the daemon in the TAP's own queue (`txqueuelen`, 1000 by default), where a
//! daemon that reads more slowly than its peers send loses frames. The port raises that queue
//! to [`TAP_QUEUE`] frames, room for the windows of a few dozen streaming connections, and
//! counts the interface's drops in [`Port::dropped`].

use super::{Port, RxBuf, RxPool};
use smoltcp::wire::ETHERNET_HEADER_LEN;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;

const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
/// One queue (file) per worker on the same interface; the kernel spreads flows over them.
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
/// `_IOW('T', 202, int)`: attach the file to a TUN/TAP interface.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// Frames the kernel queues for the port (the interface's `txqueuelen`) at least: the
/// in-flight windows of about 45 connections at the default 256 KiB each, in 1500-octet
/// frames, so that peers sending faster than the daemon reads fill the queue without
/// overflowing it (TCP flow control bounds what they send to those windows). A full queue
/// drops, counted in [`Port::dropped`].
pub const TAP_QUEUE: u32 = 8192;

/// The port reads the interface's drop count every this many receive bursts.
const DROPS_EVERY: u32 = 64;

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// `struct ifreq` with an int member (`ifr_mtu`, `ifr_qlen`).
#[repr(C)]
struct IfInt {
    name: [libc::c_char; libc::IFNAMSIZ],
    value: libc::c_int,
    _pad: [u8; 20],
}

/// A socket to ask the kernel about interfaces through, and an ifreq naming `name`.
fn if_request(name: &CString) -> io::Result<(std::os::fd::OwnedFd, IfInt)> {
    // SAFETY: a plain socket() call; the descriptor is owned by `sock` below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut req = IfInt {
        name: [0; libc::IFNAMSIZ],
        value: 0,
        _pad: [0; 20],
    };
    for (d, s) in req.name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    Ok((sock, req))
}

/// One interface ioctl whose argument is an ifreq with an int member (`SIOCGIFMTU`,
/// `SIOCSIFTXQLEN`, ...).
fn if_ioctl(sock: &std::os::fd::OwnedFd, code: libc::c_ulong, req: &mut IfInt) -> io::Result<()> {
    // SAFETY: `req` is an ifreq-layout struct that outlives the call; the socket is open,
    // and every code this module passes reads or writes an int member of it.
    if unsafe { libc::ioctl(sock.as_raw_fd(), code as _, req as *mut IfInt) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Raises the queue the kernel keeps for interface `name` (its `txqueuelen`, the frames that
/// wait for the port to read them) to at least `len` frames. An error where it cannot (no
/// CAP_NET_ADMIN on a TAP created for this user).
fn raise_kernel_queue(name: &CString, len: u32) -> io::Result<()> {
    let (sock, mut req) = if_request(name)?;
    let want = libc::c_int::try_from(len).map_err(io::Error::other)?;
    if_ioctl(&sock, libc::SIOCGIFTXQLEN as _, &mut req)?;
    if req.value >= want {
        return Ok(());
    }
    req.value = want;
    if_ioctl(&sock, libc::SIOCSIFTXQLEN as _, &mut req)
}

/// Gives the kernel side of interface `name` the MTU `mtu`, so that the kernel (a bridge, a
/// VM's path) passes frames as long as the port sends and never sends longer ones (a TAP
/// is created at 1500). Nothing to do where it has it already; an error where it differs
/// and cannot be set (no CAP_NET_ADMIN on a TAP created for this user).
fn set_kernel_mtu(name: &CString, mtu: usize) -> io::Result<()> {
    let (sock, mut req) = if_request(name)?;
    let want = libc::c_int::try_from(mtu).map_err(io::Error::other)?;
    if_ioctl(&sock, libc::SIOCGIFMTU as _, &mut req)?;
    if req.value == want {
        return Ok(());
    }
    let had = req.value;
    req.value = want;
    if_ioctl(&sock, libc::SIOCSIFMTU as _, &mut req).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "its MTU is {had}, port.mtu {mtu}, and setting it failed ({e}): \
                 ip link set {} mtu {mtu}",
                name.to_string_lossy()
            ),
        )
    })
}

pub struct TapPort {
    file: File,
    name: String,
    mac: [u8; 6],
    mtu: usize,
    rx: RxPool,
    /// Frames the kernel refused to take (a write failing with EAGAIN or ENOBUFS: out of
    /// memory for it, as Linux's TAP has no queue of its own on this side).
    pub tx_dropped: u64,
    /// The interface's `tx_dropped` statistic: frames the kernel had for the port and lost
    /// because its queue was full (or nobody read). One queue of a multi-queue interface
    /// reads it (the count is the interface's); the others have `None`.
    kernel_drops: Option<KernelDrops>,
    /// Receive bursts until the drop count is read again.
    bursts_to_drops: u32,
    /// The last burst read until the kernel had nothing more ([`Port::rx_drained`]).
    drained: bool,
}

/// An interface statistic the port reads now and then.
struct KernelDrops {
    file: File,
    /// Its value when the port opened.
    base: u64,
    /// Its value less `base` when last read.
    seen: u64,
}

impl KernelDrops {
    fn open(name: &str) -> io::Result<KernelDrops> {
        let file = File::open(format!("/sys/class/net/{name}/statistics/tx_dropped"))?;
        let mut d = KernelDrops {
            file,
            base: 0,
            seen: 0,
        };
        d.base = d.read()?;
        Ok(d)
    }

    /// The statistic now (sysfs makes it afresh for each read from offset 0).
    fn read(&mut self) -> io::Result<u64> {
        let mut buf = [0u8; 32];
        let n = std::os::unix::fs::FileExt::read_at(&self.file, &mut buf, 0)?;
        std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| io::Error::other("unreadable tx_dropped"))
    }

    fn refresh(&mut self) {
        if let Ok(v) = self.read() {
            self.seen = v.saturating_sub(self.base);
        }
    }
}

impl TapPort {
    /// Opens (creating if needed) the TAP interface `name`, its kernel side given the MTU
    /// `mtu`. The port's own MAC is `mac`: the kernel side of the TAP has another, as a NIC
    /// and its switch port would.
    pub fn open(name: &str, mac: [u8; 6], mtu: usize) -> io::Result<TapPort> {
        let mut port = TapPort::open_queue(name, mac, mtu, 0)?;
        port.count_kernel_drops();
        Ok(port)
    }

    /// Opens `queues` queues of the multi-queue TAP interface `name` (created if needed; an
    /// existing single-queue interface of that name is refused by the kernel), one per
    /// worker: the kernel hashes each flow to one of them, and each can send.
    pub fn open_queues(
        name: &str,
        mac: [u8; 6],
        mtu: usize,
        queues: usize,
    ) -> io::Result<Vec<TapPort>> {
        let mut ports = (0..queues)
            .map(|_| TapPort::open_queue(name, mac, mtu, IFF_MULTI_QUEUE))
            .collect::<io::Result<Vec<_>>>()?;
        if let Some(first) = ports.first_mut() {
            first.count_kernel_drops();
        }
        Ok(ports)
    }

    /// Has this queue count the interface's drops of frames for the port.
    fn count_kernel_drops(&mut self) {
        match KernelDrops::open(&self.name) {
            Ok(d) => self.kernel_drops = Some(d),
            Err(e) => tracing::warn!(
                "TAP {}: its drop count cannot be read ({e}); frames it drops are not counted",
                self.name
            ),
        }
    }

    /// Reads the interface's drop count now (the port reads it every few dozen receive
    /// bursts on its own).
    pub fn refresh_drops(&mut self) {
        if let Some(d) = &mut self.kernel_drops {
            d.refresh();
        }
    }

    fn open_queue(
        name: &str,
        mac: [u8; 6],
        mtu: usize,
        extra_flags: libc::c_short,
    ) -> io::Result<TapPort> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/net/tun")?;
        let cname = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
        if cname.as_bytes().len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "interface name longer than 15 octets",
            ));
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: IFF_TAP | IFF_NO_PI | extra_flags,
            _pad: [0; 22],
        };
        for (d, s) in req.name.iter_mut().zip(cname.as_bytes()) {
            *d = *s as libc::c_char;
        }
        // SAFETY: `req` is a properly initialised ifreq-layout struct that outlives the call;
        // the fd is open on /dev/net/tun.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        set_kernel_mtu(&cname, mtu)?;
        if let Err(e) = raise_kernel_queue(&cname, TAP_QUEUE) {
            tracing::warn!(
                "TAP {name}: its queue could not be raised to {TAP_QUEUE} frames ({e}): \
                 ip link set {name} txqueuelen {TAP_QUEUE}"
            );
        }
        Ok(TapPort::on_file(file, name, mac, mtu))
    }

    /// The port over `file`, an open queue of interface `name`, with nothing counted yet.
    fn on_file(file: File, name: &str, mac: [u8; 6], mtu: usize) -> TapPort {
        TapPort {
            file,
            name: name.to_string(),
            mac,
            mtu,
            rx: RxPool::new(mtu + ETHERNET_HEADER_LEN),
            tx_dropped: 0,
            kernel_drops: None,
            bursts_to_drops: DROPS_EVERY,
            drained: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Port for TapPort {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn mtu(&self) -> usize {
        self.mtu
    }
    type Frame = RxBuf;

    fn rx_burst<F: FnMut(RxBuf)>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        self.bursts_to_drops -= 1;
        if self.bursts_to_drops == 0 {
            self.bursts_to_drops = DROPS_EVERY;
            self.refresh_drops();
        }
        let mut n = 0;
        while n < max {
            match self.rx.recv(|b| self.file.read(b)) {
                Ok(frame) if frame.is_empty() => {
                    self.rx.give_back(frame);
                    break;
                }
                Ok(frame) => {
                    f(frame);
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        self.drained = n < max;
        Ok(n)
    }
    fn recycle(&mut self, frame: RxBuf) {
        self.rx.give_back(frame)
    }
    fn rx_drained(&self) -> bool {
        self.drained
    }
    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        match self.file.write(frame) {
            // The kernel had no memory for it: lost, as on a congested wire; TCP resends.
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.raw_os_error() == Some(libc::ENOBUFS) =>
            {
                self.tx_dropped += 1;
                Ok(())
            }
            r => r.map(|_| ()),
        }
    }
    fn dropped(&self) -> u64 {
        self.tx_dropped + self.kernel_drops.as_ref().map_or(0, |d| d.seen)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.file.as_raw_fd())
    }
    fn set_asleep(&mut self, asleep: bool) {
        // An idle loop's last counters show every drop so far.
        if asleep {
            self.refresh_drops();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixDatagram;

    /// A port whose descriptor refuses every write with EAGAIN, as a TAP's does when the
    /// kernel has no room for a frame: one end of a datagram socket pair whose other end's
    /// queue is full. The other end is returned, to keep it open.
    fn port_that_refuses_writes() -> (TapPort, UnixDatagram) {
        let (ours, theirs) = UnixDatagram::pair().expect("a socket pair");
        ours.set_nonblocking(true).expect("non-blocking");
        let frame = [0u8; 1514];
        let mut queued = 0;
        while ours.send(&frame).is_ok() {
            queued += 1;
            assert!(queued < 100_000, "the peer's queue never filled");
        }
        let file = File::from(OwnedFd::from(ours));
        (
            TapPort::on_file(file, "pair", [2, 0, 0, 0, 0, 1], 1500),
            theirs,
        )
    }

    #[test]
    fn a_frame_the_kernel_has_no_room_for_is_counted_as_dropped_not_returned_as_an_error() {
        let (mut port, theirs) = port_that_refuses_writes();
        let frame = [0xab_u8; 1514];
        for n in 1..=3 {
            port.tx(&frame)
                .expect("a refused frame is lost, as on a congested wire, and TCP resends it");
            assert_eq!(port.tx_dropped, n);
            assert_eq!(port.dropped(), n, "the port's drop count includes it");
        }
        // Room again: the next frame goes.
        let mut buf = [0u8; 2048];
        theirs.recv(&mut buf).expect("a queued frame");
        port.tx(&frame).expect("sent");
        assert_eq!(port.dropped(), 3);
    }
}
