//! smoltcp's `phy::Device` over a [`Port`]: frames come in by bursts, queued in the port's own
//! buffers until smoltcp has read them (then given back to the port: nothing copied, nothing
//! allocated once warm), and go out through the port, ARP requests paced ([`ArpPacer`]),
//! and each TCP peer's window and resets read on the way in; the ACKs smoltcp makes while
//! receiving wait here while the port is full (`HeldAcks`). TCP checksums the port's device
//! does not check are checked here (not by smoltcp), so a wrong one is counted.

use crate::arp::ArpPacer;
use crate::neighbours::NeighbourKeeper;
use crate::peer_tcp::{sent_flow, FlowKey, PeerTcp};
use crate::port::{build_in_scratch, tcp_checksum, Port, Received, TcpChecksumOffload, RX_BURST};
use rustc_hash::FxHashMap;
use smoltcp::phy::{self, Checksum, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use std::collections::VecDeque;
use std::ops::Deref;

pub struct PortDevice<P: Port> {
    pub port: P,
    /// The IP MTU smoltcp is told: our segment size plus headers, within the port's MTU.
    ip_mtu: usize,
    /// Received frames smoltcp has not taken yet.
    rxq: VecDeque<P::Frame>,
    /// Frames smoltcp has read, given back to the port before its next burst.
    read: Vec<P::Frame>,
    txbuf: Vec<u8>,
    pub arp: ArpPacer,
    /// What the peers of the node's connections said (window, reset), read as smoltcp takes
    /// each frame, so it matches what its sockets have processed.
    pub peers: PeerTcp,
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// The TCP checksum work the port's device does; the rest is done here (receive) or by
    /// smoltcp (transmit).
    offload: TcpChecksumOffload,
    /// Keeps smoltcp's neighbour entries for their real lifetime (see `neighbours.rs`); the
    /// node sets it up, knowing the interface's address.
    pub neighbours: Option<NeighbourKeeper>,
    /// Frames made here for smoltcp (the keeper's ARP replies), taken before the port's.
    local: VecDeque<Vec<u8>>,
    /// Received TCP segments whose checksum was wrong, dropped here (see
    /// [`Port::bad_checksums`] for those the device dropped).
    pub rx_bad_checksum: u64,
    /// The tracked flows smoltcp took segments of since the node last looked, for its ready
    /// list; bounded, with `touched_overflow` saying some were left out.
    pub touched: arrayvec::ArrayVec<crate::peer_tcp::FlowKey, TOUCHED>,
    pub touched_overflow: bool,
    /// A round of smoltcp's egress opened while the port took frames ([`Self::open_round`]):
    /// every socket sends its segment, even past the port's bound.
    round_open: bool,
    /// Times smoltcp found the port not taking frames ([`Port::tx_ready`]) and kept its
    /// segments.
    pub tx_paused: u64,
    /// smoltcp's answers to received segments that met a full port (see [`HeldAcks`]).
    held: HeldAcks,
    /// Answers held so, counted as made (one that replaced an older one included).
    pub acks_held: u64,
}

/// The ACKs smoltcp makes as it takes in a segment (an immediate ACK, a keep-alive's
/// answer) go out through the receive path's token, which no back-pressure holds: smoltcp
/// counts an ACK it made as sent, and one refused would leave the peer waiting for its
/// timer. While the port's queue is full ([`Port::tx_full`]) they wait here instead of being
/// dropped by the port, the latest per connection only: an acknowledgement carries all the
/// earlier ones, so a connection costs one frame here however long the port stays full.
/// Anything the connection sends later carries a newer one and replaces it; those still
/// held go first once the port has room ([`PortDevice::release_held`]).
#[derive(Default)]
struct HeldAcks {
    by_flow: FxHashMap<FlowKey, Vec<u8>>,
}

impl HeldAcks {
    fn hold(&mut self, key: FlowKey, frame: &[u8]) {
        let held = self.by_flow.entry(key).or_default();
        held.clear();
        held.extend_from_slice(frame);
    }

    /// The connection sent a segment: its held ACK says nothing new any more.
    fn superseded(&mut self, key: FlowKey) {
        self.by_flow.remove(&key);
    }
}

/// Bursts a turn's receive step reads at most (`Node::receive`): 4,096 frames, what a
/// turn's egress may hand the port (half the Unix port's queue, [`Port::tx_full`]). A node
/// that read fewer a turn than it sends, with thousands of connections at work both ways,
/// would leave its peer's ACKs queued in the peer's port until every timer ran out (with
/// 10,000 QPs streaming, a bound of 1,024 frames lost connections). It has a price: with
/// 1,024 QPs streaming, the first frames' sockets are out of the cache before the exchange
/// visits them, about 15 % of the message rate against a bound of 256.
pub const RX_BURSTS_PER_TURN: usize = 128;

/// Flows noted per turn at most: one a frame of the turn's bursts.
const TOUCHED: usize = RX_BURSTS_PER_TURN * RX_BURST;

impl<P: Port> PortDevice<P> {
    /// A device whose TCP segments carry at most `mss` octets: smoltcp takes its own MSS
    /// (what it advertises and where it cuts segments) from the MTU it is told, so it is
    /// told `mss` + 40, never more than the port's. Were it told a larger one than the
    /// node's segment size it would merge the node's full-size FPDUs into longer segments,
    /// splitting FPDUs across them (RFC 5044 section 8).
    pub fn new(port: P, arp: ArpPacer, mss: usize) -> PortDevice<P> {
        let frame = port.mtu() + 14;
        PortDevice {
            offload: port.tcp_checksum_offload(),
            neighbours: None,
            local: VecDeque::new(),
            ip_mtu: (mss + 40).min(port.mtu()),
            port,
            rxq: VecDeque::with_capacity(RX_BURST),
            read: Vec::with_capacity(RX_BURST),
            txbuf: vec![0; frame],
            arp,
            peers: PeerTcp::default(),
            rx_frames: 0,
            tx_frames: 0,
            rx_bytes: 0,
            tx_bytes: 0,
            rx_bad_checksum: 0,
            touched: arrayvec::ArrayVec::new(),
            touched_overflow: false,
            round_open: false,
            tx_paused: 0,
            held: HeldAcks::default(),
            acks_held: 0,
        }
    }

    /// Opens one round of smoltcp's egress (one `poll_egress`: a segment from each socket
    /// with something to send, in the set's order) if the port takes frames now; says
    /// whether it did. Outside an open round the device refuses frames as soon as the port
    /// stops taking them, and smoltcp ends its round at the first refusal: the sockets
    /// early in its set would then take whatever room the port makes, round after round,
    /// and the later ones wait. A round either runs whole or does not start, so every
    /// sending connection gets a segment a round, and the port goes past its bound by a
    /// segment per connection at most; with thousands of connections sending that could
    /// overflow the port's queue, and the round ends where the port says it is full
    /// ([`Port::tx_full`]).
    pub fn open_round(&mut self) -> bool {
        self.round_open = self.port.tx_ready();
        if !self.round_open {
            self.tx_paused += 1;
        }
        self.round_open
    }

    /// Sends the ACKs held while the port was full (see `HeldAcks`) while it takes them;
    /// before anything else of TCP's, so that none waits behind a round.
    pub fn release_held(&mut self) {
        if self.held.by_flow.is_empty() {
            return;
        }
        let (port, frames, bytes) = (&mut self.port, &mut self.tx_frames, &mut self.tx_bytes);
        self.held.by_flow.retain(|_, ack| {
            if port.tx_full() {
                return true;
            }
            if port.tx(ack).is_ok() {
                *frames += 1;
                *bytes += ack.len() as u64;
            }
            false
        });
    }

    /// Ends the round [`Self::open_round`] opened.
    pub fn close_round(&mut self) {
        self.round_open = false;
    }

    /// A frame made here for smoltcp to receive before the port's (see `Node::nudge`).
    pub fn push_local(&mut self, frame: Vec<u8>) {
        self.local.push_back(frame);
    }

    /// The frames received from the port that smoltcp has not read yet, in order.
    pub fn received(&self) -> impl Iterator<Item = &[u8]> {
        self.rxq.iter().map(|f| &**f)
    }

    /// Whether received frames wait for smoltcp.
    pub fn has_rx(&self) -> bool {
        !self.rxq.is_empty() || !self.local.is_empty()
    }

    /// The frame smoltcp reads next, if one waits: its flow (`None`: not TCP over IPv4) and
    /// whether it was made here (the neighbour keeper's renewals, the nudges' ACKs) rather
    /// than received.
    pub fn next_rx_flow(&self) -> Option<(Option<FlowKey>, bool)> {
        match self.local.front() {
            Some(f) => Some((FlowKey::of_frame(f), true)),
            None => Some((FlowKey::of_frame(self.rxq.front()?), false)),
        }
    }

    /// The port's next frame for smoltcp; what smoltcp is about to read is noted.
    fn port_frame(&mut self, now: Instant) -> Option<P::Frame> {
        let frame = self.rxq.pop_front()?;
        if let Some(key) = self.peers.observe(&frame, now) {
            if self.touched.last() != Some(&key) && self.touched.try_push(key).is_err() {
                self.touched_overflow = true;
            }
        }
        for ack in self.peers.outbox.drain(..) {
            if self.port.tx(&ack).is_ok() {
                self.tx_frames += 1;
                self.tx_bytes += ack.len() as u64;
            }
        }
        if let Some(k) = &mut self.neighbours {
            k.heard(&frame, now);
        }
        Some(frame)
    }

    /// Renews smoltcp's neighbour entries when they are due (see `neighbours.rs`).
    pub fn keep_neighbours(&mut self, now: Instant) {
        if let Some(k) = &mut self.neighbours {
            let local = &mut self.local;
            k.refresh(now, |frame| local.push_back(frame));
        }
    }

    /// Pulls a burst from the port when the queue is empty. Returns frames taken. One with a
    /// wrong TCP checksum is dropped here (smoltcp would drop it too, but silently).
    pub fn fill(&mut self) -> usize {
        for frame in self.read.drain(..) {
            self.port.recycle(frame);
        }
        if !self.rxq.is_empty() {
            return 0;
        }
        let (rxq, arp) = (&mut self.rxq, &mut self.arp);
        let mut bytes = 0;
        let n = self
            .port
            .rx_burst(RX_BURST, |f| {
                arp.heard(&f);
                bytes += f.len() as u64;
                rxq.push_back(f);
            })
            .unwrap_or(0);
        self.rx_frames += n as u64;
        self.rx_bytes += bytes;
        if !self.offload.rx {
            for _ in 0..self.rxq.len() {
                let Some(frame) = self.rxq.pop_front() else {
                    break;
                };
                if tcp_checksum::tcp_checksum_ok(&frame) {
                    self.rxq.push_back(frame);
                } else {
                    self.rx_bad_checksum += 1;
                    self.port.recycle(frame);
                }
            }
        }
        n
    }
}

/// A frame for smoltcp: the port's, given back once read, or one made here.
pub struct RxToken<'a, F> {
    frame: Received<F>,
    read: &'a mut Vec<F>,
}

pub struct TxToken<'a, P: Port> {
    port: &'a mut P,
    buf: &'a mut Vec<u8>,
    arp: &'a mut ArpPacer,
    peers: &'a mut PeerTcp,
    now: Instant,
    frames: &'a mut u64,
    bytes: &'a mut u64,
    held: &'a mut HeldAcks,
    /// The token of the receive path: smoltcp's answer to the segment it takes in.
    answer: Option<&'a mut u64>,
}

impl<B: Deref<Target = [u8]>> phy::RxToken for RxToken<'_, B> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.frame);
        if let Some(frame) = self.frame.into_port() {
            self.read.push(frame);
        }
        r
    }
}

impl<P: Port> phy::TxToken for TxToken<'_, P> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let (arp, peers, now, held) = (self.arp, self.peers, self.now, self.held);
        if let Some(count) = self.answer.filter(|_| self.port.tx_full()) {
            let (r, send, frame) = build_in_scratch(self.buf, len, |frame| {
                let r = f(frame);
                (r, arp.admits(frame, now) && peers.admits(frame, now))
            });
            match sent_flow(frame) {
                Some((key, true)) if send => {
                    held.hold(key, frame);
                    *count += 1;
                }
                // A RST, or no TCP: to the port, which drops it if it must. A RST ends its
                // connection, and a held ACK sent after it would only draw the peer's RST.
                flow => {
                    if let Some((key, false)) = flow {
                        held.superseded(key);
                    }
                    if send && self.port.tx(frame).is_ok() {
                        *self.frames += 1;
                        *self.bytes += len as u64;
                    }
                }
            }
            return r;
        }
        let watch = !held.by_flow.is_empty();
        let mut flow = None;
        let (r, sent) = self.port.tx_with(len, self.buf, |frame| {
            let r = f(frame);
            let go = arp.admits(frame, now) && peers.admits(frame, now);
            if go && watch {
                flow = sent_flow(frame).map(|(key, _)| key);
            }
            (r, go)
        });
        if let Some(key) = flow {
            held.superseded(key);
        }
        if sent {
            *self.frames += 1;
            *self.bytes += len as u64;
        }
        // What the device layer made of this frame instead (the new part of a resend
        // not due) goes at once, in its place.
        for cut in peers.outbox.drain(..) {
            if self.port.tx(&cut).is_ok() {
                *self.frames += 1;
                *self.bytes += cut.len() as u64;
            }
        }
        r
    }
}

impl<P: Port> phy::Device for PortDevice<P> {
    type RxToken<'a>
        = RxToken<'a, P::Frame>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a, P>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<(RxToken<'_, P::Frame>, TxToken<'_, P>)> {
        let frame = if let Some(frame) = self.local.pop_front() {
            Received::Owned(frame)
        } else {
            Received::Port(self.port_frame(now)?)
        };
        Some((
            RxToken {
                frame,
                read: &mut self.read,
            },
            TxToken {
                port: &mut self.port,
                buf: &mut self.txbuf,
                arp: &mut self.arp,
                peers: &mut self.peers,
                now,
                frames: &mut self.tx_frames,
                bytes: &mut self.tx_bytes,
                held: &mut self.held,
                answer: Some(&mut self.acks_held),
            },
        ))
    }

    fn transmit(&mut self, now: Instant) -> Option<TxToken<'_, P>> {
        // smoltcp keeps a segment the device refuses, untimed, and sends it when asked again.
        // An open round ends early only where it would overflow the port's queue.
        if !self.port.tx_ready() && (!self.round_open || self.port.tx_full()) {
            self.tx_paused += 1;
            return None;
        }
        Some(TxToken {
            port: &mut self.port,
            buf: &mut self.txbuf,
            arp: &mut self.arp,
            peers: &mut self.peers,
            now,
            frames: &mut self.tx_frames,
            bytes: &mut self.tx_bytes,
            held: &mut self.held,
            answer: None,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.ip_mtu + 14;
        caps.max_burst_size = Some(RX_BURST);
        // smoltcp never checks TCP checksums: the device does, or `receive` does. It
        // computes them unless the device does.
        caps.checksum.tcp = if self.offload.tx {
            Checksum::None
        } else {
            Checksum::Tx
        };
        caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arp::tests::arp;
    use crate::port::memory::MemoryPort;
    use smoltcp::phy::{Device, RxToken as _};
    use smoltcp::time::Duration;

    /// A memory port that records the buffers given back to it.
    struct Recycling {
        inner: MemoryPort,
        given_back: Vec<*const u8>,
    }

    impl Port for Recycling {
        type Frame = Vec<u8>;
        fn mac(&self) -> [u8; 6] {
            self.inner.mac()
        }
        fn mtu(&self) -> usize {
            self.inner.mtu()
        }
        fn rx_burst<F: FnMut(Vec<u8>)>(&mut self, max: usize, f: F) -> std::io::Result<usize> {
            self.inner.rx_burst(max, f)
        }
        fn recycle(&mut self, frame: Vec<u8>) {
            self.given_back.push(frame.as_ptr());
        }
        fn tx(&mut self, frame: &[u8]) -> std::io::Result<()> {
            self.inner.tx(frame)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn smoltcp_reads_the_ports_buffers_and_they_go_back_to_it() {
        let (mut a, b) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
        for i in 0..3u8 {
            a.tx(&[i; 60]).unwrap();
        }
        let port = Recycling {
            inner: b,
            given_back: Vec::new(),
        };
        let mut dev = PortDevice::new(port, ArpPacer::new(Duration::ZERO), 1460);
        assert_eq!(dev.fill(), 3);
        let mut seen = Vec::new();
        let mut read_one = |dev: &mut PortDevice<Recycling>| {
            let (rx, _) = dev.receive(Instant::from_millis(0)).expect("a frame");
            rx.consume(|f| seen.push((f.as_ptr(), f[0])));
        };
        read_one(&mut dev);
        read_one(&mut dev);
        assert!(
            dev.port.given_back.is_empty(),
            "given back before the next burst"
        );
        a.tx(&[9; 60]).unwrap();
        assert_eq!(dev.fill(), 0, "no burst while a frame waits for smoltcp");
        assert_eq!(dev.port.given_back.len(), 2);
        read_one(&mut dev);
        assert_eq!(dev.fill(), 1);
        read_one(&mut dev);
        assert!(dev.receive(Instant::from_millis(0)).is_none());
        assert_eq!(dev.fill(), 0);
        let order: Vec<u8> = seen.iter().map(|s| s.1).collect();
        assert_eq!(order, [0, 1, 2, 9]);
        let read: Vec<*const u8> = seen.iter().map(|s| s.0).collect();
        assert_eq!(
            dev.port.given_back, read,
            "smoltcp read the port's own buffers"
        );
    }

    /// A port whose device checks no TCP checksum: the device layer checks each one and
    /// drops a wrong one, counted, its buffer given back like any read frame; smoltcp is told
    /// to compute checksums on transmit and check none.
    #[test]
    fn a_wrong_tcp_checksum_is_dropped_and_counted_before_smoltcp() {
        use crate::port::tcp_checksum::tests::segment;
        let (mut a, b) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
        let good = segment(b"an FPDU", 5);
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 1;
        let arp = arp(1, [10, 0, 0, 2]);
        for f in [&bad, &good, &bad, &arp] {
            a.tx(f).unwrap();
        }
        let port = Recycling {
            inner: b,
            given_back: Vec::new(),
        };
        let mut dev = PortDevice::new(port, ArpPacer::new(Duration::ZERO), 1460);
        let caps = phy::Device::capabilities(&dev);
        assert!(caps.checksum.tcp.tx() && !caps.checksum.tcp.rx());
        assert_eq!(dev.fill(), 4);
        let mut passed = Vec::new();
        while let Some((rx, _)) = dev.receive(Instant::from_millis(0)) {
            rx.consume(|f| passed.push(f.to_vec()));
        }
        assert_eq!(passed, [good, arp]);
        assert_eq!(dev.rx_bad_checksum, 2);
        dev.fill();
        assert_eq!(
            dev.port.given_back.len(),
            4,
            "every buffer back to the port"
        );
    }

    /// A port that says when its queue is full, and keeps what it is handed.
    struct Filling {
        full: bool,
        sent: Vec<Vec<u8>>,
    }

    impl Port for Filling {
        type Frame = Vec<u8>;
        fn mac(&self) -> [u8; 6] {
            [2, 0, 0, 0, 0, 1]
        }
        fn mtu(&self) -> usize {
            1500
        }
        fn rx_burst<F: FnMut(Vec<u8>)>(&mut self, _: usize, _: F) -> std::io::Result<usize> {
            Ok(0)
        }
        fn tx(&mut self, frame: &[u8]) -> std::io::Result<()> {
            self.sent.push(frame.to_vec());
            Ok(())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn tx_ready(&self) -> bool {
            !self.full
        }
        fn tx_full(&self) -> bool {
            self.full
        }
    }

    /// A segment of ours to the peer's `port`, acknowledging `ack`.
    fn ours(port: u16, ack: u32, control: smoltcp::wire::TcpControl, payload: &[u8]) -> Vec<u8> {
        let hosts = ([10, 0, 0, 1], [10, 0, 0, 2]);
        crate::peer_tcp::test_segment(hosts, (4791, port), control, 1, Some(ack), payload)
    }

    /// smoltcp's answer to a received frame (its receive path's token), as `frame`.
    fn answer(dev: &mut PortDevice<Filling>, frame: &[u8]) {
        dev.push_local(vec![0; 60]);
        let (rx, tx) = dev.receive(Instant::from_millis(0)).expect("a frame");
        rx.consume(|_| ());
        phy::TxToken::consume(tx, frame.len(), |b| b.copy_from_slice(frame));
    }

    /// The ACKs smoltcp answers received segments with, which it counts as sent, are not
    /// dropped by a full port: they wait, the latest per connection (an acknowledgement is
    /// cumulative, RFC 9293 section 3.4), and go first once the port has room; a segment
    /// the connection sends meanwhile carries a newer one and replaces it. A RST goes to
    /// the port at once, and its connection's held ACK no more.
    #[test]
    fn answers_that_meet_a_full_port_wait_the_latest_per_connection() {
        use smoltcp::wire::TcpControl;
        let port = Filling {
            full: true,
            sent: Vec::new(),
        };
        let mut dev = PortDevice::new(port, ArpPacer::new(Duration::ZERO), 1460);
        let (a100, a200, b50) = (
            ours(5000, 100, TcpControl::None, b""),
            ours(5000, 200, TcpControl::None, b""),
            ours(5001, 50, TcpControl::None, b""),
        );
        let rst = ours(5002, 1, TcpControl::Rst, b"");
        for f in [&a100, &a200, &b50, &rst] {
            answer(&mut dev, f);
        }
        assert_eq!(dev.port.sent, [rst], "only the RST went");
        assert_eq!((dev.acks_held, dev.held.by_flow.len()), (3, 2));

        dev.release_held();
        assert_eq!(dev.port.sent.len(), 1, "the port is still full");
        dev.port.full = false;
        dev.release_held();
        let mut sent = dev.port.sent[1..].to_vec();
        sent.sort();
        let mut latest = vec![a200, b50];
        latest.sort();
        assert_eq!(sent, latest, "the latest ACK of each connection");
        assert_eq!(dev.held.by_flow.len(), 0);
        assert_eq!(dev.tx_frames, 3);

        // Held, then replaced by the connection's next segment.
        dev.port.full = true;
        answer(&mut dev, &ours(5000, 300, TcpControl::None, b""));
        assert_eq!(dev.held.by_flow.len(), 1);
        dev.port.full = false;
        let data = ours(5000, 300, TcpControl::Psh, b"an FPDU");
        let tx = phy::Device::transmit(&mut dev, Instant::from_millis(0)).expect("room");
        phy::TxToken::consume(tx, data.len(), |b| b.copy_from_slice(&data));
        assert_eq!(dev.held.by_flow.len(), 0);
        dev.release_held();
        assert_eq!(
            dev.port.sent.last(),
            Some(&data),
            "nothing after the segment"
        );
        assert_eq!(dev.port.sent.len(), 4);

        // Held, then the connection reset while the port is still full: the RST goes and
        // the ACK before it does not follow it.
        dev.port.full = true;
        answer(&mut dev, &ours(5001, 60, TcpControl::None, b""));
        assert_eq!(dev.held.by_flow.len(), 1);
        let reset = ours(5001, 60, TcpControl::Rst, b"");
        answer(&mut dev, &reset);
        assert_eq!(
            dev.held.by_flow.len(),
            0,
            "the RST took the held ACK's place"
        );
        dev.port.full = false;
        dev.release_held();
        assert_eq!(dev.port.sent.last(), Some(&reset), "nothing after the RST");
        assert_eq!(dev.port.sent.len(), 5);
    }
}
