//! One port's TCP: smoltcp's interface and sockets, and the glue that moves each
//! connection's bytes between them and the engine's QPs. The node holds no engine: each step
//! that feeds or drains one takes the caller's [`Rnic`]. Single-threaded and lock-free: a
//! poll-mode core owns a `Node` and its `Rnic` side by side ([`crate::worker::turn`]).
//!
//! Split the way Linux siw splits its QP code (transmit, receive, connection management):
//! - this file: the node, the steps of its turn ([`Node::receive`], [`Node::exchange`],
//!   [`Node::transmit`]) and counters;
//! - `conn.rs`: a connection's life, its TCP state turned into its QP's and, in relay mode,
//!   into events for the control plane; reclaiming what ended;
//! - `relay.rs`: relay mode, the daemon's: the control plane runs the MPA exchange over
//!   [`Node::relay_send`] and [`NodeEvent::Bytes`] and puts the QP in RTS with
//!   [`Node::relay_rts`];
//! - `mpa_setup.rs`: the node running MPA itself ([`Node::listen`], [`Node::connect`]), for
//!   tests and benchmarks with no control plane;
//! - `stream.rs`: in RTS, received bytes into the engine and its FPDUs into TCP, each FPDU
//!   aligned to a segment (RFC 5044 section 8), within the congestion window;
//! - `cc/`: congestion control and loss recovery, sans-IO (see [`cc`]).

use crate::arp::ArpPacer;
use crate::clock::DilatedClock;
use crate::device::PortDevice;
use crate::neighbours::{self, NeighbourKeeper};
use crate::peer_tcp::FlowKey;
use crate::port::Port;
use iwarp_abi::command::CloseReason;
use iwarp_engine::{ConnParams, IdIndex, PeerToPeer, QpId, Rnic, RtrKind};
use iwarp_wire::mpa::negotiation::{self, Negotiated, Settings, SetupError};
use rustc_hash::FxHashMap;
use smoltcp::iface::{Config as IfaceConfig, Interface, PollResult};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint, Ipv4Address};
use sockets::{Sock, Sockets};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};

/// TCP settings of a node.
#[derive(Debug, Clone, Copy)]
pub struct TcpSettings {
    pub rx_buffer: usize,
    pub tx_buffer: usize,
    pub min_rto_us: u64,
    pub mss: usize,
    /// Bytes queued in TCP and not yet acknowledged, at most: the node's own fixed window.
    /// It bounds what one timeout resends and keeps segments MSS-aligned.
    pub max_inflight: usize,
    /// Bytes all the node's connections may have unacknowledged together, shared equally
    /// among those sending (`tcp.worker_inflight`; see `Node::inflight_share`).
    pub worker_inflight: usize,
    /// A connection whose peer sends nothing this long (real time in which our poll loop
    /// ran; keep-alives go every quarter of it) is given up, and its QP enters Error: how a
    /// dead peer is detected.
    pub user_timeout: std::time::Duration,
    /// How long the ACK of a lone small segment may wait for data to ride on (real time);
    /// zero: at once. The daemon's default (`tcp.ack_delay_us`) is 5 µs.
    pub ack_delay: std::time::Duration,
    /// The congestion controller of every connection (`tcp.congestion`).
    pub congestion: cc::Algorithm,
    /// How long a peer may hold an ACK (Linux: 40 ms and more): nothing is resent on a
    /// timeout before its RTT plus this (`tcp.peer_ack_delay_us`).
    pub peer_ack_delay: std::time::Duration,
    /// Whether connections negotiate ECN (RFC 3168; `tcp.ecn`).
    pub ecn: bool,
}

/// The daemon's defaults (those of an empty configuration file).
impl Default for TcpSettings {
    fn default() -> TcpSettings {
        TcpSettings::from_config(&iwarp_config::Config::default())
    }
}

impl TcpSettings {
    /// The settings the configuration gives: its `tcp` section, with the segment size and
    /// in-flight bound derived from `port.mtu` where the file leaves them out.
    pub fn from_config(cfg: &iwarp_config::Config) -> TcpSettings {
        TcpSettings {
            rx_buffer: cfg.tcp.rx_buffer,
            tx_buffer: cfg.tcp.tx_buffer,
            min_rto_us: cfg.tcp.min_rto_us,
            mss: cfg.mss(),
            max_inflight: cfg.max_inflight(),
            worker_inflight: cfg.worker_inflight(),
            user_timeout: std::time::Duration::from_millis(cfg.tcp.user_timeout_ms),
            ack_delay: std::time::Duration::from_micros(cfg.tcp.ack_delay_us),
            congestion: match cfg.tcp.congestion {
                iwarp_config::Congestion::Cubic => cc::Algorithm::Cubic,
                iwarp_config::Congestion::NewReno => cc::Algorithm::NewReno,
                iwarp_config::Congestion::Dctcp => cc::Algorithm::Dctcp,
                iwarp_config::Congestion::None => cc::Algorithm::None,
            },
            peer_ack_delay: std::time::Duration::from_micros(cfg.tcp.peer_ack_delay_us),
            ecn: cfg.ecn(),
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnState {
    /// TCP is being set up.
    Connecting,
    /// Initiator: Request sent, waiting for the Reply.
    AwaitReply,
    /// Responder: waiting for the Request.
    AwaitRequest,
    /// MPA done: the stream belongs to the engine QP.
    Rts,
    /// Relay mode: TCP is up and the control plane runs the MPA exchange.
    Relay,
    /// Setup failed (reason), or the connection ended.
    Failed(String),
    Closed,
}

/// What a relay-mode connection did, for the control plane (see [`Node::take_events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// An active open completed.
    Established { conn: u32 },
    /// A passive open completed on a relay listener; `conn` is the node's id for it.
    Incoming {
        conn: u32,
        local_port: u16,
        peer: SocketAddrV4,
    },
    /// The peer's MPA Request or Reply (the whole frame, and nothing after it).
    Bytes { conn: u32, data: Vec<u8> },
    /// The connection ended or could not be opened.
    Closed { conn: u32, reason: CloseReason },
}

/// Ids the node chooses for accepted relay connections have the high bit set, so they never
/// meet the control plane's ids for active opens (which count from 1); the next 7 bits name
/// the worker ([`Node::set_worker`]), so the workers of one daemon never choose the same id.
pub const INCOMING_ID_BASE: u32 = 1 << 31;
/// Incoming ids one worker cycles through.
const INCOMING_IDS: u32 = 1 << 24;

/// How long an ended relay connection's socket may linger to finish (send its RST or FIN).
const RECLAIM_AFTER: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a connection whose QP is gone may take to finish its graceful close (the peer's
/// acknowledgement and FIN) before it is reset.
const ORPHAN_LINGER: std::time::Duration = std::time::Duration::from_secs(10);
/// ARP requests to one neighbour, at most one per this much real time (see [`ArpPacer`]):
/// ten a second where smoltcp on the dilated clock would send a thousand.
const ARP_REPEAT: std::time::Duration = std::time::Duration::from_millis(100);

/// The least time a TCP handshake may take, counted per connection from its first segment.
/// A burst of setups queues behind itself (a thousand SYNs, then their MPA frames, through
/// a poll loop that takes a burst of frames per turn), so the last of them may wait seconds
/// for a loop that is alive and working; the control plane's MPA setup has as long.
pub const SETUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

struct Listener {
    port: u16,
    sockets: Vec<Sock>,
}

struct Conn {
    /// The caller's id: its index for [`Node::listen`]/[`Node::connect`], control's id (or
    /// one the node chose, high bit set, for an accepted connection) in relay mode.
    id: u32,
    handle: Sock,
    /// The engine QP; in relay mode unknown until the control plane binds one.
    qp: Option<QpId>,
    initiator: bool,
    /// `None`: relay mode, the control plane runs MPA over [`Node::relay_send`] and
    /// [`NodeEvent::Bytes`]; `Some`: the node runs it with these settings.
    settings: Option<Settings>,
    /// Relay mode: the peer's MPA Request/Reply went up; later bytes wait for RTS.
    frame_relayed: bool,
    state: ConnState,
    inbuf: Vec<u8>,
    negotiated: Option<Negotiated>,
    ever_established: bool,
    /// A graceful close was asked for: the end that follows is not a reset.
    closing: bool,
    /// The socket was removed from the set (relay connections, once closed).
    socket_gone: bool,
    /// When the connection was first seen over (for reclaiming its socket).
    over_since: Option<std::time::Instant>,
    /// The listening port an accepted relay connection arrived on: steered to this worker
    /// until the connection's socket is gone, even once nobody listens there.
    accepted_on: Option<u16>,
    /// The connection as the device tracks its peer (MSS, window, reset), from when it was first
    /// seen established; None before, or when the peer's SYN was no longer remembered (then
    /// neither is known).
    flow: Option<FlowKey>,
    /// When the connection outlived its QP, finishing a graceful close (see
    /// [`Node::relay_release`]).
    orphaned_since: Option<std::time::Instant>,
    /// The peer's segment count ([`crate::peer_tcp::PeerTcp::heard`]) when last checked,
    /// and the node's live time when it last moved.
    heard: u64,
    heard_live: std::time::Duration,
    /// In the node's ready list ([`Node::exchange`] visits it this turn).
    queued: bool,
    /// In the node's list of connections with data in flight ([`Node::nudge`]).
    in_flight: bool,
    /// Octets of short FPDUs at the tail of the socket's queue that do not fill a segment:
    /// nothing but an FPDU that fits with them may be queued behind them until they are
    /// sent, or smoltcp would cut that FPDU across two segments.
    open_group: usize,
    /// An FPDU taken from the engine that could not be queued behind an unsent group (the
    /// port was pushing back); it goes first once the group is out.
    held_fpdu: Option<Box<[u8]>>,
    /// The last [`Senders`] period in which the connection queued data.
    sent_in: u64,
    /// Its QP had FPDUs to send when last looked at (counted in `Node::wanting`).
    wants_tx: bool,
    /// Where its socket, route, flow and sender lay at its last visit (see
    /// [`Node::prefetch_ahead`]).
    hints: Hints,
}

/// Addresses of a connection's state kept elsewhere, noted at each visit for cache hints
/// before the next (see `iwarp_abi::prefetch`). Never dereferenced: one that went stale
/// (its structure moved or freed since) costs a useless fetch, nothing more. 0: unknown.
#[derive(Clone, Copy, Default)]
struct Hints {
    socket: usize,
    /// Its entry in the routes of `sockets.rs`.
    route: usize,
    /// Its entry in the device's flows (`peer_tcp.rs`).
    flow: usize,
    sender: usize,
}

impl Hints {
    /// Asks the cache for the lines at each known address.
    fn prefetch(&self) {
        use iwarp_abi::prefetch::prefetch_addr;
        prefetch_addr(self.socket, size_of::<tcp::Socket>());
        prefetch_addr(self.route, Sockets::ROUTE_SIZE);
        prefetch_addr(self.flow, crate::peer_tcp::PeerTcp::FLOW_SIZE);
        prefetch_addr(self.sender, size_of::<cc::sender::Sender>());
    }
}

/// The connections that queued data in the current period of [`Senders::PERIOD`] of the
/// node's live time, and in the one before. A connection's acknowledgements may all come
/// back before it queues more, and it leaves the list of those with data in flight for that
/// moment: counted by that list alone, a round in which every stream drained would begin
/// with one sender, which would take the whole bound, the second half of it, and so on.
#[derive(Default)]
struct Senders {
    period: u64,
    now: usize,
    before: usize,
}

impl Senders {
    /// Longer than a round trip on the links the daemon serves.
    const PERIOD: std::time::Duration = std::time::Duration::from_millis(1);

    /// The period of live time `live`.
    fn period_of(live: std::time::Duration) -> u64 {
        (live.as_micros() / Self::PERIOD.as_micros()) as u64
    }

    /// A connection queued data in `period`; `sent_in` is its `Conn::sent_in`.
    fn sent(&mut self, sent_in: &mut u64, period: u64) {
        if period != self.period {
            // After a quiet gap too: the senders of the last period that had any.
            self.before = self.now;
            self.now = 0;
            self.period = period;
        }
        if *sent_in != period {
            *sent_in = period;
            self.now += 1;
        }
    }

    /// Connections that sent lately (`in_flight` have data in flight now).
    fn count(&self, in_flight: usize) -> usize {
        in_flight.max(self.now).max(self.before).max(1)
    }
}

/// Laps of the monotonic clock, or nothing when timing is off.
struct StageClock(Option<std::time::Instant>);

impl StageClock {
    fn new(on: bool) -> StageClock {
        StageClock(on.then(std::time::Instant::now))
    }
    /// Nanoseconds since the previous lap.
    #[inline]
    fn lap(&mut self) -> u64 {
        let Some(t) = self.0 else { return 0 };
        let now = std::time::Instant::now();
        self.0 = Some(now);
        now.duration_since(t).as_nanos() as u64
    }
}

impl Conn {
    fn new(
        id: u32,
        handle: Sock,
        qp: Option<QpId>,
        initiator: bool,
        settings: Option<Settings>,
    ) -> Conn {
        Conn {
            id,
            handle,
            qp,
            initiator,
            settings,
            frame_relayed: false,
            state: ConnState::Connecting,
            inbuf: Vec::new(),
            negotiated: None,
            ever_established: false,
            closing: false,
            socket_gone: false,
            over_since: None,
            accepted_on: None,
            flow: None,
            orphaned_since: None,
            heard: 0,
            heard_live: std::time::Duration::ZERO,
            queued: false,
            in_flight: false,
            open_group: 0,
            held_fpdu: None,
            sent_in: u64::MAX,
            wants_tx: false,
            hints: Hints::default(),
        }
    }

    /// Whether the QP owns (or, node-run MPA, will own) this connection's stream, so that
    /// its end is the QP's too. A relay connection that ends during setup never gave its QP
    /// a stream: the QP stays Idle and can be connected again (control reports the failure).
    fn has_stream(&self) -> bool {
        self.settings.is_some() || self.state == ConnState::Rts
    }

    fn is_over(&self) -> bool {
        matches!(self.state, ConnState::Failed(_) | ConnState::Closed)
    }

    /// In RTS with nothing in progress but its stream: visited only when something marks it
    /// (its peer's segments, its QP's work). Any other connection (in setup, closing,
    /// orphaned, over, or whose peer is not tracked) is visited every turn until it settles
    /// or its socket is gone.
    fn is_steady(&self) -> bool {
        self.socket_gone
            || (self.state == ConnState::Rts
                && self.flow.is_some()
                && !self.closing
                && self.orphaned_since.is_none())
    }
}

/// Nanoseconds the poll loop spent per stage, summed over the turns that did work (see
/// [`Node::set_stage_timing`]). `tcp` includes smoltcp handing frames to the port's transmit
/// queue; `port` is the receive bursts and the final transmit flush.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageNs {
    pub port: u64,
    pub tcp: u64,
    pub engine: u64,
}

/// Per-node counters, readable while it runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub fpdus_tx: u64,
    pub stream_bytes_rx: u64,
    /// Frames the port could not send or deliver (see [`Port::dropped`]).
    pub drops: u64,
    /// smoltcp's answers to received segments held while the port's queue was full, the
    /// latest per connection, instead of dropped (see `device.rs`).
    pub acks_held: u64,
    /// Received TCP segments with a wrong checksum, dropped (by the device or in software).
    pub bad_checksums: u64,
    /// Repeats of unanswered ARP requests held back (see [`crate::arp::ArpPacer`]): a
    /// growing count names a neighbour that does not answer.
    pub arp_paced: u64,
    /// Connections that ended other than by our own shutdown (peer reset or closed, user
    /// timeout, failed setup).
    pub conns_lost: u64,
    /// Connections in setup or RTS now.
    pub connections: u64,
    /// From the engine: FPDUs with a bad MPA CRC, Terminates sent and received.
    pub crc_errors: u64,
    pub terminates_sent: u64,
    pub terminates_received: u64,
    /// Stage times when stage timing is on.
    pub stages: Option<StageNs>,
    /// The congestion windows and the octets in flight of the connections, summed.
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    /// Segments resent, of them on duplicate or partial ACKs, retransmission timeouts, ACKs
    /// echoing ECN and CE marks received, recoveries found spurious and undone, resends the
    /// peer reported twice (DSACK), resends of smoltcp's held back (not due, or data the peer
    /// holds), SYN repeats held back.
    pub retransmits: u64,
    pub fast_retransmits: u64,
    pub rtos: u64,
    pub ecn_marks: u64,
    pub spurious_retransmits: u64,
    pub dsack_spurious: u64,
    pub resends_held: u64,
    pub syns_held: u64,
}

impl Counters {
    /// These counters with the engine's error counters.
    pub fn with_engine(self, engine: &iwarp_engine::Stats) -> Counters {
        Counters {
            crc_errors: engine.crc_errors,
            terminates_sent: engine.terminates_sent,
            terminates_received: engine.terminates_received,
            ..self
        }
    }
}

/// One connection's TCP sending side (see [`Node::conn_tcp`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnTcp {
    pub cwnd: usize,
    pub bytes_in_flight: usize,
    pub srtt: Option<std::time::Duration>,
    pub rto: std::time::Duration,
    pub counters: cc::sender::SendCounters,
    /// Both ends agreed to ECN (RFC 3168 section 6.1.1).
    pub ecn: bool,
}

pub struct Node<P: Port> {
    iface: Interface,
    sockets: Sockets,
    /// The sockets' rings: declared after `sockets`, so dropped after the sockets that hold
    /// them.
    mem: sockmem::SocketMem,
    dev: PortDevice<P>,
    clock: DilatedClock,
    /// The current poll turn's start, in smoltcp's time: what every egress in the turn runs
    /// at, so that the time the turn itself takes cannot expire a retransmission timer
    /// between two groups of FPDUs (smoltcp would resend from the oldest unacknowledged
    /// octet, cutting across FPDUs, the group just queued with it).
    turn_now: smoltcp::time::Instant,
    tcp: TcpSettings,
    conns: Vec<Conn>,
    fpdu: Vec<u8>,
    fpdus_tx: u64,
    stream_rx: u64,
    conns_lost: u64,
    listeners: Vec<Listener>,
    events: VecDeque<NodeEvent>,
    next_incoming: u32,
    incoming_base: u32,
    next_ephemeral: u16,
    stage_timing: bool,
    stages: StageNs,
    /// The TCP counters summed over the connections (see [`Node::counters`]) as the poll loop
    /// last refreshed them (with many connections), and when (in `live`) it next does.
    tcp_totals: (cc::sender::SendCounters, usize, usize),
    next_totals: std::time::Duration,
    /// Connections in setup or RTS, counted when `tcp_totals` is summed.
    live_conns: u64,
    /// Real time the poll loop has lived through, each turn counting at most a keep-alive
    /// interval: a dead peer is one silent this long, so that time our own loop spent
    /// stalled (when it could neither send probes nor read answers) never counts against
    /// the peer.
    live: std::time::Duration,
    /// The previous turn's start, in real microseconds of the clock.
    last_turn_us: u64,
    /// When (in `live`) peers are next checked for silence.
    next_liveness: std::time::Duration,
    /// Connections to visit this turn, each once (`Conn::queued`): marked by their peer's
    /// segments, their QP's work ([`Rnic::next_tx_ready`]), or being unsettled.
    ready: VecDeque<usize>,
    /// Connections with data in flight (`Conn::in_flight`), the ones a resend may be due on.
    flight: Vec<usize>,
    /// How many connections are sending, for their shares of `TcpSettings::worker_inflight`.
    senders: Senders,
    /// Connection by its QP and by its peer's flow, rebuilt when connections move.
    by_qp: IdIndex<QpId>,
    by_flow: FxHashMap<FlowKey, usize>,
    /// Relay connection by control's id, while its socket lives.
    by_id: FxHashMap<u32, usize>,
    /// Connections indexed so far (new ones are marked once seen).
    indexed: usize,
    /// A socket was reclaimed this turn, and the connections reclaimed but still in `conns`
    /// (see `Node::forget_reclaimed`).
    reclaimed: bool,
    unforgotten: usize,
    /// Times `conns` was compacted (see [`Node::conn_moves`]).
    conn_moves: u64,
    /// Connections visited, over all turns (see [`Node::visits`]).
    visits: u64,
    /// The current turn: its stage clock and times, frames received, whether the port was
    /// drained and whether it did work.
    stage: StageClock,
    turn_t: StageNs,
    turn_got: usize,
    /// Octets of new FPDUs this turn may still queue in TCP (see [`Node::exchange`]).
    turn_budget: usize,
    /// Connections whose QP had FPDUs to send when last looked at: those that share the
    /// node's in-flight bound (see `Node::inflight_share`).
    wanting: usize,
    turn_drained: bool,
    turn_busy: bool,
}

/// With this many connections or fewer, [`Node::counters`] sums their TCP counters and
/// counts the live ones when asked; with more, the poll loop does every [`TOTALS_EVERY`] of
/// live time, and the counters show that. The sum walks every connection, so it is paced
/// by time, not turns: every few hundred turns, 10,000 idle connections would take an
/// eighth of a busy core.
const TOTALS_EACH_TURN: usize = 16;

/// Connections one turn visits at most ([`Node::exchange`]); the rest of the ready list
/// waits, in order, for the next turn. The port is read once a turn, so a turn that visited
/// every one of thousands of busy connections (milliseconds each thousand, their state out
/// of the cache) would leave it unread that long: the peer's frames would queue for
/// hundreds of milliseconds, and the connections whose frames waited longest would look
/// silent.
const VISITS_PER_TURN: usize = 1024;
/// The stats file, the sums' only reader, is rewritten once a second: a sum more often is
/// a walk (about 0.8 ms at 10,000 connections, their state met cold) that no one reads.
const TOTALS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub mod cc;
mod conn;
mod mpa_setup;
mod relay;
mod sockets;
mod sockmem;
mod stream;

impl<P: Port> Node<P> {
    pub fn new(port: P, ip: Ipv4Addr, prefix: u8, tcp: TcpSettings) -> Node<P> {
        let clock = DilatedClock::new(tcp.min_rto_us);
        let arp = ArpPacer::new(clock.real_to_virtual(ARP_REPEAT));
        let mut dev = PortDevice::new(port, arp, tcp.mss);
        dev.peers.set_dilation(clock.factor());
        dev.peers.set_ecn(match (tcp.ecn, tcp.congestion) {
            (false, _) => cc::ecn::Mode::Off,
            (true, cc::Algorithm::Dctcp) => cc::ecn::Mode::Dctcp,
            (true, _) => cc::ecn::Mode::Classic,
        });
        let mac = EthernetAddress(dev.port.mac());
        let mut cfg = IfaceConfig::new(HardwareAddress::Ethernet(mac));
        cfg.random_seed = u64::from_le_bytes([
            mac.0[0], mac.0[1], mac.0[2], mac.0[3], mac.0[4], mac.0[5], 0x5a, 0xa5,
        ]);
        dev.neighbours = Some(NeighbourKeeper::new(
            mac.0,
            ip.octets(),
            clock.real_to_virtual(neighbours::LIFETIME),
            clock.real_to_virtual(neighbours::REFRESH),
        ));
        let mut iface = Interface::new(cfg, &mut dev, clock.now());
        let [a, b, c, d] = ip.octets();
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(IpCidr::new(
                IpAddress::Ipv4(Ipv4Address::new(a, b, c, d)),
                prefix,
            ));
        });
        Node {
            iface,
            sockets: Sockets::default(),
            mem: sockmem::SocketMem::default(),
            dev,
            turn_now: clock.now(),
            clock,
            tcp,
            conns: Vec::new(),
            fpdu: vec![0; tcp.mss],
            fpdus_tx: 0,
            stream_rx: 0,
            conns_lost: 0,
            listeners: Vec::new(),
            events: VecDeque::new(),
            next_incoming: INCOMING_ID_BASE,
            incoming_base: INCOMING_ID_BASE,
            next_ephemeral: 49152 + (u16::from(mac.0[5]) << 4),
            stage_timing: false,
            stages: StageNs::default(),
            tcp_totals: Default::default(),
            next_totals: std::time::Duration::ZERO,
            live_conns: 0,
            live: std::time::Duration::ZERO,
            last_turn_us: 0,
            next_liveness: std::time::Duration::ZERO,
            ready: VecDeque::new(),
            flight: Vec::new(),
            senders: Senders::default(),
            by_qp: IdIndex::new(),
            by_flow: FxHashMap::default(),
            by_id: FxHashMap::default(),
            indexed: 0,
            reclaimed: false,
            unforgotten: 0,
            conn_moves: 0,
            visits: 0,
            stage: StageClock::new(false),
            turn_t: StageNs::default(),
            turn_got: 0,
            turn_budget: 0,
            wanting: 0,
            turn_drained: false,
            turn_busy: false,
        }
    }

    fn socket(&mut self) -> Sock {
        let (rx, tx, rings) = sockmem::buffers(self.tcp.rx_buffer, self.tcp.tx_buffer);
        let mut s = tcp::Socket::new(rx, tx);
        // RDMA latency: no Nagle; the ACK of a lone small segment held a few microseconds
        // (`TcpSettings::ack_delay`) for the answer to carry it.
        s.set_nagle_enabled(false);
        let delay = self.tcp.ack_delay;
        s.set_ack_delay((!delay.is_zero()).then(|| self.clock.real_to_virtual(delay)));
        // smoltcp's congestion controllers count the window in bytes and cut segments at its
        // edge, which breaks FPDU alignment. We bound what is in flight ourselves instead
        // (`TcpSettings::max_inflight`, whole segments), and smoltcp sends what we queue.
        s.set_congestion_control(tcp::CongestionControl::None);
        // smoltcp's timeout counts from the connection's own first segment, then from the
        // last segment received, so an idle connection needs keep-alives (a quarter of the
        // user timeout) to stay up while its peer lives. The timeout guards only the setup
        // ([`SETUP_TIMEOUT`] at least): once the peer's segments are tracked, the node
        // itself judges silence (`Node::check_peers`), in time its own loop was running.
        let setup = self.tcp.user_timeout.max(SETUP_TIMEOUT);
        s.set_timeout(Some(self.clock.real_to_virtual(setup)));
        s.set_keep_alive(Some(self.clock.real_to_virtual(self.tcp.user_timeout / 4)));
        self.add_socket(s, rings)
    }

    /// This node is worker `index` (below 128) of a daemon: the ids it gives incoming
    /// connections are its own.
    pub fn set_worker(&mut self, index: usize) {
        self.incoming_base = INCOMING_ID_BASE | ((index as u32 & 0x7f) << 24);
        self.next_incoming = self.incoming_base;
    }

    /// Claims `port` on a shared port's steering, so its frames come to this worker.
    fn claim(&mut self, port: u16) -> Result<(), String> {
        if self.dev.port.claim_tcp_port(port) {
            Ok(())
        } else {
            Err(format!("port {port} is listened on by another worker"))
        }
    }

    /// The node's counters; the engine's are added by [`Counters::with_engine`].
    pub fn counters(&self) -> Counters {
        let ((send, cwnd, flight), live_conns) = if self.conns.len() <= TOTALS_EACH_TURN {
            (self.dev.peers.totals(), self.count_live())
        } else {
            (self.tcp_totals, self.live_conns)
        };
        Counters {
            cwnd: cwnd as u64,
            bytes_in_flight: flight as u64,
            retransmits: send.retransmits,
            fast_retransmits: send.fast_retransmits,
            rtos: send.rtos,
            ecn_marks: send.ecn_marks,
            spurious_retransmits: send.spurious,
            dsack_spurious: send.dsacked,
            resends_held: send.held,
            syns_held: self.dev.peers.syns_held,
            rx_frames: self.dev.rx_frames,
            tx_frames: self.dev.tx_frames,
            rx_bytes: self.dev.rx_bytes,
            tx_bytes: self.dev.tx_bytes,
            fpdus_tx: self.fpdus_tx,
            stream_bytes_rx: self.stream_rx,
            drops: self.dev.port.dropped(),
            acks_held: self.dev.acks_held,
            bad_checksums: self.dev.port.bad_checksums() + self.dev.rx_bad_checksum,
            arp_paced: self.dev.arp.dropped,
            conns_lost: self.conns_lost,
            connections: live_conns,
            stages: self.stage_timing.then_some(self.stages),
            ..Counters::default()
        }
    }

    /// Connection `conn`'s sending side, once established and tracked.
    pub fn conn_tcp(&self, conn: usize) -> Option<ConnTcp> {
        let key = self.conns.get(conn)?.flow?;
        let s = self.dev.peers.sender(key)?;
        Some(ConnTcp {
            ecn: self.dev.peers.ecn(key),
            cwnd: s.cwnd(),
            bytes_in_flight: s.in_flight(),
            srtt: s.rtt.srtt(),
            rto: s.rto(),
            counters: s.counters,
        })
    }

    /// The stats file's lines of at most `max` connections from the `from`th on, appended to
    /// `out`: one per connection whose sending side is tracked, `conn` and then `key=value`
    /// pairs (the connection's id, its QP, and [`ConnTcp`]). Returns where the next slice
    /// starts (the connection count once all are done). Connections keep their places
    /// between slices until [`Node::conn_moves`] changes.
    pub fn conn_lines_from(&self, from: usize, max: usize, out: &mut String) -> usize {
        let to = from.saturating_add(max).min(self.conns.len());
        for (i, c) in self.conns.iter().enumerate().take(to).skip(from) {
            let Some(t) = self.conn_tcp(i) else { continue };
            let k = t.counters;
            out.push_str(&format!(
                "conn id={} qp={} cwnd={} bytes_in_flight={} srtt_us={} rto_us={} \
                 retransmits={} fast_retransmits={} rtos={} ecn_marks={} \
                 spurious_retransmits={} dsack_spurious={} resends_held={}\n",
                c.id,
                c.qp.map_or("-".to_string(), |q| q.to_string()),
                t.cwnd,
                t.bytes_in_flight,
                t.srtt.map_or(0, |d| d.as_micros()),
                t.rto.as_micros(),
                k.retransmits,
                k.fast_retransmits,
                k.rtos,
                k.ecn_marks,
                k.spurious,
                k.dsacked,
                k.held,
            ));
        }
        to
    }

    /// Connections in the list [`Node::conn_lines_from`] walks, in any state.
    pub fn conn_slots(&self) -> usize {
        self.conns.len()
    }

    /// Counts the times connections left the list and the rest moved up (see
    /// [`Node::conn_lines_from`]).
    pub fn conn_moves(&self) -> u64 {
        self.conn_moves
    }

    /// Makes smoltcp resend the first unacknowledged segment of each connection whose
    /// sender asks for it (a partial ACK in recovery, or our timer expired before smoltcp's):
    /// three copies of the peer's latest ACK, which smoltcp takes as duplicate ACKs and
    /// answers with its fast retransmit (one segment, where its own timeout would resend
    /// everything). smoltcp offers no call to resend; this is the one way in from outside.
    /// Only connections with data in flight are looked at (see [`Node::exchange`]).
    fn nudge(&mut self, now: smoltcp::time::Instant) -> bool {
        let mut any = false;
        let host_busy = !self.dev.port.tx_ready();
        let mut k = 0;
        while k < self.flight.len() {
            let c = &self.conns[self.flight[k]];
            let key = c
                .flow
                .filter(|_| c.state == ConnState::Rts && !c.socket_gone);
            if let Some(ack) = key.and_then(|key| self.dev.peers.nudge(key, now, host_busy)) {
                for _ in 0..3 {
                    self.dev.push_local(ack.clone());
                }
                any = true;
                k += 1;
                continue;
            }
            // Off the list once TCP holds nothing unacknowledged: the sender's own count
            // of what is in flight leaves out what it judged lost, which still needs its
            // resend.
            let c = &mut self.conns[self.flight[k]];
            if key.is_none() || self.sockets.get::<tcp::Socket>(c.handle).send_queue() == 0 {
                c.in_flight = false;
                self.flight.swap_remove(k);
                continue;
            }
            k += 1;
        }
        if any {
            self.iface_ingress(now);
        }
        any
    }

    /// Clean shutdown: every live connection is aborted (a RST goes to each peer, its QP
    /// enters Error with flushed work), and the RSTs are sent before returning.
    pub fn shutdown(&mut self, rnic: &mut Rnic) {
        for i in 0..self.conns.len() {
            if !matches!(
                self.conns[i].state,
                ConnState::Failed(_) | ConnState::Closed
            ) {
                self.abort(rnic, i);
            }
        }
        self.iface_poll();
        let _ = self.dev.port.flush();
        self.live_conns = self.count_live();
    }

    /// Connections in setup or RTS.
    fn count_live(&self) -> u64 {
        self.conns.iter().filter(|c| !c.is_over()).count() as u64
    }

    pub fn port(&self) -> &P {
        &self.dev.port
    }

    /// What an idle poll loop may sleep on until a frame arrives (see [`Port::wait_fd`]);
    /// `None` while frames already received wait for the next poll.
    pub fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        if self.dev.has_rx() {
            return None;
        }
        self.dev.port.wait_fd()
    }

    /// The port's inbox descriptor (frames handed over by another worker), which an idle
    /// loop waits on whatever else it waits on ([`Port::inbox_fd`]).
    pub fn inbox_fd(&self) -> Option<std::os::fd::RawFd> {
        self.dev.port.inbox_fd()
    }

    /// Tells the port the loop is about to sleep or is awake ([`Port::set_asleep`]).
    pub fn set_asleep(&mut self, asleep: bool) {
        self.dev.port.set_asleep(asleep)
    }

    fn iface_poll(&mut self) {
        let now = self.clock.now();
        self.iface_egress(now);
    }

    /// What was received into TCP, then what TCP has to send, a round over the sockets at a
    /// time while the port takes frames (see `PortDevice::open_round`): what it does not
    /// take stays in TCP, unsent, until a later turn.
    ///
    /// Returns whether TCP sent all it would: false when the port stopped taking frames first.
    fn iface_egress(&mut self, now: smoltcp::time::Instant) -> bool {
        self.iface_ingress(now);
        self.dev.release_held();
        self.sockets.take_due(now);
        // Rounds over the shards with something to do, each shard leaving once it sends
        // nothing more (see `sockets.rs`).
        while !self.sockets.touched().is_empty() {
            if !self.dev.open_round() {
                self.dev.close_round();
                return false;
            }
            let mut k = 0;
            while k < self.sockets.touched().len() {
                let set = self.sockets.set_mut(self.sockets.touched()[k]);
                if self.iface.poll_egress(now, &mut self.dev, set) == PollResult::None {
                    let at = self.iface.poll_at(now, set);
                    self.sockets.settle(k, at);
                } else {
                    k += 1;
                }
            }
        }
        self.dev.close_round();
        true
    }

    /// Received frames into TCP, nothing out yet: the ACK for a request then leaves with the
    /// engine's answer (a Read Response, a Send) in one segment instead of a pure ACK
    /// first, which would cost a frame and wake the peer for nothing.
    fn iface_ingress(&mut self, now: smoltcp::time::Instant) {
        self.iface.poll_maintenance(now);
        while let Some((key, made)) = self.dev.next_rx_flow() {
            // An ARP frame from the wire may resolve a neighbour that sockets anywhere wait
            // for; the keeper's renewals (every 20 ms) only refresh a known one.
            let shard = self.sockets.shard_for(key, key.is_none() && !made);
            let set = self.sockets.set_mut(shard);
            self.iface.poll_ingress_single(now, &mut self.dev, set);
        }
    }

    /// One turn with no host: [`Node::receive`], [`Node::exchange`], [`Node::transmit`].
    /// Returns whether anything happened. The daemon's turn puts the host's steps between
    /// them ([`crate::worker::turn`]).
    pub fn poll(&mut self, rnic: &mut Rnic) -> bool {
        let mut busy = self.receive();
        busy |= self.exchange(rnic);
        self.transmit();
        busy
    }

    /// The turn's first step: what the port holds into TCP (up to
    /// [`crate::device::RX_BURSTS_PER_TURN`] bursts), and the ACKs of a stream's segments out
    /// at once. No received byte reaches an engine yet: the host posts the receives
    /// applications queued between this step and [`Node::exchange`], so a message that
    /// arrived after its receive was posted always finds it. Returns whether frames arrived.
    pub fn receive(&mut self) -> bool {
        self.stage = StageClock::new(self.stage_timing);
        self.turn_t = StageNs::default();
        let mut got = 0;
        // One clock read per turn: TCP sees the turn's start for what it receives and sends
        // (the turn lasts microseconds; a clock read costs as much as a TCP segment here).
        let (now, real_us) = self.clock.now_and_real();
        self.turn_now = now;
        self.dev.keep_neighbours(now);
        self.advance_live(real_us);
        let mut drained = false;
        for _ in 0..crate::device::RX_BURSTS_PER_TURN {
            let n = self.dev.fill();
            self.prefetch_received();
            self.turn_t.port += self.stage.lap();
            got += n;
            self.iface_ingress(now);
            self.turn_t.tcp += self.stage.lap();
            if n == 0 || self.dev.port.rx_drained() {
                drained = true;
                break;
            }
        }
        // A stream's segments are acknowledged now, and the ACK sent, before the engine works
        // through them: a turn may take in everything the sender has in flight, and an ACK
        // held until the turn's end left the sender waiting for the whole turn (RFC 5681 asks
        // for an ACK at least every second full segment). A lone segment's ACK still waits
        // to ride on the answer.
        if got > 1 {
            self.iface_egress(now);
            self.turn_t.tcp += self.stage.lap();
            let _ = self.dev.port.flush();
            self.turn_t.port += self.stage.lap();
        }
        got += usize::from(self.nudge(now));
        self.turn_got = got;
        self.turn_budget = self.tcp.max_inflight;
        self.turn_drained = drained;
        got > 0
    }

    /// The turn's middle step: peers judged for silence when due, new connections
    /// accepted, and each connection with work visited: its TCP state acted on, its received
    /// bytes into its QP, the QP's FPDUs into TCP. Visited are the connections marked since
    /// the last turn (their peer's segments, their QP's work) and those not yet settled in
    /// RTS; every connection once per liveness period, for what only time changes.
    ///
    /// A turn queues new FPDUs of at most `tcp.max_inflight` octets over all its
    /// connections, what one connection may have in flight: the frames a turn sends, and the
    /// stretches of rings and memory they pass through, are then no more with fifty streams
    /// than with one, and stay in the caches (unbounded, fifty streams moved four times
    /// one stream's octets a turn). The connections the turn did not reach go first next
    /// turn. Returns whether anything happened.
    pub fn exchange(&mut self, rnic: &mut Rnic) -> bool {
        // What ran since the receive step (the host's rings) is timed by its owner.
        self.stage.lap();
        // Silence is judged only once everything that arrived has been read: an answer
        // still waiting in our own receive queue is an answer.
        if self.turn_drained && self.live >= self.next_liveness {
            self.next_liveness = self.live + self.tcp.user_timeout / 16;
            self.check_peers(rnic);
            self.trim_idle();
            for i in 0..self.conns.len() {
                self.mark(i);
            }
        }
        let mut busy = self.turn_got > 0;
        busy |= self.accept_incoming();
        self.mark_ready(rnic);
        let visits = self.ready.len().min(VISITS_PER_TURN);
        // Connections left for the next turn are work: the loop must not sleep on them.
        busy |= visits < self.ready.len();
        for _ in 0..visits {
            if self.turn_budget < self.tcp.mss {
                // The turn queued its budget: the rest of the ready list goes first next
                // turn, in order.
                busy = true;
                break;
            }
            let Some(i) = self.ready.pop_front() else {
                break;
            };
            self.conns[i].queued = false;
            self.visits += 1;
            self.prefetch_ahead(rnic, i);
            busy |= self.service(rnic, i);
            self.note_hints(i);
            let wants = self.conns[i].qp.is_some_and(|qp| rnic.wants_transmit(qp));
            self.set_wants_tx(i, wants);
            let c = &self.conns[i];
            if !c.is_steady() || c.held_fpdu.is_some() || wants {
                self.mark(i);
            }
        }
        self.forget_reclaimed();
        self.turn_t.engine += self.stage.lap();
        self.turn_busy = busy;
        busy
    }

    /// The turn's last step: what TCP has to send onto the port, and the port flushed.
    pub fn transmit(&mut self) {
        self.iface_egress(self.turn_now);
        self.turn_t.tcp += self.stage.lap();
        let _ = self.dev.port.flush();
        self.turn_t.port += self.stage.lap();
        if self.conns.len() > TOTALS_EACH_TURN && self.live >= self.next_totals {
            self.next_totals = self.live + TOTALS_EVERY;
            self.tcp_totals = self.dev.peers.totals();
            self.live_conns = self.count_live();
        }
        if self.turn_busy && self.stage_timing {
            self.stages.port += self.turn_t.port;
            self.stages.tcp += self.turn_t.tcp;
            self.stages.engine += self.turn_t.engine;
        }
        self.turn_busy = false;
    }

    /// Connections visited by [`Node::exchange`] so far, over all turns: with many idle
    /// connections, it grows with the active ones only.
    pub fn visits(&self) -> u64 {
        self.visits
    }

    /// Sockets smoltcp was handed in sets to receive into or send from, over all turns: with
    /// many idle connections, it grows with the active ones only (see `sockets.rs`).
    pub fn sockets_offered(&self) -> u64 {
        self.sockets.offered
    }

    /// Asks the cache for the state of the connections visited next: the entry of the one
    /// after next, and the next one's socket, route, flow, sender and QP at the addresses
    /// its entry noted; and for the oldest WR of connection `i`'s QP, about to be visited,
    /// whose lines the last visit asked for. With thousands of connections each visit meets
    /// its connection's state cold, several structures that are each a chain of misses;
    /// fetched ahead, their misses overlap the work before them instead of following one
    /// another.
    fn prefetch_ahead(&self, rnic: &Rnic, i: usize) {
        use iwarp_abi::prefetch::prefetch;
        if let Some(qp) = self.conns[i].qp {
            rnic.prefetch_sq_head(qp);
        }
        if let Some(c) = self.ready.get(1).and_then(|&j| self.conns.get(j)) {
            prefetch(c);
        }
        let Some(c) = self.ready.front().and_then(|&j| self.conns.get(j)) else {
            return;
        };
        c.hints.prefetch();
        if let Some(qp) = c.qp {
            rnic.prefetch_qp(qp);
        }
    }

    /// Asks the cache for what the frames just received will meet, each its connection's
    /// entry and, at the addresses that entry noted, its route, flow, sender and socket.
    /// Looked up frame after frame as smoltcp reads them, each of those is a chain of
    /// misses that follow one another; here the frames' lookups do not depend on each
    /// other, so their misses overlap.
    fn prefetch_received(&self) {
        use iwarp_abi::prefetch::prefetch;
        let mut entries = [0usize; crate::port::RX_BURST];
        let mut n = 0;
        for frame in self.dev.received().take(entries.len()) {
            let Some(i) = FlowKey::of_frame(frame).and_then(|k| self.by_flow.get(&k)) else {
                continue;
            };
            if let Some(c) = self.conns.get(*i) {
                prefetch(c);
                entries[n] = *i;
                n += 1;
            }
        }
        for &i in &entries[..n] {
            self.conns[i].hints.prefetch();
        }
    }

    /// Notes where connection `i`'s socket, route, flow and sender are, for the hints
    /// before it is next met; its state was just visited, so the lookups hit the cache.
    fn note_hints(&mut self, i: usize) {
        let c = &self.conns[i];
        if c.socket_gone {
            return;
        }
        let socket = iwarp_abi::prefetch::address_of(self.sockets.get::<tcp::Socket>(c.handle));
        let (flow, sender) = c.flow.map_or((0, 0), |k| self.dev.peers.hints(k));
        let route = c.flow.map_or(0, |k| self.sockets.route_hint(k));
        self.conns[i].hints = Hints {
            socket,
            route,
            flow,
            sender,
        };
    }

    /// Notes whether connection `i`'s QP has FPDUs to send, counted in `wanting`; a
    /// connection whose socket is gone never counts (the engine may still list its QP
    /// before the maps are rebuilt).
    fn set_wants_tx(&mut self, i: usize, wants: bool) {
        let c = &mut self.conns[i];
        let wants = wants && !c.socket_gone;
        if c.wants_tx != wants {
            c.wants_tx = wants;
            if wants {
                self.wanting += 1;
            } else {
                self.wanting -= 1;
            }
        }
    }

    /// Puts connection `i` in the ready list, once.
    fn mark(&mut self, i: usize) {
        if let Some(c) = self.conns.get_mut(i) {
            if !c.queued && !c.socket_gone {
                c.queued = true;
                self.ready.push_back(i);
            }
        }
    }

    /// Marks the connections with work: new ones, those whose QP the engine listed, those
    /// whose peer sent segments this turn.
    fn mark_ready(&mut self, rnic: &mut Rnic) {
        let n = self.conns.len();
        if self.indexed < n {
            // Room for every connection in the lists, so that marking never allocates.
            self.ready.reserve(n.saturating_sub(self.ready.len()));
            self.flight.reserve(n.saturating_sub(self.flight.len()));
        }
        for i in self.indexed..n {
            if let Some(qp) = self.conns[i].qp {
                self.by_qp.insert(qp, i as u32);
            }
            self.mark(i);
        }
        self.indexed = n;
        while let Some(qp) = rnic.next_tx_ready() {
            if let Some(i) = self.by_qp.get(qp) {
                self.set_wants_tx(i as usize, true);
                self.mark(i as usize);
            }
        }
        if self.dev.touched_overflow {
            for i in 0..self.conns.len() {
                self.mark(i);
            }
        } else {
            for k in 0..self.dev.touched.len() {
                if let Some(&i) = self.by_flow.get(&self.dev.touched[k]) {
                    self.mark(i);
                }
            }
        }
        self.dev.touched.clear();
        self.dev.touched_overflow = false;
    }

    /// Rebuilds the connection maps and lists after connections moved or were bound (rare:
    /// setup, teardown), and marks every connection.
    fn reindex(&mut self) {
        self.by_qp.clear();
        self.by_flow.clear();
        self.by_id.clear();
        self.ready.clear();
        self.flight.clear();
        self.wanting = 0;
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            c.queued = false;
            c.in_flight = false;
            if c.socket_gone {
                continue;
            }
            self.wanting += usize::from(c.wants_tx);
            if c.settings.is_none() {
                self.by_id.insert(c.id, i);
            }
            if let Some(qp) = c.qp {
                self.by_qp.insert(qp, i as u32);
            }
            if let Some(k) = c.flow {
                self.by_flow.insert(k, i);
            }
            if c.state == ConnState::Rts {
                c.in_flight = true;
                self.flight.push(i);
            }
            self.mark(i);
        }
        self.indexed = self.conns.len();
    }

    /// Times the stages of every poll (see [`StageNs`]); off by default.
    pub fn set_stage_timing(&mut self, on: bool) {
        self.stage_timing = on;
    }

    /// Moves [`Node::live`] on by the real time since the previous turn (`real_us`, real
    /// microseconds of the clock), at most a keep-alive interval: a longer gap is our own
    /// loop stalling, not the peer.
    fn advance_live(&mut self, real_us: u64) {
        // Turns come several to the microsecond: most have nothing to add.
        if real_us <= self.last_turn_us {
            return;
        }
        let gap = std::time::Duration::from_micros(real_us - self.last_turn_us);
        self.last_turn_us = real_us;
        self.live += gap.min(self.tcp.user_timeout / 4);
    }

    /// Gives up every established connection whose peer has sent nothing for the user
    /// timeout of live time: by then it left several keep-alives or resends (one each
    /// quarter of the timeout at most) unanswered. Its QP enters Error; in relay mode the
    /// control plane hears [`CloseReason::Timeout`].
    fn check_peers(&mut self, rnic: &mut Rnic) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.is_over() || c.socket_gone {
                continue;
            }
            let Some(heard) = c.flow.and_then(|k| self.dev.peers.heard(k)) else {
                continue;
            };
            if heard != c.heard {
                let c = &mut self.conns[i];
                c.heard = heard;
                c.heard_live = self.live;
            } else if self.live.saturating_sub(c.heard_live) >= self.tcp.user_timeout {
                let handle = c.handle;
                self.sockets.get_mut::<tcp::Socket>(handle).abort();
                self.ended(rnic, i, CloseReason::Timeout);
            }
        }
    }

    /// Real time until smoltcp wants to be polled again (for adaptive back-off); `None` for
    /// no timer. While the port takes no frames ([`Port::tx_ready`]), smoltcp's wish to send
    /// at once is no timer: the port's descriptor wakes the loop when it has room (or the
    /// loop backs off), where a zero timeout would spin on the cores the peer needs to read.
    pub fn poll_delay(&mut self) -> Option<std::time::Duration> {
        let now = self.clock.now();
        let at = self.sockets.poll_at()?;
        let d = if at > now {
            at - now
        } else {
            smoltcp::time::Duration::ZERO
        };
        if d == smoltcp::time::Duration::ZERO && !self.dev.port.tx_ready() {
            return None;
        }
        Some(self.clock.virtual_to_real(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The node's own state per connection beyond the socket buffers stays within 4 KiB
    /// (TCP buffers and rings aside): a slot of smoltcp's socket set
    /// (which holds the TCP socket with its assembler and timers) plus our `Conn`.
    #[test]
    fn per_connection_state_fits_4_kib() {
        let socket = std::mem::size_of::<tcp::Socket<'static>>();
        let conn = std::mem::size_of::<Conn>();
        let slot = std::mem::size_of::<Option<smoltcp::iface::SocketStorage<'static>>>();
        println!("per connection: smoltcp socket {socket} B, Conn {conn} B, set slot {slot} B");
        assert!(socket <= slot, "the slot holds the socket");
        assert!(slot + conn <= 4096, "{slot} + {conn}");
    }

    /// Senders are counted once per period however often they send, and a period's count
    /// lasts through the next: a round in which every stream drained and began again one
    /// by one still shares among all of them.
    #[test]
    fn senders_are_those_of_this_period_or_the_last_with_any() {
        let mut s = Senders::default();
        let mut sent_in = [u64::MAX; 3];
        for _ in 0..2 {
            for c in &mut sent_in {
                s.sent(c, 5);
            }
        }
        assert_eq!(s.count(0), 3, "three connections, each counted once");
        // A quiet gap, then the first of the three again: still three.
        s.sent(&mut sent_in[0], 9);
        assert_eq!(s.count(1), 3);
        // A whole period with one sender: one.
        s.sent(&mut sent_in[0], 10);
        assert_eq!(s.count(1), 1);
        // Those with data in flight now count whatever the periods say.
        assert_eq!(s.count(7), 7);
    }

    /// A visit notes where its connection's socket, route, flow entry and sender lie, the
    /// addresses [`Node::prefetch_ahead`] and [`Node::prefetch_received`] ask the cache for
    /// before the connection is next met.
    #[test]
    fn a_visit_notes_where_its_connections_state_lies() {
        use crate::port::memory::MemoryPort;
        use iwarp_abi::prefetch::address_of;
        use iwarp_engine::QpCaps;
        let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
        let (ip_a, ip_b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut a = Node::new(pa, ip_a, 24, TcpSettings::default());
        let mut b = Node::new(pb, ip_b, 24, TcpSettings::default());
        let (mut ra, mut rb) = (Rnic::new(), Rnic::new());
        let qp = |r: &mut Rnic| {
            let (pd, cq) = (r.alloc_pd(), r.create_cq(64));
            let caps = QpCaps {
                sq_depth: 16,
                rq_depth: 16,
                srq: None,
            };
            r.create_qp(pd, cq, cq, caps).unwrap()
        };
        let (qa, qb) = (qp(&mut ra), qp(&mut rb));
        let ca = a.listen(7174, qa, Settings::default()).unwrap();
        let cb = b
            .connect(ip_a, 7174, 40000, qb, Settings::default())
            .unwrap();
        let rts = |n: &Node<MemoryPort>, c| n.state(c) == Some(&ConnState::Rts);
        for _ in 0..100_000 {
            if rts(&a, ca) && rts(&b, cb) {
                break;
            }
            a.poll(&mut ra);
            b.poll(&mut rb);
        }
        assert!(rts(&a, ca) && rts(&b, cb), "both ends in RTS");
        for (node, i) in [(&a, ca), (&b, cb)] {
            let c = &node.conns[i];
            let key = c.flow.expect("the peer is tracked once established");
            let (flow, sender) = node.dev.peers.hints(key);
            assert!(
                flow != 0 && sender != 0,
                "the flow has an entry and a sender"
            );
            assert_eq!(
                c.hints.socket,
                address_of(node.sockets.get::<tcp::Socket>(c.handle))
            );
            assert_eq!((c.hints.flow, c.hints.sender), (flow, sender));
            let route = node.sockets.route_hint(key);
            assert!(route != 0, "the flow is routed");
            assert_eq!(c.hints.route, route);
        }
    }

    /// A turn's receive step reads up to 128 bursts (4,096 frames), as many as its egress
    /// may hand the port, so that a node keeps up with its peer's ACKs; the rest wait for
    /// the next turn.
    #[test]
    fn a_turn_reads_as_many_frames_as_its_egress_may_send() {
        use crate::port::memory::MemoryPort;
        let (mut peer, ours) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
        let most = crate::device::RX_BURSTS_PER_TURN * crate::port::RX_BURST;
        assert_eq!(most, 4096);
        // Frames of no protocol smoltcp knows: read, counted, dropped.
        for _ in 0..most + 100 {
            peer.tx(&[0xff; 60]).unwrap();
        }
        let mut node = Node::new(ours, Ipv4Addr::new(10, 0, 0, 2), 24, TcpSettings::default());
        assert!(node.receive());
        assert_eq!(node.counters().rx_frames, most as u64);
        node.receive();
        assert_eq!(node.counters().rx_frames, most as u64 + 100);
    }
}
