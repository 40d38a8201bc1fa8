//! Ports move Ethernet frames in bursts. The smoltcp device (`device.rs`) sits on one.
//!
//! - [`unix::UnixPort`]: the embedded default, a virtual Ethernet segment made of Unix
//!   datagram sockets in one directory (no root, no DPDK, no hugepages).
//! - [`pcap::PcapPort`]: wraps any port and writes every frame to a pcap file.
//! - [`tap::TapPort`]: a Linux TAP interface (root), to reach a bridge, a VM or another stack.
//! - [`lossy::LossyPort`]: wraps any port and drops received frames at a set rate (tests).
//! - [`memory::MemoryPort`]: an in-memory point-to-point pair (tests).
//! - [`steer::SteeredPort`]: one worker's view of a port several workers share: frames
//!   steered to the worker that owns their connection.
//!
//! The trait is generic (no `dyn` on the hot path): the poll loop is monomorphised per port.
//!
//! Received frames stay in the port's own buffers (DPDK's mbufs, [`RxPool`]'s buffers for
//! ports that receive with a system call) until smoltcp has read them: the device queues a
//! burst of [`Port::Frame`]s and gives each back with [`Port::recycle`], so a frame is
//! never copied between the port and TCP.

/// Inside `impl Port for Wrapper<P>`: every method a wrapper port (capture, loss) passes to
/// the port in its `inner` field unchanged — all but `rx_burst`, `tx` and `dropped`, which
/// the wrapper writes itself (its `Frame` is the inner port's). One list, so a method added
/// to [`Port`] reaches every wrapper's inner port (a wrapper that kept a default would
/// silently break steering).
macro_rules! forward_to_inner {
    () => {
        fn mac(&self) -> [u8; 6] {
            self.inner.mac()
        }
        fn mtu(&self) -> usize {
            self.inner.mtu()
        }
        fn recycle(&mut self, frame: Self::Frame) {
            self.inner.recycle(frame)
        }
        fn rx_drained(&self) -> bool {
            self.inner.rx_drained()
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
        fn tx_ready(&self) -> bool {
            self.inner.tx_ready()
        }
        fn tx_full(&self) -> bool {
            self.inner.tx_full()
        }
        fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
            self.inner.wait_fd()
        }
        fn inbox_fd(&self) -> Option<std::os::fd::RawFd> {
            self.inner.inbox_fd()
        }
        fn set_asleep(&mut self, asleep: bool) {
            self.inner.set_asleep(asleep)
        }
        fn claim_tcp_port(&mut self, port: u16) -> bool {
            self.inner.claim_tcp_port(port)
        }
        fn release_tcp_port(&mut self, port: u16) {
            self.inner.release_tcp_port(port)
        }
        fn steers_here(&self, port: u16) -> bool {
            self.inner.steers_here(port)
        }
        fn tcp_checksum_offload(&self) -> $crate::port::TcpChecksumOffload {
            self.inner.tcp_checksum_offload()
        }
        fn bad_checksums(&self) -> u64 {
            self.inner.bad_checksums()
        }
    };
}

#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod lossy;
pub mod memory;
pub mod open;
pub mod pcap;
mod rx_pool;
pub mod steer;
pub mod tap;
pub(crate) mod tcp_checksum;
pub mod unix;

pub use rx_pool::{RxBuf, RxPool};
use std::io;
use std::ops::Deref;
use std::os::fd::RawFd;

/// Frames the device layer takes from a port per burst (and the receive buffers a port keeps
/// for one).
pub const RX_BURST: usize = 32;

/// A port whose frames waiting to go out (for a peer that reads nothing, or a TX ring that
/// takes nothing) made no progress for this long drops them, counted in [`Port::dropped`]:
/// a hung peer must not hold the port's other traffic longer, and TCP resends them if the
/// peer ever reads again.
pub const STALL: std::time::Duration = std::time::Duration::from_secs(1);

/// An Ethernet port.
pub trait Port {
    /// The port's MAC address.
    fn mac(&self) -> [u8; 6];
    /// The largest Ethernet payload (IP packet) the port carries.
    fn mtu(&self) -> usize;
    /// A received frame in the port's buffer, which the port gets back through
    /// [`Port::recycle`] (or frees when it is dropped).
    type Frame: Deref<Target = [u8]>;
    /// Receives up to `max` frames without blocking, handing each to `f`; returns how many.
    fn rx_burst<F: FnMut(Self::Frame)>(&mut self, max: usize, f: F) -> io::Result<usize>;
    /// Takes back a received frame once it has been read, to receive into its buffer again.
    fn recycle(&mut self, frame: Self::Frame) {
        drop(frame)
    }
    /// Whether the last [`Port::rx_burst`] left the port's receive queues empty, as far as
    /// the port knows without looking again: the turn's receive step then reads no more
    /// instead of asking once more for nothing (on the Unix port and TAP, a system call a
    /// source). False where a short burst does not tell (a NIC's driver may hand over fewer
    /// frames than it holds): the step then reads until a burst brings none.
    fn rx_drained(&self) -> bool {
        false
    }
    /// Sends one frame (a port may batch frames until [`Port::flush`]).
    fn tx(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Sends one frame of `len` octets that `build` writes in place, unless `build` answers
    /// false (a frame held back after all); returns `build`'s result and whether the frame
    /// went to the port. A port with buffers of its own (DPDK's mbufs) has the frame built
    /// straight into one, which saves copying it; this default builds it in `scratch` and
    /// hands it to [`Port::tx`], as a wrapper that looks at each frame (capture) needs.
    fn tx_with<R>(
        &mut self,
        len: usize,
        scratch: &mut Vec<u8>,
        build: impl FnOnce(&mut [u8]) -> (R, bool),
    ) -> (R, bool) {
        let (r, send, frame) = build_in_scratch(scratch, len, build);
        // A port that cannot send drops the frame; TCP retransmits.
        if send {
            let _ = self.tx(frame);
        }
        (r, send)
    }
    /// Sends whatever is batched.
    fn flush(&mut self) -> io::Result<()>;
    /// Whether the port takes more frames now. False while frames it could not send yet
    /// wait in it past a small bound: the device then stops taking segments from TCP, which
    /// keeps them (unsent, untimed) until the port drains, so the port's queue and the round
    /// trip stay short however many connections send, instead of growing until the
    /// retransmission timers fire or the port drops. A port that drops when full (TAP)
    /// or never fills says true.
    fn tx_ready(&self) -> bool {
        true
    }
    /// Whether the frames held back fill so much of the port's queue that it must take no
    /// more even in a round the device opened while it took frames (see
    /// `PortDevice::open_round`): with thousands of connections sending, one segment each
    /// would otherwise overflow it, and the port would drop them. A port that cannot fill says
    /// false.
    fn tx_full(&self) -> bool {
        false
    }
    /// Frames lost by the port so far (a full queue, a lossy test wrapper); 0 when the port
    /// cannot lose any.
    fn dropped(&self) -> u64 {
        0
    }
    /// A descriptor that becomes readable when a frame arrives, for an idle poll loop to
    /// sleep on; `None` when the port has none (DPDK) or needs polling now (frames waiting to
    /// be sent), and the loop backs off on a timer instead.
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }
    /// A descriptor that becomes readable when another worker hands this port frames (a
    /// port several workers share, each receiving its own queue): an idle loop waits on it
    /// too, even while it backs off on a timer for want of a [`Port::wait_fd`].
    fn inbox_fd(&self) -> Option<RawFd> {
        None
    }
    /// The poll loop is about to sleep on the port's descriptors (`true`; it looks at the
    /// port once more after saying so) or is awake again (`false`). A port fed by other
    /// workers has them ring its inbox only while it sleeps, so a running worker costs them
    /// no system call.
    fn set_asleep(&mut self, _asleep: bool) {}
    /// Steering, on a port several workers share: frames to local TCP port `port` should
    /// reach this worker (it listens there). False when another worker has claimed it.
    fn claim_tcp_port(&mut self, _port: u16) -> bool {
        true
    }
    /// Undoes [`Port::claim_tcp_port`].
    fn release_tcp_port(&mut self, _port: u16) {}
    /// Whether frames to local TCP port `port` reach this worker: an active open picks an
    /// ephemeral port for which this holds.
    fn steers_here(&self, _port: u16) -> bool {
        true
    }
    /// The TCP checksum work the device does itself (a NIC's checksum offload); the device
    /// layer does the rest in software.
    fn tcp_checksum_offload(&self) -> TcpChecksumOffload {
        TcpChecksumOffload::default()
    }
    /// Received TCP segments the device found with a wrong checksum, dropped (with
    /// [`TcpChecksumOffload::rx`]); those checked in software are counted by the device layer.
    fn bad_checksums(&self) -> u64 {
        0
    }
}

/// A received frame: in a port's own buffer, which goes back to that port once read, or an
/// owned copy (a frame another worker handed over, one the device layer made).
pub enum Received<F> {
    Port(F),
    Owned(Vec<u8>),
}

impl<F> Received<F> {
    /// The port's buffer, to give back to it; None for an owned copy.
    pub fn into_port(self) -> Option<F> {
        match self {
            Received::Port(f) => Some(f),
            Received::Owned(_) => None,
        }
    }
}

impl<F: Deref<Target = [u8]>> Deref for Received<F> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Received::Port(f) => f,
            Received::Owned(f) => f,
        }
    }
}

/// Which half of TCP checksum work a device takes (each where it offers it and
/// `port.checksum_offload` is on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpChecksumOffload {
    /// It computes the checksum of every TCP segment sent, given the pseudo-header sum in
    /// the field (`tcp_checksum::prepare_for_offload`).
    pub tx: bool,
    /// It has checked the checksum of every TCP segment it delivers, a wrong one dropped.
    pub rx: bool,
}

/// Builds a frame of `len` octets in `scratch` (grown as needed), for a port with no buffer
/// of its own to build it in: `build`'s result, whether to send, and the frame.
pub(crate) fn build_in_scratch<R>(
    scratch: &mut Vec<u8>,
    len: usize,
    build: impl FnOnce(&mut [u8]) -> (R, bool),
) -> (R, bool, &[u8]) {
    if scratch.len() < len {
        scratch.resize(len, 0);
    }
    let (r, send) = build(&mut scratch[..len]);
    (r, send, &scratch[..len])
}
