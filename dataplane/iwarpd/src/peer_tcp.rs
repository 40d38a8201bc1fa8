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
//! ECN (RFC 3168), which smoltcp does not do, is done here on the segments as they pass
//! (see `node/cc/ecn.rs`): our SYN asks for it (ECE and CWR), our SYN-ACK grants it (ECE) when
//! the peer's SYN asked; on a connection that negotiated it our new data goes out ECT(0),
//! the peer's CE marks are echoed as ECE on our segments, and its ECE reaches the sender,
//! whose next new segment after the reduction carries CWR.
//!
//! Only connections the node adopts are tracked, so a flood of SYNs costs a fixed ring of
//! slots and nothing more.

use crate::node::cc::ecn::{self, Echo, Mode, Offsets};
use crate::node::cc::resend::ResendCopies;
use crate::node::cc::sender::{AckInfo, SendCounters, Sender, Verdict};
use rustc_hash::FxHashMap;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl,
    TcpOption, TcpPacket, TcpRepr, TcpSeqNumber,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey(u64);

/// Flows are looked up in `FxHashMap`s on every segment. FxHash multiplies its input and
/// keeps the product's middle bits, which only the input's lower bits reach: keys that
/// differ only in our port (bits 48 and up: the connections an endpoint opened to one
/// peer port) would all fall into two probe groups with one tag, and a lookup among 1,024
/// of them would walk hundreds of entries. The key is mixed first (the 64-bit finalizer of
/// MurmurHash3, a bijection, so no two keys meet that did not before): every bit then
/// reaches the bits a table takes for its slot and tag.
impl std::hash::Hash for FlowKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        state.write_u64(x);
    }
}

impl FlowKey {
    pub fn new(local_port: u16, peer_ip: [u8; 4], peer_port: u16) -> FlowKey {
        FlowKey(
            u64::from(local_port) << 48
                | u64::from(peer_port) << 32
                | u64::from(u32::from_be_bytes(peer_ip)),
        )
    }

    /// The flow of a received frame (Ethernet, IPv4, TCP), seen from our end; `None` for
    /// anything else, or anything too short to hold what its headers claim.
    pub fn of_frame(frame: &[u8]) -> Option<FlowKey> {
        let (ip, tcp) = tcp_segment(frame)?;
        Some(FlowKey::new(
            tcp.dst_port(),
            ip.src_addr().octets(),
            tcp.src_port(),
        ))
    }
}

/// The flow of a segment we send (our port, the peer's address and port), and whether the
/// segment is a bare acknowledgement: no data, and no SYN, FIN or RST. `None` for anything
/// but TCP over IPv4.
pub fn sent_flow(frame: &[u8]) -> Option<(FlowKey, bool)> {
    let (ip, tcp) = tcp_segment(frame)?;
    let key = FlowKey::new(tcp.src_port(), ip.dst_addr().octets(), tcp.dst_port());
    let bare = tcp.ack() && !tcp.syn() && !tcp.fin() && !tcp.rst() && tcp.payload().is_empty();
    Some((key, bare))
}

/// A received or sent segment's IPv4 and TCP views.
type TcpSegment<'a> = (Ipv4Packet<&'a [u8]>, TcpPacket<&'a [u8]>);

/// The IPv4 and TCP headers of `frame` when it is a TCP segment over IPv4 on Ethernet, each
/// checked to hold what its header claims.
fn tcp_segment(frame: &[u8]) -> Option<TcpSegment<'_>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    Some((ip, tcp))
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
    /// Both ends agreed to ECN (RFC 3168 section 6.1.1).
    ecn: bool,
    /// The CE marks of the peer's data, echoed on our segments.
    echo: Echo,
    /// The end of the peer's in-order data seen, the acknowledgement number and window of
    /// our latest segment: for DCTCP's ACK of the data before a change of CE state.
    rcv_nxt: Option<u32>,
    acked: Option<u32>,
    our_window: u16,
    /// The peer's SYN permitted SACK (RFC 2018): its blocks will show the holes.
    sack: bool,
    /// Our data segments in flight, for resending the holes from below smoltcp.
    copies: ResendCopies,
    /// The peer's latest segment as a pure ACK (headers only, sequence number past its
    /// data): what [`PeerTcp::duplicate_acks`] repeats.
    last_ack: Vec<u8>,
    /// Segments received from the peer: the node watches it move to tell a live peer from
    /// a dead one (see [`PeerTcp::heard`]).
    heard: u64,
    /// The end of the furthest octet (or FIN) the peer sent, and the acknowledgement
    /// number of our latest segment: see [`PeerTcp::received_in_order`].
    peer_end: Option<TcpSeqNumber>,
    our_ack: Option<TcpSeqNumber>,
    /// Segments from the peer that carried new data or acknowledged new data of ours (see
    /// [`PeerTcp::moved`]).
    moved: u64,
}

/// A SYN we sent: when it may go again, and the wait after that.
#[derive(Debug, Clone, Copy)]
struct SynTx {
    key: FlowKey,
    /// The SYN's sequence number: another one is a new attempt on the same ports.
    isn: u32,
    next: Duration,
    wait: Duration,
    /// The latest SYN of this attempt asked for ECN: only the first does (see
    /// [`PeerTcp::admits`]).
    ecn: bool,
    /// The peer answered with a RST: the connect was refused, not left unanswered.
    reset: bool,
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
    /// Whether connections negotiate ECN, and how CE marks are echoed.
    ecn: Mode,
    /// Frames made here to go out before anything smoltcp sends next (DCTCP's ACKs on a
    /// change of CE state); the device sends them.
    pub outbox: Vec<Vec<u8>>,
    /// The holes a sender finds lost, reused.
    holes: Vec<(u32, u32)>,
}

/// What `admits` reads of a frame smoltcp sends: Ethernet + IPv4 + TCP, or none.
struct Outgoing {
    at: Offsets,
    key: FlowKey,
    seq: u32,
    syn: bool,
    ack: bool,
    ack_number: u32,
    window: u16,
    rst: bool,
    payload: usize,
    fin: bool,
}

impl Outgoing {
    fn read(frame: &[u8]) -> Option<Outgoing> {
        let (ip, tcp) = tcp_segment(frame)?;
        Some(Outgoing {
            at: Offsets {
                ip: 14,
                tcp: 14 + usize::from(ip.header_len()),
            },
            key: FlowKey::new(tcp.src_port(), ip.dst_addr().octets(), tcp.dst_port()),
            seq: tcp.seq_number().0 as u32,
            syn: tcp.syn(),
            ack: tcp.ack(),
            ack_number: tcp.ack_number().0 as u32,
            window: tcp.window_len(),
            rst: tcp.rst(),
            payload: tcp.payload().len(),
            fin: tcp.fin(),
        })
    }
}

/// Whether sequence number `a` comes after `b` (modulo 2^32, RFC 9293 section 3.4).
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
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

    /// Sets whether connections set up from now on negotiate ECN, and how they echo it.
    pub fn set_ecn(&mut self, mode: Mode) {
        self.ecn = mode;
    }

    /// Whether the connection negotiated ECN.
    pub fn ecn(&self, key: FlowKey) -> bool {
        self.flows.get(&key).is_some_and(|f| f.ecn)
    }

    /// Reads the window of a received frame (Ethernet, IPv4, TCP) at `now` (smoltcp's time),
    /// and hands what it acknowledges to the connection's sender; anything else, or anything
    /// too short to hold what its headers claim, is ignored. Returns the frame's flow when it
    /// is tracked.
    pub fn observe(&mut self, frame: &[u8], now: Instant) -> Option<FlowKey> {
        let (ip, tcp) = tcp_segment(frame)?;
        if ip.more_frags() || ip.frag_offset() != 0 {
            return None;
        }
        let key = FlowKey::new(tcp.dst_port(), ip.src_addr().octets(), tcp.src_port());
        let tracked = self.flows.get_mut(&key).map(|flow| {
            flow.heard = flow.heard.wrapping_add(1);
            if !tcp.syn() && !tcp.rst() {
                let end = tcp.seq_number() + tcp.payload().len() + usize::from(tcp.fin());
                if flow.peer_end.is_none_or(|e| end > e) {
                    flow.moved += u64::from(flow.peer_end.is_some());
                    flow.peer_end = Some(end);
                }
            }
        });
        if tcp.syn() {
            self.syn(key, &tcp);
        } else if tcp.rst() {
            if let Some(flow) = self.flows.get_mut(&key) {
                flow.reset = true;
            } else if let Some(s) = self.syn_tx.iter_mut().find(|s| s.key == key) {
                s.reset = true;
            }
        } else if tcp.ack() {
            if let Some(flow) = self.flows.get_mut(&key) {
                let ack = tcp.ack_number();
                // An older segment (reordered, retransmitted) does not take back a newer
                // window.
                if flow.ack.is_none_or(|last| ack >= last) {
                    flow.moved += u64::from(flow.ack.is_some_and(|last| ack > last));
                    flow.ack = Some(ack);
                    flow.window = usize::from(tcp.window_len()) << flow.scale;
                }
                let ce = ip.ecn() == ecn::CE;
                if flow.ecn && !tcp.payload().is_empty() {
                    let seq = tcp.seq_number().0 as u32;
                    // RFC 8257 section 3.2: when the CE state changes, the data received
                    // before (not yet acknowledged) is acknowledged at once with the old
                    // state, so that each ACK's ECE speaks for all the data it covers.
                    if self.ecn == Mode::Dctcp
                        && ce != flow.echo.ece()
                        && flow.rcv_nxt == Some(seq)
                        && flow.acked.is_some_and(|a| a != seq)
                    {
                        let our_seq = flow.sender.as_ref().and_then(|s| s.nxt());
                        let our_seq = our_seq.unwrap_or(ack.0 as u32);
                        self.outbox.push(pure_ack(
                            frame,
                            our_seq,
                            seq,
                            flow.our_window,
                            flow.echo.ece(),
                        ));
                        flow.acked = Some(seq);
                    }
                    flow.echo.on_data(self.ecn, ce, tcp.cwr());
                    // In-order data moves it (our ACKs move it past what arrived out of
                    // order, see `admits`).
                    let end = seq.wrapping_add(tcp.payload().len() as u32);
                    if flow
                        .rcv_nxt
                        .is_some_and(|r| !after(seq, r) && after(end, r))
                    {
                        flow.rcv_nxt = Some(end);
                    }
                }
                if let Some(sender) = &mut flow.sender {
                    let now = real(now, self.dilation);
                    // RFC 3168 section 5: CE is 0b11 in the ECN field.
                    if ce {
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
                            // ECE means congestion only once ECN is agreed (RFC 3168
                            // section 6.1.1).
                            ece: flow.ecn && tcp.ece(),
                            sack: &sack[..n],
                        },
                        now,
                    );
                    // RFC 6675 section 5: every hole the peer's SACK blocks show lost is
                    // resent now from our copy, not one per round trip.
                    flow.copies.acked(sender.una());
                    if flow.sack {
                        sender.lost_holes(&mut self.holes);
                        for &(start, end) in &self.holes {
                            if let Some(copy) = flow.copies.get(start, end) {
                                self.outbox.push(copy.to_vec());
                                sender.resent_below(start, end, now);
                            }
                        }
                    }
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
    /// One that goes gets its ECN flags and field here.
    pub fn admits(&mut self, frame: &mut [u8], now: Instant) -> bool {
        let Some(o) = Outgoing::read(frame) else {
            return true;
        };
        if o.rst {
            return true;
        }
        let now = real(now, self.dilation);
        if o.syn {
            let Some(first) = self.syn_admits(o.key, o.seq, now) else {
                return false;
            };
            let flags = if !o.ack {
                // RFC 3168 section 6.1.1: an ECN-setup SYN. Section 6.1.1.1: an ECN-setup
                // SYN that got no answer may have been dropped for its flags (a middlebox),
                // so its repeats go as plain SYNs, and a SYN-ACK to the first no longer
                // agrees ECN (as Linux's `tcp_ecn_fallback`).
                let setup = self.ecn != Mode::Off && first;
                if let Some(s) = self.syn_tx.iter_mut().find(|s| s.key == o.key) {
                    s.ecn = setup;
                }
                setup.then_some(ecn::ECE | ecn::CWR)
            } else {
                // An ECN-setup SYN-ACK, to a peer whose SYN was one.
                self.syns
                    .iter()
                    .any(|(k, f)| *k == o.key && f.ecn)
                    .then_some(ecn::ECE)
            };
            if let Some(flags) = flags {
                ecn::set_tcp_flags(frame, o.at, flags);
            }
            return true;
        }
        let Some(flow) = self.flows.get_mut(&o.key) else {
            return true;
        };
        if o.ack {
            let ack = TcpSeqNumber(o.ack_number as i32);
            if flow.our_ack.is_none_or(|a| ack > a) {
                flow.our_ack = Some(ack);
            }
            flow.acked = Some(o.ack_number);
            flow.our_window = o.window;
            if flow.rcv_nxt.is_some_and(|r| after(o.ack_number, r)) {
                flow.rcv_nxt = Some(o.ack_number);
            }
        }
        let mut new = false;
        if let Some(sender) = &mut flow.sender {
            new = sender.is_new(o.seq);
            let len = o.payload + usize::from(o.fin);
            match sender.on_send(o.seq, len, now) {
                Verdict::Send => {}
                Verdict::Hold => return false,
                Verdict::From(from) => {
                    // Only the data never sent goes: a segment of its own, cut from this
                    // one, sent beside smoltcp's (which is held).
                    if let Some(mut cut) = cut_from(frame, from) {
                        if let Some(c) = Outgoing::read(&cut) {
                            dress(flow, &mut cut, &c, true);
                            self.outbox.push(cut);
                        }
                    }
                    return false;
                }
            }
        }
        dress(flow, frame, &o, new);
        true
    }

    /// Whether a SYN (or SYN-ACK) smoltcp sends goes now: `Some(true)` for the first of its
    /// attempt, `Some(false)` for a repeat whose back-off ran out, `None` when held.
    fn syn_admits(&mut self, key: FlowKey, isn: u32, now: Duration) -> Option<bool> {
        self.syn_tx.retain(|s| s.key != key || s.isn == isn);
        match self.syn_tx.iter_mut().find(|s| s.key == key) {
            Some(s) if now < s.next => {
                self.syns_held += 1;
                None
            }
            Some(s) => {
                s.wait = s.wait.saturating_mul(2);
                s.next = now + s.wait;
                Some(false)
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
                    ecn: false,
                    reset: false,
                });
                Some(true)
            }
        }
    }

    fn syn(&mut self, key: FlowKey, tcp: &TcpPacket<&[u8]>) {
        let (mut scale, mut mss, mut sack) = (0, DEFAULT_MSS, false);
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
                TcpOption::SackPermitted => sack = true,
                _ => {}
            }
            options = rest;
        }
        // RFC 3168 section 6.1.1: a SYN asks for ECN with ECE and CWR, a SYN-ACK grants it
        // with ECE alone (and a SYN-ACK is only ever an answer to our SYN, which asked).
        // After a fallback to a plain SYN (see [`PeerTcp::admits`]) a SYN-ACK that grants
        // ECN answers the first SYN, which we gave up on.
        let asked = !tcp.ack()
            || self
                .syn_tx
                .iter()
                .find(|s| s.key == key)
                .is_none_or(|s| s.ecn);
        let ecn = self.ecn != Mode::Off
            && asked
            && tcp.ece()
            && if tcp.ack() { !tcp.cwr() } else { tcp.cwr() };
        // A SYN's own window is never scaled (RFC 7323 section 2.2).
        let flow = Flow {
            ecn,
            echo: Echo::default(),
            // The peer's data starts after its SYN.
            rcv_nxt: Some(tcp.seq_number().0.wrapping_add(1) as u32),
            acked: None,
            our_window: 0,
            sack,
            copies: ResendCopies::default(),
            scale,
            mss,
            ack: tcp.ack().then(|| tcp.ack_number()),
            window: usize::from(tcp.window_len()),
            reset: false,
            sender: None,
            last_ack: Vec::new(),
            heard: 0,
            peer_end: None,
            our_ack: None,
            moved: 0,
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

    /// How often the peer's segments moved the connection's data on: new octets (or its
    /// FIN) from the peer, or an acknowledgement of new octets of ours. Keep-alives and
    /// their answers do not, so a connection whose count stands has written neither of its
    /// TCP rings since.
    pub fn moved(&self, key: FlowKey) -> Option<u64> {
        self.flows.get(&key).map(|f| f.moved)
    }

    /// Whether every octet the peer sent so far (as far as this device saw) has been
    /// acknowledged by our latest segment: then nothing waits out of order in the
    /// connection's receive ring. False for a connection not tracked.
    pub fn received_in_order(&self, key: FlowKey) -> bool {
        self.flows.get(&key).is_some_and(|f| match f.peer_end {
            None => true,
            Some(end) => f.our_ack.is_some_and(|a| a >= end),
        })
    }

    pub fn sender(&self, key: FlowKey) -> Option<&Sender> {
        self.flows.get(&key)?.sender.as_deref()
    }

    /// Whether the connection's sender wants smoltcp to resend now (see
    /// [`Sender::wants_nudge`]); the duplicate ACKs that make it do so, if one does. While
    /// `host_busy` (our port holds frames it could not hand on), no timeout is due (see
    /// [`Sender::host_queue_busy`]).
    pub fn nudge(&mut self, key: FlowKey, now: Instant, host_busy: bool) -> Option<Vec<u8>> {
        let flow = self.flows.get_mut(&key)?;
        let sender = flow.sender.as_mut()?;
        if flow.last_ack.is_empty() {
            return None;
        }
        let now = real(now, self.dilation);
        if host_busy {
            sender.host_queue_busy(now);
        }
        sender.wants_nudge(now)?;
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

    /// The size of a tracked flow's entry, for cache hints at [`PeerTcp::hints`]'s address.
    pub const FLOW_SIZE: usize = size_of::<(FlowKey, Flow)>();

    /// Where flow `key`'s entry and its sender are, as cache hints (see
    /// `iwarp_abi::prefetch`): `(0, 0)` for a flow not tracked, 0 for no sender.
    pub fn hints(&self, key: FlowKey) -> (usize, usize) {
        use iwarp_abi::prefetch::{address_of, entry_address};
        self.flows.get_key_value(&key).map_or((0, 0), |(k, f)| {
            (
                entry_address(k, f),
                f.sender.as_deref().map_or(0, address_of),
            )
        })
    }

    /// The largest segment the peer takes, as its SYN said.
    pub fn mss(&self, key: FlowKey) -> Option<usize> {
        self.flows.get(&key).map(|f| usize::from(f.mss))
    }

    /// Whether the peer sent a RST on the connection, or in answer to our SYN (a refused
    /// connect; remembered while the SYN's slot lasts, the latest 64 SYNs).
    pub fn was_reset(&self, key: FlowKey) -> bool {
        self.flows.get(&key).is_some_and(|f| f.reset)
            || self.syn_tx.iter().any(|s| s.key == key && s.reset)
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
    to.dsacked += c.dsacked;
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

/// A pure ACK answering `frame` (a peer's segment): addresses and ports swapped, our
/// sequence number `seq`, acknowledging `ack`, advertising `window` (the field, scaled as
/// our last segment's), with ECE when `ece`; no options.
/// What a segment that goes gets at the device: a copy for resending holes (first
/// transmissions only, as smoltcp made them: a resend carries neither ECT nor CWR), and its
/// ECN flags and field.
fn dress(flow: &mut Flow, frame: &mut [u8], o: &Outgoing, new: bool) {
    let len = o.payload + usize::from(o.fin);
    if new && flow.sack && len > 0 && flow.sender.is_some() {
        flow.copies
            .keep(o.seq, o.seq.wrapping_add(len as u32), frame);
    }
    if flow.ecn {
        let mut flags = 0;
        if flow.echo.ece() {
            flags |= ecn::ECE;
        }
        // RFC 3168 sections 6.1.1 and 6.1.5: ECT on first transmissions of data only,
        // not on pure ACKs, window probes or retransmissions.
        if o.payload > 0 && new {
            ecn::set_ecn_field(frame, o.at, ecn::ECT0);
            if flow.sender.as_mut().is_some_and(|s| s.take_cwr()) {
                flags |= ecn::CWR;
            }
        }
        if flags != 0 {
            ecn::set_tcp_flags(frame, o.at, flags);
        }
    }
}

/// The segment in `frame` cut down to its octets from sequence number `from` on (headers,
/// options and flags kept, checksums made anew); none when `from` is outside its data.
fn cut_from(frame: &[u8], from: u32) -> Option<Vec<u8>> {
    let (ip, tcp) = tcp_segment(frame)?;
    let skip = from.wrapping_sub(tcp.seq_number().0 as u32) as usize;
    let (ip_len, tcp_len) = (usize::from(ip.header_len()), usize::from(tcp.header_len()));
    if skip == 0 || skip > tcp.payload().len() {
        return None;
    }
    let head = 14 + ip_len + tcp_len;
    let mut out = Vec::with_capacity(frame.len() - skip);
    out.extend_from_slice(&frame[..head]);
    out.extend_from_slice(&tcp.payload()[skip..]);
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let mut ip = Ipv4Packet::new_unchecked(&mut out[14..]);
    ip.set_total_len((ip_len + tcp_len + tcp.payload().len() - skip) as u16);
    ip.fill_checksum();
    let mut seg = TcpPacket::new_unchecked(&mut out[14 + ip_len..]);
    seg.set_seq_number(TcpSeqNumber(from as i32));
    seg.fill_checksum(&src.into(), &dst.into());
    Some(out)
}

fn pure_ack(frame: &[u8], seq: u32, ack: u32, window: u16, ece: bool) -> Vec<u8> {
    let eth = EthernetFrame::new_unchecked(frame);
    let ip = Ipv4Packet::new_unchecked(eth.payload());
    let tcp = TcpPacket::new_unchecked(ip.payload());
    let repr = TcpRepr {
        src_port: tcp.dst_port(),
        dst_port: tcp.src_port(),
        control: TcpControl::None,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: Some(TcpSeqNumber(ack as i32)),
        window_len: window,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &[],
    };
    let (src, dst) = (ip.dst_addr(), ip.src_addr());
    let ip_repr = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
    };
    let mut buf = vec![0; 14 + ip_repr.buffer_len() + repr.buffer_len()];
    let mut out = EthernetFrame::new_unchecked(&mut buf[..]);
    EthernetRepr {
        src_addr: eth.dst_addr(),
        dst_addr: eth.src_addr(),
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut out);
    let caps = ChecksumCapabilities::default();
    let mut packet = Ipv4Packet::new_unchecked(out.payload_mut());
    ip_repr.emit(&mut packet, &caps);
    let mut seg = TcpPacket::new_unchecked(packet.payload_mut());
    repr.emit(&mut seg, &src.into(), &dst.into(), &caps);
    if ece {
        let at = Offsets { ip: 14, tcp: 34 };
        ecn::set_tcp_flags(&mut buf, at, ecn::ECE);
    }
    buf
}

/// Keeps `frame` (a peer's segment carrying `payload` octets) in `keep` as a pure ACK: its
/// headers, the IP length shortened and checksummed again, its sequence number moved past
/// the data. smoltcp takes a copy of it as a duplicate ACK (it does not check TCP checksums:
/// the device or `device.rs` did).
fn keep_as_pure_ack(keep: &mut Vec<u8>, frame: &[u8], payload: usize) {
    let Some((ip, tcp)) = tcp_segment(frame) else {
        return;
    };
    let ip_header = usize::from(ip.header_len());
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

/// A segment with no options and a window of 1,000 octets from `src` port `ports.0` to `dst`
/// port `ports.1`, framed by [`test_frame`].
#[cfg(test)]
pub(crate) fn test_segment(
    (src, dst): ([u8; 4], [u8; 4]),
    ports: (u16, u16),
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
    payload: &[u8],
) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: ports.0,
        dst_port: ports.1,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 1000,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    test_frame(src, dst, &tcp)
}

/// An Ethernet frame holding `tcp` from `src` to `dst` (each host's MAC ends in its
/// address's last octet), both checksums right: what the device's tests feed it.
#[cfg(test)]
pub(crate) fn test_frame(src: [u8; 4], dst: [u8; 4], tcp: &TcpRepr) -> Vec<u8> {
    use smoltcp::wire::{EthernetAddress, EthernetRepr, IpAddress, Ipv4Address};
    let ip = Ipv4Repr {
        src_addr: Ipv4Address::from(src),
        dst_addr: Ipv4Address::from(dst),
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, src[3]]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, dst[3]]),
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
        &IpAddress::Ipv4(Ipv4Address::from(src)),
        &IpAddress::Ipv4(Ipv4Address::from(dst)),
        &caps,
    );
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::IpAddress;

    /// 1,024 flows that differ in one field only (our port: the connections an endpoint
    /// opened to one listener; the peer's port: those a listener took from one peer; the
    /// peer's address) spread over a table's slots and tags as random keys would: a table
    /// of 1,024 has 2,048 slots (the hash's low 11 bits) and 128 tags (its top 7). Hashed
    /// as a bare `u64`, the first family would take 2 slot values and 1 tag.
    #[test]
    fn flows_that_differ_in_one_field_spread_over_fxhash_slots_and_tags() {
        use std::hash::BuildHasher;
        type Family = (&'static str, fn(u16) -> FlowKey);
        let families: [Family; 3] = [
            ("our port", |i| {
                FlowKey::new(40_000 + i, [10, 77, 0, 2], 7000)
            }),
            ("peer port", |i| {
                FlowKey::new(7000, [10, 77, 0, 2], 40_000 + i)
            }),
            ("peer address", |i| {
                FlowKey::new(7000, [10, 77, (i >> 8) as u8, i as u8], 40_000)
            }),
        ];
        let fx = rustc_hash::FxBuildHasher;
        for (name, key) in families {
            let hashes: Vec<u64> = (0..1024).map(|i| fx.hash_one(key(i))).collect();
            let slots: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 2047).collect();
            let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
            // Random keys: about 806 slot values and all 128 tags.
            assert!(slots.len() >= 700, "{name}: {} slot values", slots.len());
            assert!(tags.len() >= 120, "{name}: {} tags", tags.len());
        }
    }

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
        test_frame(PEER, US, &tcp)
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
        let mut syn = our_syn(77);
        assert!(w.admits(&mut syn, at(0)), "the first SYN goes at once");
        assert!(
            !w.admits(&mut syn, at(1)),
            "smoltcp's millisecond repeat is held"
        );
        assert!(!w.admits(&mut syn, at(199)));
        assert!(w.admits(&mut syn, at(200)), "after SYN_RTO");
        assert!(!w.admits(&mut syn, at(599)));
        assert!(w.admits(&mut syn, at(600)), "after twice SYN_RTO more");
        assert_eq!(w.syns_held, 3);
        assert!(
            w.admits(&mut our_syn(1234), at(601)),
            "a new attempt starts afresh"
        );
    }

    #[test]
    fn a_segment_cut_keeps_its_headers_and_carries_only_the_later_octets() {
        let payload: Vec<u8> = (0..100).collect();
        let frame = ecn_segment(false, TcpControl::Psh, 1000, Some(77), &payload, 0, 0);
        let cut = cut_from(&frame, 1040).expect("inside the data");
        assert!(crate::port::tcp_checksum::tcp_checksum_ok(&cut));
        let ip = Ipv4Packet::new_checked(&cut[14..]).expect("ip");
        assert!(ip.verify_checksum());
        let tcp = TcpPacket::new_checked(ip.payload()).expect("tcp");
        assert_eq!(tcp.seq_number(), TcpSeqNumber(1040));
        assert_eq!(tcp.ack_number(), TcpSeqNumber(77));
        assert!(tcp.psh());
        assert_eq!(tcp.payload(), &payload[40..]);
        assert_eq!(cut.len(), frame.len() - 40);
        assert!(cut_from(&frame, 1000).is_none(), "nothing to cut");
        assert!(cut_from(&frame, 1101).is_none(), "past its data");
    }

    /// A segment with `payload`, from the peer (`from_peer`) or from us, its ECN flags and
    /// field set as given.
    fn ecn_segment(
        from_peer: bool,
        control: TcpControl,
        seq: u32,
        ack: Option<u32>,
        payload: &[u8],
        flags: u8,
        field: u8,
    ) -> Vec<u8> {
        let (hosts, ports) = if from_peer {
            ((PEER, US), (5000, 7174))
        } else {
            ((US, PEER), (7174, 5000))
        };
        let mut buf = test_segment(hosts, ports, control, seq, ack, payload);
        let at = Offsets { ip: 14, tcp: 34 };
        ecn::set_tcp_flags(&mut buf, at, flags);
        ecn::set_ecn_field(&mut buf, at, field);
        buf
    }

    /// The ECN field, ECE and CWR of a frame, its checksums checked.
    fn ecn_of(frame: &[u8]) -> (u8, bool, bool) {
        let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
        assert!(ip.verify_checksum());
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        assert!(tcp.verify_checksum(
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr())
        ));
        (ip.ecn(), tcp.ece(), tcp.cwr())
    }

    fn ecn_sender() -> Sender {
        use crate::node::cc::Algorithm;
        Sender::new(
            Algorithm::NewReno,
            1000,
            1 << 20,
            Duration::from_millis(200),
            Duration::from_millis(1),
            Duration::from_millis(40),
        )
    }

    #[test]
    fn our_syn_asks_for_ecn_only_when_it_is_on() {
        // RFC 3168 section 6.1.1: an ECN-setup SYN has ECE and CWR, and no ECT.
        for (mode, expect) in [
            (Mode::Off, (0, false, false)),
            (Mode::Classic, (0, true, true)),
        ] {
            let mut w = PeerTcp::default();
            w.set_ecn(mode);
            let mut syn = ecn_segment(false, TcpControl::Syn, 7, None, &[], 0, 0);
            assert!(w.admits(&mut syn, Instant::ZERO));
            assert_eq!(ecn_of(&syn), expect, "{mode:?}");
        }
    }

    #[test]
    fn an_unanswered_ecn_setup_syn_is_repeated_as_a_plain_syn() {
        // RFC 3168 section 6.1.1.1: a host whose ECN-setup SYN gets no answer may send its
        // SYN retransmissions as non-ECN-setup SYNs (a middlebox may drop SYNs with ECE and
        // CWR). A SYN-ACK that still grants ECN then answers the first one: no ECN.
        let mut w = PeerTcp::default();
        w.set_ecn(Mode::Classic);
        w.set_dilation(1);
        let at = |ms: u64| Instant::from_millis(ms as i64);
        let mut syn = ecn_segment(false, TcpControl::Syn, 7, None, &[], 0, 0);
        assert!(w.admits(&mut syn, at(0)));
        assert_eq!(ecn_of(&syn), (0, true, true), "the first asks for ECN");
        for t in [200, 600] {
            let mut again = ecn_segment(false, TcpControl::Syn, 7, None, &[], 0, 0);
            assert!(w.admits(&mut again, at(t)));
            assert_eq!(ecn_of(&again), (0, false, false), "repeat at {t} ms");
        }
        let syn_ack = ecn_segment(true, TcpControl::Syn, 1000, Some(8), &[], ecn::ECE, 0);
        w.observe(&syn_ack, at(601));
        assert!(w.adopt(key()));
        assert!(!w.ecn(key()), "ECN given up with the first SYN");
        // A new attempt on the same ports (another initial sequence number) asks again.
        let mut fresh = ecn_segment(false, TcpControl::Syn, 5000, None, &[], 0, 0);
        assert!(w.admits(&mut fresh, at(700)));
        assert_eq!(ecn_of(&fresh), (0, true, true));
        let granted = ecn_segment(true, TcpControl::Syn, 3000, Some(5001), &[], ecn::ECE, 0);
        w.observe(&granted, at(701));
        assert!(w.adopt(key()));
        assert!(w.ecn(key()), "answered at once: agreed");
    }

    #[test]
    fn the_active_side_agrees_only_on_an_ecn_setup_syn_ack() {
        // RFC 3168 section 6.1.1: the SYN-ACK grants ECN with ECE set and CWR clear; one
        // with both set (a reflected SYN's flags) or neither does not.
        for (flags, agreed) in [(ecn::ECE, true), (ecn::ECE | ecn::CWR, false), (0, false)] {
            let mut w = PeerTcp::default();
            w.set_ecn(Mode::Classic);
            let syn_ack = ecn_segment(true, TcpControl::Syn, 1000, Some(8), &[], flags, 0);
            w.observe(&syn_ack, Instant::ZERO);
            assert!(w.adopt(key()));
            assert_eq!(w.ecn(key()), agreed, "flags {flags:#x}");
        }
    }

    #[test]
    fn the_passive_side_grants_ecn_to_a_syn_that_asks_and_only_when_on() {
        for (mode, flags, agreed) in [
            (Mode::Classic, ecn::ECE | ecn::CWR, true),
            (Mode::Dctcp, ecn::ECE | ecn::CWR, true),
            (Mode::Off, ecn::ECE | ecn::CWR, false),
            (Mode::Classic, ecn::ECE, false),
            (Mode::Classic, 0, false),
        ] {
            let mut w = PeerTcp::default();
            w.set_ecn(mode);
            w.observe(
                &ecn_segment(true, TcpControl::Syn, 1000, None, &[], flags, 0),
                Instant::ZERO,
            );
            let mut syn_ack = ecn_segment(false, TcpControl::Syn, 7, Some(1001), &[], 0, 0);
            assert!(w.admits(&mut syn_ack, Instant::ZERO));
            // RFC 3168 section 6.1.1: the ECN-setup SYN-ACK: ECE, not CWR, not ECT.
            assert_eq!(ecn_of(&syn_ack), (0, agreed, false), "{mode:?} {flags:#x}");
            assert!(w.adopt(key()));
            assert_eq!(w.ecn(key()), agreed);
        }
    }

    /// An adopted connection that negotiated ECN (`mode`), with a sender.
    fn ecn_flow(mode: Mode) -> PeerTcp {
        let mut w = PeerTcp::default();
        w.set_ecn(mode);
        w.observe(
            &ecn_segment(
                true,
                TcpControl::Syn,
                1000,
                None,
                &[],
                ecn::ECE | ecn::CWR,
                0,
            ),
            Instant::ZERO,
        );
        assert!(w.adopt(key()));
        w.set_sender(key(), ecn_sender());
        w
    }

    #[test]
    fn new_data_goes_ect0_and_pure_acks_and_resends_do_not() {
        // RFC 3168 section 6.1.1 (no ECT on pure ACKs) and section 6.1.5 (none on
        // retransmitted data).
        let mut w = ecn_flow(Mode::Classic);
        let data = [7u8; 1000];
        let at = |ms| Instant::from_millis(ms);
        let mut first = ecn_segment(false, TcpControl::Psh, 1, Some(1001), &data, 0, 0);
        assert!(w.admits(&mut first, at(0)));
        assert_eq!(ecn_of(&first), (ecn::ECT0, false, false));
        let mut ack = ecn_segment(false, TcpControl::None, 1001, Some(1001), &[], 0, 0);
        assert!(w.admits(&mut ack, at(0)));
        assert_eq!(ecn_of(&ack), (ecn::NOT_ECT, false, false));
        // The same data again, once our timer (200 ms before any RTT sample) ran out.
        let mut resend = ecn_segment(false, TcpControl::Psh, 1, Some(1001), &data, 0, 0);
        assert!(w.admits(&mut resend, at(300)));
        assert_eq!(ecn_of(&resend), (ecn::NOT_ECT, false, false));
        // Without ECN agreed, nothing is touched.
        let mut plain = PeerTcp::default();
        plain.set_ecn(Mode::Classic);
        plain.observe(
            &ecn_segment(true, TcpControl::Syn, 1000, None, &[], 0, 0),
            Instant::ZERO,
        );
        assert!(plain.adopt(key()));
        plain.set_sender(key(), ecn_sender());
        let mut d = ecn_segment(false, TcpControl::Psh, 1, Some(1001), &data, 0, 0);
        let copy = d.clone();
        assert!(plain.admits(&mut d, at(0)));
        assert_eq!(d, copy);
    }

    #[test]
    fn a_ce_mark_is_echoed_until_cwr_counted_and_ece_reduces_once_then_cwr() {
        // RFC 3168 sections 6.1.2 and 6.1.3.
        let mut w = ecn_flow(Mode::Classic);
        let at = |ms| Instant::from_millis(ms);
        let data = [1u8; 1000];
        // Four segments out, the first acknowledged with a CE-marked segment of the peer's.
        for i in 0..4u32 {
            let mut f = ecn_segment(
                false,
                TcpControl::None,
                1 + i * 1000,
                Some(1001),
                &data,
                0,
                0,
            );
            assert!(w.admits(&mut f, at(0)));
        }
        let marked = ecn_segment(true, TcpControl::None, 1001, Some(1001), &data, 0, ecn::CE);
        w.observe(&marked, at(1));
        assert_eq!(w.sender(key()).unwrap().counters.ecn_marks, 1);
        let mut ack = ecn_segment(false, TcpControl::None, 4001, Some(2001), &[], 0, 0);
        assert!(w.admits(&mut ack, at(1)));
        assert_eq!(ecn_of(&ack), (ecn::NOT_ECT, true, false), "ECE echoed");
        // Unmarked data: still echoed; the peer's CWR ends it.
        w.observe(
            &ecn_segment(
                true,
                TcpControl::None,
                2001,
                Some(1001),
                &data,
                0,
                ecn::ECT0,
            ),
            at(2),
        );
        let mut ack = ecn_segment(false, TcpControl::None, 4001, Some(3001), &[], 0, 0);
        w.admits(&mut ack, at(2));
        assert!(ecn_of(&ack).1);
        w.observe(
            &ecn_segment(
                true,
                TcpControl::None,
                3001,
                Some(1001),
                &data,
                ecn::CWR,
                ecn::ECT0,
            ),
            at(3),
        );
        let mut ack = ecn_segment(false, TcpControl::None, 4001, Some(4001), &[], 0, 0);
        w.admits(&mut ack, at(3));
        assert!(!ecn_of(&ack).1, "CWR ended the echo");
        // The peer echoes ECE for our data: the window is cut once, our next new segment
        // carries CWR, the one after it not.
        let cwnd = w.sender(key()).unwrap().cwnd();
        w.observe(
            &ecn_segment(true, TcpControl::None, 4001, Some(2001), &[], ecn::ECE, 0),
            at(4),
        );
        w.observe(
            &ecn_segment(true, TcpControl::None, 4001, Some(3001), &[], ecn::ECE, 0),
            at(4),
        );
        let s = w.sender(key()).unwrap();
        assert!(s.cwnd() < cwnd, "reduced");
        assert_eq!(s.counters.ecn_marks, 3);
        let mut next = ecn_segment(false, TcpControl::None, 4001, Some(4001), &data, 0, 0);
        w.admits(&mut next, at(5));
        assert_eq!(ecn_of(&next), (ecn::ECT0, false, true));
        let mut after = ecn_segment(false, TcpControl::None, 5001, Some(4001), &data, 0, 0);
        w.admits(&mut after, at(5));
        assert_eq!(ecn_of(&after), (ecn::ECT0, false, false));
    }

    #[test]
    fn without_ecn_agreed_a_peers_ece_is_not_a_congestion_signal() {
        // RFC 3168 section 6.1.1: ECE means congestion only on an ECN connection.
        let mut w = PeerTcp::default();
        w.observe(
            &ecn_segment(true, TcpControl::Syn, 1000, None, &[], 0, 0),
            Instant::ZERO,
        );
        assert!(w.adopt(key()));
        w.set_sender(key(), ecn_sender());
        let data = [1u8; 1000];
        for i in 0..4u32 {
            let mut f = ecn_segment(
                false,
                TcpControl::None,
                1 + i * 1000,
                Some(1001),
                &data,
                0,
                0,
            );
            w.admits(&mut f, Instant::ZERO);
        }
        let cwnd = w.sender(key()).unwrap().cwnd();
        w.observe(
            &ecn_segment(true, TcpControl::None, 1001, Some(1001), &[], ecn::ECE, 0),
            Instant::from_millis(1),
        );
        let s = w.sender(key()).unwrap();
        assert_eq!(s.counters.ecn_marks, 0);
        assert!(s.cwnd() > cwnd, "slow start went on: {} {cwnd}", s.cwnd());
    }

    #[test]
    fn the_dctcp_echo_follows_each_marked_segment() {
        // RFC 8257 section 3.2.
        let mut w = ecn_flow(Mode::Dctcp);
        let data = [1u8; 100];
        let ece = |w: &mut PeerTcp, seq: u32, field: u8| {
            w.observe(
                &ecn_segment(true, TcpControl::None, seq, Some(1), &data, 0, field),
                Instant::ZERO,
            );
            let mut ack = ecn_segment(false, TcpControl::None, 1, Some(seq + 100), &[], 0, 0);
            w.admits(&mut ack, Instant::ZERO);
            ecn_of(&ack).1
        };
        assert!(ece(&mut w, 1001, ecn::CE));
        assert!(!ece(&mut w, 1101, ecn::ECT0), "no CWR needed");
        assert!(ece(&mut w, 1201, ecn::CE));
    }

    #[test]
    fn a_dctcp_receiver_acknowledges_at_once_what_came_before_a_change_of_ce_state() {
        // RFC 8257 section 3.2: on a change of CE state, an immediate ACK for the data
        // received before it, with the old state's ECE.
        let mut w = ecn_flow(Mode::Dctcp);
        let data = [1u8; 100];
        let t = Instant::ZERO;
        let mut ack = ecn_segment(false, TcpControl::None, 1, Some(1001), &[], 0, 0);
        assert!(w.admits(&mut ack, t));
        let peer = |seq: u32, field: u8| {
            ecn_segment(true, TcpControl::None, seq, Some(1), &data, 0, field)
        };
        w.observe(&peer(1001, ecn::ECT0), t);
        w.observe(&peer(1101, ecn::ECT0), t);
        assert!(w.outbox.is_empty(), "no change of state");
        w.observe(&peer(1201, ecn::CE), t);
        let acks = std::mem::take(&mut w.outbox);
        assert_eq!(acks.len(), 1);
        let read = |f: &[u8]| {
            let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
            let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
            assert_eq!((tcp.src_port(), tcp.dst_port()), (7174, 5000));
            assert!(tcp.payload().is_empty() && tcp.ack());
            (tcp.ack_number().0 as u32, tcp.window_len())
        };
        assert_eq!(
            ecn_of(&acks[0]),
            (ecn::NOT_ECT, false, false),
            "unmarked before"
        );
        assert_eq!(read(&acks[0]), (1201, 1000), "up to the marked segment");
        w.observe(&peer(1301, ecn::CE), t);
        assert!(w.outbox.is_empty(), "still marked");
        w.observe(&peer(1401, ecn::ECT0), t);
        let acks = std::mem::take(&mut w.outbox);
        assert_eq!(acks.len(), 1);
        assert_eq!(
            ecn_of(&acks[0]),
            (ecn::NOT_ECT, true, false),
            "marked before"
        );
        assert_eq!(read(&acks[0]).0, 1401);
        // Out of order (1501 lost): smoltcp answers that at once itself.
        w.observe(&peer(1601, ecn::CE), t);
        assert!(w.outbox.is_empty());
        let mut ack = ecn_segment(false, TcpControl::None, 1, Some(1501), &[], 0, 0);
        w.admits(&mut ack, t);
        // The hole filled, unmarked: everything before it was acknowledged already.
        w.observe(&peer(1501, ecn::ECT0), t);
        assert!(w.outbox.is_empty());
        // smoltcp acknowledges both; in order again from there.
        let mut ack = ecn_segment(false, TcpControl::None, 1, Some(1701), &[], 0, 0);
        w.admits(&mut ack, t);
        w.observe(&peer(1701, ecn::ECT0), t);
        w.observe(&peer(1801, ecn::CE), t);
        assert_eq!(w.outbox.len(), 1, "in step with smoltcp's ACKs again");
    }

    /// A segment from the peer without data: a SYN permitting SACK, or an ACK with SACK
    /// blocks.
    fn peer_sack(control: TcpControl, ack: u32, sack: [Option<(u32, u32)>; 3]) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 5000,
            dst_port: 7174,
            control,
            seq_number: TcpSeqNumber(1000),
            ack_number: Some(TcpSeqNumber(ack as i32)),
            window_len: 1000,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: control == TcpControl::Syn,
            sack_ranges: sack,
            timestamp: None,
            payload: &[],
        };
        test_frame(PEER, US, &tcp)
    }

    #[test]
    fn every_hole_goes_again_at_once_from_the_copy_of_its_first_transmission() {
        // RFC 6675 section 5: the holes the SACK blocks show lost are all resent in the
        // first round trip of recovery; smoltcp's own resend of the first one is held.
        let mut w = PeerTcp::default();
        w.observe(&peer_sack(TcpControl::Syn, 1, [None; 3]), Instant::ZERO);
        assert!(w.adopt(key()));
        w.set_sender(key(), ecn_sender());
        let t = |ms| Instant::from_millis(ms);
        // A first segment acknowledged after 10 ms: the RTT.
        let mut first = ecn_segment(false, TcpControl::None, 1, Some(1001), &[9; 1000], 0, 0);
        assert!(w.admits(&mut first, t(0)));
        w.observe(&peer_sack(TcpControl::None, 1001, [None; 3]), t(10));
        let mut sent = Vec::new();
        for i in 1..11u32 {
            let data = [i as u8; 1000];
            let mut f = ecn_segment(
                false,
                TcpControl::None,
                1 + i * 1000,
                Some(1001),
                &data,
                0,
                0,
            );
            assert!(w.admits(&mut f, t(10)));
            sent.push(f);
        }
        // Two of the ten lost; the peer holds the rest and says so three times (RFC 5681
        // section 2's duplicate ACKs: same window, no data).
        let sack = [Some((2001, 5001)), Some((6001, 11_001)), None];
        for _ in 0..3 {
            w.observe(&peer_sack(TcpControl::None, 1001, sack), t(11));
        }
        let resent = std::mem::take(&mut w.outbox);
        assert_eq!(resent, [sent[0].clone(), sent[4].clone()]);
        let c = w.sender(key()).unwrap().counters;
        assert_eq!((c.retransmits, c.fast_retransmits, c.rtos), (2, 2, 0));
        // smoltcp's fast retransmit of the first follows: held, it went already.
        let mut again = sent[0].clone();
        assert!(!w.admits(&mut again, t(11)));
        w.observe(&peer_sack(TcpControl::None, 1001, sack), t(12));
        assert!(w.outbox.is_empty(), "not again within the round trip");
        // Acknowledged: the copies go.
        w.observe(&peer_sack(TcpControl::None, 11_001, [None; 3]), t(13));
        assert_eq!(w.flows[&key()].copies.len(), 0);
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
