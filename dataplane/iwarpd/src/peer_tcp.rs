//! What each TCP peer's segments say that smoltcp keeps to itself: the largest segment it
//! takes, the receive window it advertises, and whether it reset the connection.
//!
//! The segment size. smoltcp sends segments no larger than the MSS the peer's SYN named (536
//! octets when it named none), which may be below our own (a peer behind a smaller MTU, a
//! tunnel). An FPDU larger than that would be cut in two, so the node bounds the
//! connection's FPDUs by the smaller of the two.
//!
//! The window. smoltcp cuts a segment at the right edge of the peer's window. When the node
//! has queued more than the window holds, the last segment carries part of an FPDU and the
//! rest follows in another segment: an FPDU split across segments, which RFC 5044 section 8
//! forbids a sender that knows FPDU boundaries to do. Linux peers (siw) advertise about
//! 64 KiB at first, less than the node's own in-flight bound. So the device reads the window
//! from every segment the peer sends (the scale from the peer's SYN, the window field of
//! later segments) and the node queues an FPDU only when the window takes it whole.
//!
//! The reset. A socket the peer reset and one closed by FIN exchange both end in smoltcp's
//! Closed state; the RST seen here tells the node which, so the control plane and the
//! application hear "reset" and not "graceful" (smoltcp validates the RST itself; one that
//! does not close the socket changes nothing, since a graceful end is seen before Closed).
//!
//! Our own side. What smoltcp sends is read on the way out too: each adopted connection's
//! [`Sender`] (congestion window, retransmission timer, SACK scoreboard, see
//! `node/cc/sender.rs`) sees both directions and may hold back a resend; SYNs smoltcp
//! repeats are let through with an exponential back-off in real time ([`SYN_RTO`]) instead
//! of its dilated millisecond.
//!
//! Only connections the node adopts are tracked, so a flood of SYNs costs a fixed ring of
//! slots and nothing more.

use crate::node::cc::sender::{AckInfo, SendCounters, Sender, Verdict};
use rustc_hash::FxHashMap;
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpOption, TcpPacket, TcpSeqNumber,
};
use std::time::Duration;

/// The first wait before a SYN (or SYN-ACK) is sent again, doubled for each repeat (RFC 6298
/// section 5.5). RFC 6298 section 2.1 asks 1 s before any RTT is known; a fifth of it still
/// leaves a dropped SYN several tries within the 2 s user timeout, and a peer whose listen
/// backlog is full a rest between them (Linux answers such a SYN storm with SYN cookies).
pub const SYN_RTO: Duration = Duration::from_millis(200);
/// Outgoing SYNs remembered for their back-off.
const SYN_TX_SLOTS: usize = 64;

/// SYNs remembered until their connection is adopted; a later SYN takes the oldest slot.
const SYN_SLOTS: usize = 256;

/// The MSS of a peer whose SYN carries no MSS option (IPv4, RFC 9293 section 3.7.1).
const DEFAULT_MSS: u16 = 536;

/// A connection as its peer's segments name it: our port, the peer's address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey(u64);

impl FlowKey {
    pub fn new(local_port: u16, peer_ip: [u8; 4], peer_port: u16) -> FlowKey {
        FlowKey(
            u64::from(local_port) << 48
                | u64::from(peer_port) << 32
                | u64::from(u32::from_be_bytes(peer_ip)),
        )
    }
}

/// What the peer's SYN said (window scale, MSS), what it last said about its window, and
/// whether it reset the connection; our sending side, once adopted.
#[derive(Debug, Clone)]
struct Flow {
    /// The shift of the peer's window field (RFC 7323); zero without the option.
    scale: u8,
    /// The MSS option of the peer's SYN (RFC 9293 section 3.7.1: 536 without one).
    mss: u16,
    /// The acknowledgement number the window counts from; none yet after a bare SYN (the
    /// active opener's, whose acknowledgement field means nothing), so that the first ACK
    /// is taken whatever its number.
    ack: Option<TcpSeqNumber>,
    /// Octets the peer takes beyond `ack`.
    window: usize,
    /// The peer sent a RST.
    reset: bool,
    sender: Option<Box<Sender>>,
    /// The peer's latest segment as a pure ACK (headers only, sequence number past its
    /// data): what [`PeerTcp::duplicate_acks`] repeats.
    last_ack: Vec<u8>,
    /// Segments received from the peer: the node watches it move to tell a live peer from
    /// a dead one (see [`PeerTcp::heard`]).
    heard: u64,
}

/// A SYN we sent: when it may go again, and the wait after that.
#[derive(Debug, Clone, Copy)]
struct SynTx {
    key: FlowKey,
    /// The SYN's sequence number: another one is a new attempt on the same ports.
    isn: u32,
    next: Duration,
    wait: Duration,
}

#[derive(Default)]
pub struct PeerTcp {
    syns: Vec<(FlowKey, Flow)>,
    next_syn: usize,
    flows: FxHashMap<FlowKey, Flow>,
    syn_tx: Vec<SynTx>,
    /// smoltcp's clock runs this many times faster than real time (see `clock.rs`); 0 or 1:
    /// not dilated.
    dilation: u64,
    /// Counters of connections no longer tracked.
    retired: SendCounters,
    /// Repeated SYNs held back.
    pub syns_held: u64,
}

/// The real time of smoltcp's `now` on a clock dilated `dilation` times.
fn real(now: Instant, dilation: u64) -> Duration {
    Duration::from_micros(now.total_micros().max(0) as u64 / dilation.max(1))
}

impl PeerTcp {
    /// Sets the dilation of the clock the `now`s handed in run on.
    pub fn set_dilation(&mut self, dilation: u64) {
        self.dilation = dilation;
    }

    /// Reads the window of a received frame (Ethernet, IPv4, TCP) at `now` (smoltcp's time),
    /// and hands what it acknowledges to the connection's sender; anything else, or anything
    /// too short to hold what its headers claim, is ignored. Returns the frame's flow when it
    /// is tracked.
    pub fn observe(&mut self, frame: &[u8], now: Instant) -> Option<FlowKey> {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return None;
        };
        if eth.ethertype() != EthernetProtocol::Ipv4 {
            return None;
        }
        let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
            return None;
        };
        if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
            return None;
        }
        let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
            return None;
        };
        let key = FlowKey::new(tcp.dst_port(), ip.src_addr().octets(), tcp.src_port());
        let tracked = self.flows.get_mut(&key).map(|flow| {
            flow.heard = flow.heard.wrapping_add(1);
        });
        if tcp.syn() {
            self.syn(key, &tcp);
        } else if tcp.rst() {
            if let Some(flow) = self.flows.get_mut(&key) {
                flow.reset = true;
            }
        } else if tcp.ack() {
            if let Some(flow) = self.flows.get_mut(&key) {
                let ack = tcp.ack_number();
                // An older segment (reordered, retransmitted) does not take back a newer
                // window.
                if flow.ack.is_none_or(|last| ack >= last) {
                    flow.ack = Some(ack);
                    flow.window = usize::from(tcp.window_len()) << flow.scale;
                }
                if let Some(sender) = &mut flow.sender {
                    let now = real(now, self.dilation);
                    // RFC 3168 section 5: CE is 0b11 in the ECN field.
                    if ip.ecn() == 3 {
                        sender.on_ce();
                    }
                    let blocks = sack_blocks(&tcp);
                    let n = blocks.iter().take_while(|b| b.is_some()).count();
                    let sack = blocks.map(Option::unwrap_or_default);
                    let payload = tcp.payload().len();
                    let had_flight = sender.in_flight() > 0;
                    sender.on_ack(
                        &AckInfo {
                            ack: ack.0 as u32,
                            window: tcp.window_len(),
                            payload,
                            ece: tcp.ece(),
                            sack: &sack[..n],
                        },
                        now,
                    );
                    // Only a sender with data out may need it (a receiver of bulk data
                    // would copy every segment's headers for nothing).
                    if !tcp.fin() && (had_flight || sender.in_flight() > 0) {
                        keep_as_pure_ack(&mut flow.last_ack, frame, payload);
                    }
                }
            }
        }
        tracked.map(|()| key)
    }

    /// A frame smoltcp sends at `now`: whether it goes on the wire. Held back: a resend of
    /// data not due (see `node/cc/sender.rs`), a SYN repeated before its back-off ran out.
    pub fn admits(&mut self, frame: &[u8], now: Instant) -> bool {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return true;
        };
        if eth.ethertype() != EthernetProtocol::Ipv4 {
            return true;
        }
        let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
            return true;
        };
        if ip.next_header() != IpProtocol::Tcp {
            return true;
        }
        let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
            return true;
        };
        if tcp.rst() {
            return true;
        }
        let key = FlowKey::new(tcp.src_port(), ip.dst_addr().octets(), tcp.dst_port());
        let now = real(now, self.dilation);
        if tcp.syn() {
            return self.syn_admits(key, tcp.seq_number().0 as u32, now);
        }
        let len = tcp.payload().len() + usize::from(tcp.fin());
        match self.flows.get_mut(&key).and_then(|f| f.sender.as_mut()) {
            Some(sender) => sender.on_send(tcp.seq_number().0 as u32, len, now) == Verdict::Send,
            None => true,
        }
    }

    fn syn_admits(&mut self, key: FlowKey, isn: u32, now: Duration) -> bool {
        self.syn_tx.retain(|s| s.key != key || s.isn == isn);
        match self.syn_tx.iter_mut().find(|s| s.key == key) {
            Some(s) if now < s.next => {
                self.syns_held += 1;
                false
            }
            Some(s) => {
                s.wait = s.wait.saturating_mul(2);
                s.next = now + s.wait;
                true
            }
            None => {
                if self.syn_tx.len() == SYN_TX_SLOTS {
                    self.syn_tx.remove(0);
                }
                self.syn_tx.push(SynTx {
                    key,
                    isn,
                    next: now + SYN_RTO,
                    wait: SYN_RTO,
                });
                true
            }
        }
    }

    fn syn(&mut self, key: FlowKey, tcp: &TcpPacket<&[u8]>) {
        let (mut scale, mut mss) = (0, DEFAULT_MSS);
        let mut options = tcp.options();
        while !options.is_empty() {
            let Ok((rest, option)) = TcpOption::parse(options) else {
                break;
            };
            match option {
                TcpOption::EndOfList => break,
                // RFC 7323 section 2.3: a shift above 14 is taken as 14.
                TcpOption::WindowScale(s) => scale = s.min(14),
                TcpOption::MaxSegmentSize(m) => mss = m,
                _ => {}
            }
            options = rest;
        }
        // A SYN's own window is never scaled (RFC 7323 section 2.2).
        let flow = Flow {
            scale,
            mss,
            ack: tcp.ack().then(|| tcp.ack_number()),
            window: usize::from(tcp.window_len()),
            reset: false,
            sender: None,
            last_ack: Vec::new(),
            heard: 0,
        };
        if let Some(slot) = self.syns.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = flow;
        } else if self.syns.len() < SYN_SLOTS {
            self.syns.push((key, flow));
        } else {
            self.syns[self.next_syn] = (key, flow);
            self.next_syn = (self.next_syn + 1) % SYN_SLOTS;
        }
    }

    /// Starts tracking an established connection, from the SYN (or SYN-ACK) its peer sent.
    /// False when that SYN is no longer remembered: its window stays unknown.
    pub fn adopt(&mut self, key: FlowKey) -> bool {
        let Some(i) = self.syns.iter().position(|(k, _)| *k == key) else {
            return false;
        };
        let (_, flow) = self.syns.swap_remove(i);
        if self.next_syn > self.syns.len() {
            self.next_syn = 0;
        }
        self.flows.insert(key, flow);
        self.syn_tx.retain(|s| s.key != key);
        true
    }

    /// Gives an adopted connection its sending side.
    pub fn set_sender(&mut self, key: FlowKey, sender: Sender) {
        if let Some(flow) = self.flows.get_mut(&key) {
            flow.sender = Some(Box::new(sender));
        }
    }

    /// How many segments the peer of an adopted connection has sent since it was adopted
    /// (wrapping); none for a connection not tracked.
    pub fn heard(&self, key: FlowKey) -> Option<u64> {
        self.flows.get(&key).map(|f| f.heard)
    }

    pub fn sender(&self, key: FlowKey) -> Option<&Sender> {
        self.flows.get(&key)?.sender.as_deref()
    }

    /// Whether the connection's sender wants smoltcp to resend now (see
    /// [`Sender::wants_nudge`]); the duplicate ACKs that make it do so, if one does.
    pub fn nudge(&mut self, key: FlowKey, now: Instant) -> Option<Vec<u8>> {
        let flow = self.flows.get_mut(&key)?;
        let sender = flow.sender.as_mut()?;
        if flow.last_ack.is_empty() {
            return None;
        }
        sender.wants_nudge(real(now, self.dilation))?;
        Some(flow.last_ack.clone())
    }

    /// The counters of every connection tracked now and of those forgotten.
    pub fn totals(&self) -> (SendCounters, usize, usize) {
        let mut c = self.retired;
        let (mut cwnd, mut flight) = (0, 0);
        for s in self.flows.values().filter_map(|f| f.sender.as_deref()) {
            add(&mut c, &s.counters);
            cwnd += s.cwnd();
            flight += s.in_flight();
        }
        (c, cwnd, flight)
    }

    /// The octets the peer last said it takes beyond what it acknowledged.
    pub fn window(&self, key: FlowKey) -> Option<usize> {
        self.flows.get(&key).map(|f| f.window)
    }

    /// The largest segment the peer takes, as its SYN said.
    pub fn mss(&self, key: FlowKey) -> Option<usize> {
        self.flows.get(&key).map(|f| usize::from(f.mss))
    }

    /// Whether the peer sent a RST on the connection.
    pub fn was_reset(&self, key: FlowKey) -> bool {
        self.flows.get(&key).is_some_and(|f| f.reset)
    }

    /// Stops tracking a connection whose socket is gone.
    pub fn forget(&mut self, key: FlowKey) {
        if let Some(s) = self.flows.remove(&key).and_then(|f| f.sender) {
            add(&mut self.retired, &s.counters);
        }
    }

    /// Connections tracked now.
    pub fn tracked(&self) -> usize {
        self.flows.len()
    }
}

fn add(to: &mut SendCounters, c: &SendCounters) {
    to.retransmits += c.retransmits;
    to.fast_retransmits += c.fast_retransmits;
    to.rtos += c.rtos;
    to.ecn_marks += c.ecn_marks;
    to.spurious += c.spurious;
    to.held += c.held;
}

/// The SACK blocks of a segment (RFC 2018), as sequence numbers.
fn sack_blocks(tcp: &TcpPacket<&[u8]>) -> [Option<(u32, u32)>; 4] {
    let mut out = [None; 4];
    let mut n = 0;
    let mut options = tcp.options();
    while !options.is_empty() {
        let Ok((rest, option)) = TcpOption::parse(options) else {
            break;
        };
        match option {
            TcpOption::EndOfList => break,
            TcpOption::SackRange(ranges) => {
                for r in ranges.iter().flatten() {
                    if n < out.len() {
                        out[n] = Some(*r);
                        n += 1;
                    }
                }
            }
            _ => {}
        }
        options = rest;
    }
    out
}

/// Keeps `frame` (a peer's segment carrying `payload` octets) in `keep` as a pure ACK: its
/// headers, the IP length shortened and checksummed again, its sequence number moved past
/// the data. smoltcp takes a copy of it as a duplicate ACK (it does not check TCP checksums:
/// the device or `device.rs` did).
fn keep_as_pure_ack(keep: &mut Vec<u8>, frame: &[u8], payload: usize) {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return;
    };
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return;
    };
    let ip_header = usize::from(ip.header_len());
    let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
        return;
    };
    let tcp_header = usize::from(tcp.header_len());
    let seq = tcp.seq_number() + payload;
    let len = 14 + ip_header + tcp_header;
    keep.clear();
    keep.extend_from_slice(&frame[..len]);
    let mut eth = EthernetFrame::new_unchecked(&mut keep[..]);
    let mut ip = Ipv4Packet::new_unchecked(eth.payload_mut());
    ip.set_total_len((ip_header + tcp_header) as u16);
    ip.fill_checksum();
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let mut tcp = TcpPacket::new_unchecked(ip.payload_mut());
    tcp.set_seq_number(seq);
    tcp.set_psh(false);
    tcp.fill_checksum(&src.into(), &dst.into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetAddress, EthernetRepr, IpAddress, Ipv4Address, Ipv4Repr, TcpControl, TcpRepr,
    };

    const PEER: [u8; 4] = [10, 0, 0, 2];
    const US: [u8; 4] = [10, 0, 0, 1];

    /// A frame from the peer's port 5000 to our port 7174.
    fn segment(control: TcpControl, ack: Option<u32>, window: u16, scale: Option<u8>) -> Vec<u8> {
        segment_with_mss(control, ack, window, scale, None)
    }

    fn segment_with_mss(
        control: TcpControl,
        ack: Option<u32>,
        window: u16,
        scale: Option<u8>,
        mss: Option<u16>,
    ) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 5000,
            dst_port: 7174,
            control,
            seq_number: TcpSeqNumber(1000),
            ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: window,
            window_scale: scale,
            max_seg_size: mss,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        };
        let ip = Ipv4Repr {
            src_addr: Ipv4Address::from(PEER),
            dst_addr: Ipv4Address::from(US),
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            ethertype: EthernetProtocol::Ipv4,
        };
        let mut buf = vec![0; eth.buffer_len() + ip.buffer_len() + tcp.buffer_len()];
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.emit(&mut frame);
        let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
        let caps = ChecksumCapabilities::default();
        ip.emit(&mut packet, &caps);
        let mut seg = TcpPacket::new_unchecked(packet.payload_mut());
        tcp.emit(
            &mut seg,
            &IpAddress::Ipv4(Ipv4Address::from(PEER)),
            &IpAddress::Ipv4(Ipv4Address::from(US)),
            &caps,
        );
        buf
    }

    fn key() -> FlowKey {
        FlowKey::new(7174, PEER, 5000)
    }

    #[test]
    fn the_syns_scale_applies_to_later_windows_but_not_its_own() {
        let mut w = PeerTcp::default();
        w.observe(
            &segment(TcpControl::Syn, Some(1), 64240, Some(7)),
            Instant::ZERO,
        );
        assert!(w.adopt(key()));
        assert_eq!(w.window(key()), Some(64240));
        w.observe(
            &segment(TcpControl::None, Some(100), 502, None),
            Instant::ZERO,
        );
        assert_eq!(w.window(key()), Some(502 << 7));
    }

    #[test]
    fn without_the_option_the_window_is_unscaled() {
        let mut w = PeerTcp::default();
        w.observe(&segment(TcpControl::Syn, None, 8192, None), Instant::ZERO);
        assert!(w.adopt(key()));
        w.observe(
            &segment(TcpControl::None, Some(10), 6000, None),
            Instant::ZERO,
        );
        assert_eq!(w.window(key()), Some(6000));
    }

    #[test]
    fn an_older_acknowledgement_does_not_take_back_a_newer_window() {
        let mut w = PeerTcp::default();
        w.observe(
            &segment(TcpControl::Syn, Some(1), 1000, Some(2)),
            Instant::ZERO,
        );
        w.adopt(key());
        w.observe(
            &segment(TcpControl::None, Some(5000), 100, None),
            Instant::ZERO,
        );
        w.observe(
            &segment(TcpControl::None, Some(4000), 900, None),
            Instant::ZERO,
        );
        assert_eq!(w.window(key()), Some(400));
    }

    #[test]
    fn after_a_bare_syn_the_first_acknowledgement_counts_whatever_its_number() {
        // The passive side sees the active opener's SYN, whose acknowledgement field is 0
        // and means nothing: the windows of the ACKs that follow count although their
        // numbers (our ISN onwards) lie in the half of the sequence space "before" 0.
        let mut w = PeerTcp::default();
        w.observe(
            &segment(TcpControl::Syn, None, 65535, Some(6)),
            Instant::ZERO,
        );
        assert!(w.adopt(key()));
        w.observe(
            &segment(TcpControl::None, Some(0x9000_0001), 731, None),
            Instant::ZERO,
        );
        assert_eq!(w.window(key()), Some(731 << 6));
        w.observe(
            &segment(TcpControl::None, Some(0x9000_1001), 65535, None),
            Instant::ZERO,
        );
        assert_eq!(w.window(key()), Some(65535 << 6), "later windows count too");
        w.observe(
            &segment(TcpControl::None, Some(0x9000_0001), 10, None),
            Instant::ZERO,
        );
        assert_eq!(w.window(key()), Some(65535 << 6), "an older one does not");
    }

    #[test]
    fn acknowledgements_compare_across_the_sequence_wrap() {
        let mut w = PeerTcp::default();
        w.observe(
            &segment(TcpControl::Syn, Some(u32::MAX - 4), 1000, Some(2)),
            Instant::ZERO,
        );
        w.adopt(key());
        // 5 comes after 2^32 - 5.
        w.observe(&segment(TcpControl::None, Some(5), 20, None), Instant::ZERO);
        assert_eq!(w.window(key()), Some(80));
        w.observe(
            &segment(TcpControl::None, Some(u32::MAX - 1), 30, None),
            Instant::ZERO,
        );
        assert_eq!(w.window(key()), Some(80));
    }

    #[test]
    fn only_adopted_connections_are_tracked_and_a_syn_flood_costs_the_ring() {
        let mut w = PeerTcp::default();
        w.observe(
            &segment(TcpControl::None, Some(10), 6000, None),
            Instant::ZERO,
        );
        assert_eq!(w.window(key()), None, "no SYN seen, nothing adopted");
        w.observe(&segment(TcpControl::Syn, None, 8192, None), Instant::ZERO);
        for port in 0..2 * SYN_SLOTS as u16 {
            let mut f = segment(TcpControl::Syn, None, 1, None);
            // Another peer port (and a checksum nobody here reads).
            f[34..36].copy_from_slice(&(10000 + port).to_be_bytes());
            w.observe(&f, Instant::ZERO);
        }
        assert_eq!(w.syns.len(), SYN_SLOTS);
        assert!(!w.adopt(key()), "the oldest SYN gave its slot up");
        assert_eq!(w.tracked(), 0);
        // A fresh SYN is adopted, and forgotten with its socket.
        w.observe(&segment(TcpControl::Syn, None, 8192, None), Instant::ZERO);
        assert!(w.adopt(key()));
        assert_eq!(w.tracked(), 1);
        w.forget(key());
        assert_eq!(w.window(key()), None);
    }

    #[test]
    fn the_syns_mss_is_remembered_and_536_stands_in_for_none() {
        let mut w = PeerTcp::default();
        w.observe(
            &segment_with_mss(TcpControl::Syn, Some(1), 1000, Some(7), Some(1160)),
            Instant::ZERO,
        );
        assert!(w.adopt(key()));
        assert_eq!(w.mss(key()), Some(1160));
        w.forget(key());
        w.observe(
            &segment(TcpControl::Syn, Some(1), 1000, None),
            Instant::ZERO,
        );
        assert!(w.adopt(key()));
        assert_eq!(w.mss(key()), Some(536));
    }

    #[test]
    fn a_reset_is_remembered_for_the_connection() {
        let mut w = PeerTcp::default();
        w.observe(
            &segment(TcpControl::Syn, Some(1), 1000, None),
            Instant::ZERO,
        );
        w.adopt(key());
        w.observe(
            &segment(TcpControl::None, Some(10), 900, None),
            Instant::ZERO,
        );
        assert!(!w.was_reset(key()));
        w.observe(&segment(TcpControl::Rst, Some(10), 0, None), Instant::ZERO);
        assert!(w.was_reset(key()));
        assert_eq!(w.window(key()), Some(900), "a RST's window is not one");
    }

    /// A SYN we send from port 7174 to the peer's 5000, as smoltcp would.
    fn our_syn(seq: u32) -> Vec<u8> {
        let mut f = segment(TcpControl::Syn, None, 8192, None);
        // Swap the addresses and ports: the frame goes from us to the peer.
        let (src_ip, dst_ip) = (f[26..30].to_vec(), f[30..34].to_vec());
        f[26..30].copy_from_slice(&dst_ip);
        f[30..34].copy_from_slice(&src_ip);
        let (sp, dp) = (f[34..36].to_vec(), f[36..38].to_vec());
        f[34..36].copy_from_slice(&dp);
        f[36..38].copy_from_slice(&sp);
        f[38..42].copy_from_slice(&seq.to_be_bytes());
        f
    }

    #[test]
    fn a_repeated_syn_waits_out_an_exponential_back_off() {
        // RFC 6298 section 5.5: the wait doubles for each repeat.
        let mut w = PeerTcp::default();
        w.set_dilation(1);
        let at = |ms: u64| Instant::from_millis(ms as i64);
        let syn = our_syn(77);
        assert!(w.admits(&syn, at(0)), "the first SYN goes at once");
        assert!(
            !w.admits(&syn, at(1)),
            "smoltcp's millisecond repeat is held"
        );
        assert!(!w.admits(&syn, at(199)));
        assert!(w.admits(&syn, at(200)), "after SYN_RTO");
        assert!(!w.admits(&syn, at(599)));
        assert!(w.admits(&syn, at(600)), "after twice SYN_RTO more");
        assert_eq!(w.syns_held, 3);
        assert!(
            w.admits(&our_syn(1234), at(601)),
            "a new attempt starts afresh"
        );
    }

    #[test]
    fn frames_that_are_not_whole_tcp_segments_are_ignored() {
        let mut w = PeerTcp::default();
        let syn = segment(TcpControl::Syn, None, 8192, Some(3));
        for len in 0..syn.len() {
            w.observe(&syn[..len], Instant::ZERO);
        }
        assert!(!w.adopt(key()), "no truncated SYN was taken");
        let mut arp = syn.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        w.observe(&arp, Instant::ZERO);
        assert!(!w.adopt(key()));
    }
}
