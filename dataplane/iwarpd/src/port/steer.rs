//! Steering: several poll-mode workers share one port, each owning its own TCP connections
//! end to end (smoltcp interface, sockets, engine QPs), so every frame must reach the worker
//! that owns its connection.
//!
//! The rule, the same on every worker and stateless but for one table:
//! - TCP to a local port a worker listens on goes to that worker (the listener table, set
//!   when it listens, like a NIC's flow-director rule);
//! - TCP to an ephemeral local port (from [`EPHEMERAL`] up) goes to `port % workers`: a
//!   worker opening a connection picks a local port that steers back to itself (as
//!   user-space stacks on RSS NICs pick one whose hash lands on their queue);
//! - ARP goes to every worker (each keeps its own neighbour cache; only worker 0 answers
//!   requests, so the peer sees one reply);
//! - anything else goes to worker 0 (ICMP; TCP to a port nobody owns, which worker 0's
//!   stack answers with a reset, as one stack would).
//!
//! A port with one queue (the Unix and TAP ports) is received by worker 0, which hands other
//! workers' frames over lock-free channels; every worker transmits on its own handle. A
//! worker that sleeps says so first (the "needs wake-up" flag of `iwarp_abi::wake`, per
//! worker), and only then do the others ring its eventfd: handing frames to a running worker
//! costs no system call. With a NIC queue per worker the same rule
//! would only move the frames the NIC's hash placed elsewhere.

use super::{Port, Received};
use smoltcp::wire::ETHERNET_HEADER_LEN;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// The first ephemeral TCP port (IANA's dynamic range).
pub const EPHEMERAL: u16 = 49152;
/// Frames a worker's inbox holds before the forwarder drops (as a full NIC queue would).
const INBOX: usize = 4096;

/// Where a received frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    Worker(usize),
    All,
}

/// Whether a worker sleeps, on a cache line of its own (the forwarders read it each burst).
#[repr(align(64))]
#[derive(Default)]
struct Asleep(AtomicBool);

/// What the workers of one port share: the listener table and each worker's inbox.
pub struct Steering {
    workers: usize,
    /// Local TCP port → listening worker + 1 (0: none).
    listeners: Box<[AtomicU8]>,
    inboxes: Vec<(SyncSender<Vec<u8>>, OwnedFd)>,
    asleep: Box<[Asleep]>,
}

/// One worker's end of its inbox.
pub struct Lane {
    frames: Receiver<Vec<u8>>,
    event: OwnedFd,
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Steering {
    /// Steering for `workers` workers (1 to 255), with each worker's lane in order.
    pub fn new(workers: usize) -> io::Result<(Arc<Steering>, Vec<Lane>)> {
        if !(1..=255).contains(&workers) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "1 to 255 workers",
            ));
        }
        let mut inboxes = Vec::new();
        let mut lanes = Vec::new();
        for _ in 0..workers {
            let (tx, rx) = sync_channel(INBOX);
            let event = eventfd()?;
            inboxes.push((tx, event.try_clone()?));
            lanes.push(Lane { frames: rx, event });
        }
        let listeners = (0..=u16::MAX as usize).map(|_| AtomicU8::new(0)).collect();
        Ok((
            Arc::new(Steering {
                workers,
                listeners,
                inboxes,
                asleep: (0..workers).map(|_| Asleep::default()).collect(),
            }),
            lanes,
        ))
    }

    /// One view per worker of a port whose queues are `queues` (one per worker, in order):
    /// with `each_receives`, every worker receives its own queue (a device with a queue pair
    /// per worker); otherwise only worker 0 does (one socket, the others' handles only send).
    pub fn share<P: Port>(queues: Vec<P>, each_receives: bool) -> io::Result<Vec<SteeredPort<P>>> {
        let (steering, lanes) = Steering::new(queues.len())?;
        Ok(queues
            .into_iter()
            .zip(lanes)
            .enumerate()
            .map(|(w, (q, lane))| {
                let receives = each_receives || w == 0;
                SteeredPort::new(q, receives, w, Arc::clone(&steering), lane)
            })
            .collect())
    }

    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The worker frames to local TCP port `port` go to.
    pub fn tcp_owner(&self, port: u16) -> usize {
        match self.listeners[port as usize].load(Ordering::Acquire) {
            0 if port >= EPHEMERAL => port as usize % self.workers,
            0 => 0,
            w => w as usize - 1,
        }
    }

    /// Where `frame` (Ethernet) goes.
    pub fn dest(&self, frame: &[u8]) -> Dest {
        if self.workers == 1 || frame.len() < ETHERNET_HEADER_LEN {
            return Dest::Worker(0);
        }
        match [frame[12], frame[13]] {
            [0x08, 0x06] => Dest::All,
            [0x08, 0x00] => match tcp_dst_port(&frame[ETHERNET_HEADER_LEN..]) {
                Some(port) => Dest::Worker(self.tcp_owner(port)),
                None => Dest::Worker(0),
            },
            _ => Dest::Worker(0),
        }
    }

    /// Worker `me` listens on `port`: its frames come to `me`. False when another worker
    /// listens there already.
    pub fn claim(&self, me: usize, port: u16) -> bool {
        let slot = &self.listeners[port as usize];
        match slot.compare_exchange(0, me as u8 + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(w) => w as usize == me + 1,
        }
    }

    /// Worker `me` stops listening on `port`.
    pub fn release(&self, me: usize, port: u16) {
        let _ = self.listeners[port as usize].compare_exchange(
            me as u8 + 1,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Hands `frame` to worker `w`'s inbox; false when it is full (the frame is lost, and
    /// TCP retransmits it).
    fn forward(&self, w: usize, frame: &[u8]) -> bool {
        match self.inboxes[w].0.try_send(frame.to_vec()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Wakes worker `w` if it sleeps (its lane's descriptor becomes readable), after frames
    /// were handed to it. The fence pairs with the one in `set_asleep`: either the worker's
    /// last look before sleeping finds the frames, or this sees it asleep and rings.
    fn ring(&self, w: usize) {
        fence(Ordering::SeqCst);
        if !self.asleep[w].0.load(Ordering::Relaxed) {
            return;
        }
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 octets from a live buffer to an eventfd we hold; a full counter
        // (EAGAIN) already means "readable".
        let _ = unsafe { libc::write(self.inboxes[w].1.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// The destination port of an IPv4 packet's TCP segment; `None` for anything else, a
/// fragment past the first, or a packet too short to tell.
fn tcp_dst_port(ip: &[u8]) -> Option<u16> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let frag_offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
    if ihl < 20 || frag_offset != 0 {
        return None;
    }
    let ports = ip.get(ihl..ihl + 4)?;
    Some(u16::from_be_bytes([ports[2], ports[3]]))
}

/// Whether `frame` is an ARP reply.
fn is_arp_reply(frame: &[u8]) -> bool {
    frame.len() >= 22 && frame[12..14] == [0x08, 0x06] && frame[20..22] == [0, 2]
}

/// Whether worker `me` keeps `frame` off the wire: worker 0 answers ARP for the port, so
/// the peer sees one reply per request.
fn held_back(me: usize, frame: &[u8]) -> bool {
    me != 0 && is_arp_reply(frame)
}

/// One worker's view of a shared port: its own queue (which may or may not receive), its
/// inbox, and the steering rule.
pub struct SteeredPort<P: Port> {
    queue: P,
    /// Frames of this burst handed to other workers, given back to the queue after it.
    spent: Vec<P::Frame>,
    receives: bool,
    me: usize,
    steering: Arc<Steering>,
    lane: Lane,
    /// The last burst emptied the inbox ([`Port::rx_drained`]).
    lane_drained: bool,
    /// Frames this worker handed to others, and lost to a full inbox.
    pub forwarded: u64,
    pub inbox_drops: u64,
}

impl<P: Port> SteeredPort<P> {
    /// Worker `me`'s port: `queue` is what it transmits on, and receives from when
    /// `receives` (a port with one queue: worker 0 only).
    pub fn new(
        queue: P,
        receives: bool,
        me: usize,
        steering: Arc<Steering>,
        lane: Lane,
    ) -> SteeredPort<P> {
        SteeredPort {
            queue,
            spent: Vec::new(),
            receives,
            me,
            steering,
            lane,
            lane_drained: false,
            forwarded: 0,
            inbox_drops: 0,
        }
    }

    pub fn queue(&self) -> &P {
        &self.queue
    }
}

impl<P: Port> Port for SteeredPort<P> {
    fn mac(&self) -> [u8; 6] {
        self.queue.mac()
    }

    fn mtu(&self) -> usize {
        self.queue.mtu()
    }

    /// From this worker's own queue, or handed over by another worker (a copy, the other's
    /// buffer being its queue's).
    type Frame = Received<P::Frame>;

    fn rx_burst<F: FnMut(Self::Frame)>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.lane.frames.try_recv() {
                Ok(frame) => {
                    f(Received::Owned(frame));
                    n += 1;
                }
                Err(_) => break,
            }
        }
        self.lane_drained = n < max;
        if !self.receives || n == max {
            return Ok(n);
        }
        let (me, steering, spent) = (self.me, &self.steering, &mut self.spent);
        let (mut forwarded, mut drops, mut rung) = (0u64, 0u64, 0u64);
        let mut hand = |w: usize, frame: &[u8]| {
            if steering.forward(w, frame) {
                forwarded += 1;
                rung |= 1 << w;
            } else {
                drops += 1;
            }
        };
        let got = self
            .queue
            .rx_burst(max - n, |frame| match steering.dest(&frame) {
                Dest::Worker(w) if w == me => f(Received::Port(frame)),
                Dest::Worker(w) => {
                    hand(w, &frame);
                    spent.push(frame);
                }
                Dest::All => {
                    for w in (0..steering.workers()).filter(|&w| w != me) {
                        hand(w, &frame);
                    }
                    f(Received::Port(frame));
                }
            })?;
        for frame in self.spent.drain(..) {
            self.queue.recycle(frame);
        }
        for w in (0..steering.workers()).filter(|w| rung & (1 << w) != 0) {
            steering.ring(w);
        }
        self.forwarded += forwarded;
        self.inbox_drops += drops;
        Ok(n + got)
    }

    fn recycle(&mut self, frame: Self::Frame) {
        if let Some(frame) = frame.into_port() {
            self.queue.recycle(frame)
        }
    }

    fn rx_drained(&self) -> bool {
        // Frames handed to other workers are not counted in a burst: the queue says for
        // itself whether it was emptied.
        self.lane_drained && (!self.receives || self.queue.rx_drained())
    }

    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        if held_back(self.me, frame) {
            return Ok(());
        }
        self.queue.tx(frame)
    }

    fn tx_with<R>(
        &mut self,
        len: usize,
        scratch: &mut Vec<u8>,
        build: impl FnOnce(&mut [u8]) -> (R, bool),
    ) -> (R, bool) {
        let me = self.me;
        self.queue.tx_with(len, scratch, |frame| {
            let (r, send) = build(frame);
            (r, send && !held_back(me, frame))
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.queue.flush()
    }

    fn tx_ready(&self) -> bool {
        self.queue.tx_ready()
    }

    fn tx_full(&self) -> bool {
        self.queue.tx_full()
    }

    fn dropped(&self) -> u64 {
        self.queue.dropped() + self.inbox_drops
    }

    fn wait_fd(&self) -> Option<RawFd> {
        if self.receives {
            // Worker 0 of a one-queue port: nobody hands it frames, the queue wakes it.
            self.queue.wait_fd()
        } else {
            // Its frames come through the inbox; the queue only says whether it has frames
            // to send that need polling.
            self.queue.wait_fd().map(|_| self.lane.event.as_raw_fd())
        }
    }

    fn inbox_fd(&self) -> Option<RawFd> {
        // A worker that receives a queue of its own may still be handed frames that landed
        // on another's (a port without one queue per worker hands none to worker 0, which
        // then wakes for nothing at worst).
        self.receives.then(|| self.lane.event.as_raw_fd())
    }

    fn set_asleep(&mut self, asleep: bool) {
        self.steering.asleep[self.me]
            .0
            .store(asleep, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !asleep {
            // Forwarders ring only while this worker sleeps, so the eventfd can only have
            // been written since it said so: reset it on waking, not on every burst (a system
            // call per turn). A ring from a forwarder that still saw it asleep may land after
            // this and cost one spurious wake-up; none is lost (frames handed over while it
            // was asleep rang, and its next look finds them).
            let mut count = [0u8; 8];
            // SAFETY: reads at most 8 octets into a live buffer from our non-blocking eventfd.
            let _ =
                unsafe { libc::read(self.lane.event.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        }
    }

    fn claim_tcp_port(&mut self, port: u16) -> bool {
        self.steering.claim(self.me, port)
    }

    fn release_tcp_port(&mut self, port: u16) {
        self.steering.release(self.me, port)
    }

    fn steers_here(&self, port: u16) -> bool {
        self.steering.tcp_owner(port) == self.me
    }

    fn tcp_checksum_offload(&self) -> super::TcpChecksumOffload {
        // Frames handed over come from another worker's queue of the same device, checked
        // there as this queue's are.
        self.queue.tcp_checksum_offload()
    }

    fn bad_checksums(&self) -> u64 {
        self.queue.bad_checksums()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::memory::MemoryPort;

    /// An Ethernet + IPv4 + TCP header to local port `dst`.
    fn tcp_frame(dst: u16) -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 6;
        f[34..36].copy_from_slice(&7000u16.to_be_bytes());
        f[36..38].copy_from_slice(&dst.to_be_bytes());
        f
    }

    fn arp(op: u8) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f[21] = op;
        f
    }

    #[test]
    fn the_rule_sends_each_frame_to_its_owner() {
        let (s, _lanes) = Steering::new(4).unwrap();
        assert_eq!(s.dest(&tcp_frame(49153)), Dest::Worker(1));
        assert_eq!(s.dest(&tcp_frame(49155)), Dest::Worker(3));
        assert_eq!(s.dest(&tcp_frame(7174)), Dest::Worker(0), "nobody listens");
        assert!(s.claim(2, 7174));
        assert!(!s.claim(1, 7174), "worker 2 has it");
        assert!(s.claim(2, 7174), "a second claim by the owner is fine");
        assert_eq!(s.dest(&tcp_frame(7174)), Dest::Worker(2));
        s.release(1, 7174);
        assert_eq!(
            s.dest(&tcp_frame(7174)),
            Dest::Worker(2),
            "not 1's to release"
        );
        s.release(2, 7174);
        assert_eq!(s.dest(&tcp_frame(7174)), Dest::Worker(0));
        assert_eq!(s.dest(&arp(1)), Dest::All);
        // A fragment past the first carries no TCP header: worker 0.
        let mut frag = tcp_frame(49153);
        frag[20] = 0x00;
        frag[21] = 0x10;
        assert_eq!(s.dest(&frag), Dest::Worker(0));
        let mut udp = tcp_frame(49153);
        udp[23] = 17;
        assert_eq!(s.dest(&udp), Dest::Worker(0));
        assert_eq!(s.dest(&[0u8; 10]), Dest::Worker(0), "runt");
        let mut short = tcp_frame(49153);
        short.truncate(36);
        assert_eq!(s.dest(&short), Dest::Worker(0), "no room for the ports");
    }

    #[test]
    fn worker_0_hands_frames_over_and_wakes_the_owner() {
        let (wire, queue0) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
        let (mut other, queue1) = MemoryPort::pair([2, 0, 0, 0, 0, 3], [2, 0, 0, 0, 0, 2], 1500);
        // One queue receives (worker 0's), as on a port with one socket.
        let mut views = Steering::share(vec![queue0, queue1], false).unwrap();
        let mut w1 = views.pop().unwrap();
        let mut w0 = views.pop().unwrap();
        assert!(w1.steers_here(49153) && !w1.steers_here(49152));
        let mut wire = wire;
        for f in [tcp_frame(49153), tcp_frame(49152), arp(1)] {
            wire.tx(&f).unwrap();
        }
        wire.flush().unwrap();
        let readable = |fd: RawFd| {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the call.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        // (The memory port has no descriptor, so `wait_fd` says "poll"; the inbox has one.)
        let w1_fd = w1.lane.event.as_raw_fd();
        assert!(!readable(w1_fd));
        // Worker 1 is about to sleep: frames handed to it now ring its inbox.
        w1.set_asleep(true);
        let mut at0 = Vec::new();
        assert_eq!(w0.rx_burst(32, |f| at0.push(f.to_vec())).unwrap(), 3);
        assert_eq!(at0, [tcp_frame(49152), arp(1)]);
        assert_eq!(
            w0.forwarded, 2,
            "the segment to 49153 and a copy of the ARP"
        );
        assert!(readable(w1_fd), "worker 1 was rung");
        let mut at1 = Vec::new();
        assert_eq!(w1.rx_burst(32, |f| at1.push(f.to_vec())).unwrap(), 2);
        assert_eq!(at1, [tcp_frame(49153), arp(1)]);
        // Awake again: the wake-up is consumed, and frames are handed over without a ring
        // (no system call for the forwarder).
        w1.set_asleep(false);
        assert!(!readable(w1_fd), "the wake-up was consumed");
        wire.tx(&tcp_frame(49155)).unwrap();
        wire.flush().unwrap();
        assert_eq!(w0.rx_burst(32, |_| {}).unwrap(), 1);
        assert!(!readable(w1_fd), "a running worker was rung");
        assert_eq!(w1.rx_burst(32, |_| {}).unwrap(), 1, "but it has the frame");
        // Only worker 0 answers ARP requests; any worker may ask.
        w1.tx(&arp(2)).unwrap();
        w1.tx(&arp(1)).unwrap();
        w1.flush().unwrap();
        let mut sent1 = Vec::new();
        other.rx_burst(32, |f| sent1.push(f.to_vec())).unwrap();
        assert_eq!(sent1, [arp(1)]);
        // The same for frames built in place (what smoltcp's transmit uses).
        let mut scratch = Vec::new();
        for op in [2, 1] {
            let built = |f: &mut [u8]| {
                f.copy_from_slice(&arp(op));
                ((), true)
            };
            let ((), sent) = w1.tx_with(42, &mut scratch, built);
            assert_eq!(sent, op == 1, "ARP op {op}");
        }
        w1.flush().unwrap();
        let mut sent1 = Vec::new();
        other.rx_burst(32, |f| sent1.push(f.to_vec())).unwrap();
        assert_eq!(sent1, [arp(1)]);
        w0.tx(&arp(2)).unwrap();
        w0.flush().unwrap();
        let mut sent0 = Vec::new();
        wire.rx_burst(32, |f| sent0.push(f.to_vec())).unwrap();
        assert_eq!(sent0, [arp(2)]);
    }

    /// A forwarder hands 20 000 frames to a worker that sleeps whenever it has seen
    /// everything, with no timeout short enough to hide a lost wake-up (a lost one leaves it
    /// asleep for 5 s, and the test fails). The forwarder keeps at most a quarter of the
    /// inbox unread: a worker descheduled while it ran on would otherwise find frames
    /// dropped at the full inbox, and wait for them as for a lost wake-up.
    #[test]
    fn no_handed_frame_is_left_asleep() {
        use std::sync::atomic::AtomicUsize;
        const N: usize = 20_000;
        let (mut wire, queue0) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
        let (_other, queue1) = MemoryPort::pair([2, 0, 0, 0, 0, 3], [2, 0, 0, 0, 0, 2], 1500);
        let mut views = Steering::share(vec![queue0, queue1], false).unwrap();
        let mut w1 = views.pop().unwrap();
        let mut w0 = views.pop().unwrap();
        let read = Arc::new(AtomicUsize::new(0));
        let r = read.clone();
        let forwarder = std::thread::spawn(move || {
            for i in 0..N {
                while i - r.load(Ordering::Acquire) >= INBOX / 4 {
                    std::thread::yield_now();
                }
                wire.tx(&tcp_frame(49153)).unwrap();
                wire.flush().unwrap();
                while w0.rx_burst(32, |_| {}).unwrap() == 0 {}
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
            w0.dropped()
        });
        let fd = w1.lane.event.as_raw_fd();
        let (mut seen, mut sleeps) = (0, 0);
        while seen < N {
            let n = w1.rx_burst(32, |_| {}).unwrap();
            if n > 0 {
                seen += n;
                read.store(seen, Ordering::Release);
                continue;
            }
            w1.set_asleep(true);
            let n = w1.rx_burst(32, |_| {}).unwrap();
            if n > 0 {
                seen += n;
                read.store(seen, Ordering::Release);
                w1.set_asleep(false);
                continue;
            }
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the call.
            let rang = unsafe { libc::poll(&mut p, 1, 5000) } == 1;
            assert!(
                rang,
                "asleep with {seen} of {N} frames seen: a wake-up was lost"
            );
            w1.set_asleep(false);
            sleeps += 1;
        }
        assert_eq!(forwarder.join().unwrap(), 0, "frames dropped");
        assert!(
            sleeps > 0,
            "the worker never slept: the test proved nothing"
        );
    }
}
