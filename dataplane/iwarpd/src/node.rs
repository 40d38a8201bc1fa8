//! One RNIC on one port: smoltcp's interface and TCP sockets, the engine, and the glue that
//! moves each connection's bytes between them. Single-threaded and lock-free: a poll-mode
//! core owns a `Node` end to end.
//!
//! Connection setup runs the sans-IO MPA negotiation of `iwarp_wire::mpa::negotiation` on
//! the first bytes of the stream, then hands the stream to the engine QP with the negotiated
//! parameters. (In the three-process design the control plane drives that negotiation over
//! the command ring; until it exists the node drives it itself.)
//!
//! FPDU alignment (RFC 5044 section 8): the engine gives one FPDU per `poll_transmit`, at
//! most the connection's segment size (our MSS, or the peer's where smaller), and full-size
//! FPDUs are exactly that. smoltcp cuts its send buffer into segments of that size from the
//! first unsent byte, so a run of full-size FPDUs stays aligned by itself; shorter FPDUs are
//! queued as a group while they fit in one segment, and the node makes smoltcp send the
//! group at once (an interface poll) before queuing more, so the next FPDU starts a
//! segment. smoltcp also cuts a segment
//! at the right edge of the peer's window, so the node queues an FPDU only when the peer's
//! window (read off its segments by `peer_tcp.rs`) takes it whole. A retransmission after
//! loss re-cuts from the oldest unacknowledged byte and may pack FPDUs differently;
//! receivers (ours, siw, hardware) reassemble any split, only first transmissions are
//! aligned.

use crate::clock::DilatedClock;
use crate::device::ArpPacer;
use crate::device::PortDevice;
use crate::peer_tcp::FlowKey;
use crate::port::Port;
use iwarp_abi::command::CloseReason;
use iwarp_engine::{ConnParams, PeerToPeer, Rnic, RtrKind};
use iwarp_wire::mpa::negotiation::{self, Negotiated, Settings, SetupError};
use smoltcp::iface::{
    Config as IfaceConfig, Interface, PollIngressSingleResult, SocketHandle, SocketSet,
};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint, Ipv4Address};
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
    /// A connection whose data goes unacknowledged this long (real time) is given up, and
    /// its QP enters Error: how a dead peer is detected.
    pub user_timeout: std::time::Duration,
    /// How long the ACK of a lone small segment may wait for data to ride on (real time);
    /// zero: at once.
    pub ack_delay: std::time::Duration,
}

impl Default for TcpSettings {
    fn default() -> TcpSettings {
        TcpSettings {
            rx_buffer: 1 << 20,
            tx_buffer: 1 << 20,
            min_rto_us: 1000,
            mss: 1460,
            max_inflight: 256 << 10,
            user_timeout: std::time::Duration::from_secs(2),
            ack_delay: std::time::Duration::ZERO,
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

struct Listener {
    port: u16,
    sockets: Vec<SocketHandle>,
}

struct Conn {
    /// The caller's id: its index for [`Node::listen`]/[`Node::connect`], control's id (or
    /// one the node chose, high bit set, for an accepted connection) in relay mode.
    id: u32,
    handle: SocketHandle,
    /// The engine QP; in relay mode unknown until the control plane binds one.
    qp: Option<u32>,
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
        handle: SocketHandle,
        qp: Option<u32>,
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
    /// Repeats of unanswered ARP requests held back (see [`crate::device::ArpPacer`]): a
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
}

/// What [`Node::transmit_into_socket`] did.
enum Direct {
    /// An FPDU of this many octets is in the send ring.
    Sent(usize),
    /// The QP has nothing to send.
    Nothing,
    /// The ring has no room for the largest FPDU in one piece (or the socket cannot send).
    NoRoom,
}

pub struct Node<P: Port> {
    pub rnic: Rnic,
    iface: Interface,
    sockets: SocketSet<'static>,
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
}

impl<P: Port> Node<P> {
    pub fn new(port: P, ip: Ipv4Addr, prefix: u8, tcp: TcpSettings) -> Node<P> {
        let clock = DilatedClock::new(tcp.min_rto_us);
        let arp = ArpPacer::new(clock.real_to_virtual(ARP_REPEAT));
        let mut dev = PortDevice::new(port, arp, tcp.mss);
        let mac = EthernetAddress(dev.port.mac());
        let mut cfg = IfaceConfig::new(HardwareAddress::Ethernet(mac));
        cfg.random_seed = u64::from_le_bytes([
            mac.0[0], mac.0[1], mac.0[2], mac.0[3], mac.0[4], mac.0[5], 0x5a, 0xa5,
        ]);
        let mut iface = Interface::new(cfg, &mut dev, clock.now());
        let [a, b, c, d] = ip.octets();
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(IpCidr::new(
                IpAddress::Ipv4(Ipv4Address::new(a, b, c, d)),
                prefix,
            ));
        });
        Node {
            rnic: Rnic::new(),
            iface,
            sockets: SocketSet::new(Vec::new()),
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
        }
    }

    fn socket(&mut self) -> SocketHandle {
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; self.tcp.rx_buffer]),
            tcp::SocketBuffer::new(vec![0; self.tcp.tx_buffer]),
        );
        // RDMA latency: no Nagle; an ACK held only when configured (`TcpSettings::ack_delay`),
        // and only for a lone small segment.
        s.set_nagle_enabled(false);
        let delay = self.tcp.ack_delay;
        s.set_ack_delay((!delay.is_zero()).then(|| self.clock.real_to_virtual(delay)));
        // smoltcp's congestion controllers count the window in bytes and cut segments at its
        // edge, which breaks FPDU alignment. We bound what is in flight ourselves instead
        // (`TcpSettings::max_inflight`, whole segments), and smoltcp sends what we queue.
        s.set_congestion_control(tcp::CongestionControl::None);
        // smoltcp's timeout counts from the last segment received, so an idle connection
        // needs keep-alives (a quarter of the timeout) to stay up while its peer lives.
        s.set_timeout(Some(self.clock.real_to_virtual(self.tcp.user_timeout)));
        s.set_keep_alive(Some(self.clock.real_to_virtual(self.tcp.user_timeout / 4)));
        self.sockets.add(s)
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

    /// Accepts one connection on `port` for engine QP `qp` (created by the caller in Idle).
    pub fn listen(&mut self, port: u16, qp: u32, settings: Settings) -> Result<usize, String> {
        self.claim(port)?;
        let h = self.socket();
        self.sockets
            .get_mut::<tcp::Socket>(h)
            .listen(port)
            .map_err(|e| format!("listen on {port}: {e}"))?;
        self.conns.push(Conn::new(
            self.conns.len() as u32,
            h,
            Some(qp),
            false,
            Some(settings),
        ));
        Ok(self.conns.len() - 1)
    }

    /// Connects to `remote:port` from `local_port` for engine QP `qp`.
    pub fn connect(
        &mut self,
        remote: Ipv4Addr,
        port: u16,
        local_port: u16,
        qp: u32,
        settings: Settings,
    ) -> Result<usize, String> {
        let h = self.socket();
        let [a, b, c, d] = remote.octets();
        let ep = IpEndpoint::new(IpAddress::Ipv4(Ipv4Address::new(a, b, c, d)), port);
        let cx = self.iface.context();
        self.sockets
            .get_mut::<tcp::Socket>(h)
            .connect(cx, ep, local_port)
            .map_err(|e| format!("connect to {remote}:{port}: {e}"))?;
        self.conns.push(Conn::new(
            self.conns.len() as u32,
            h,
            Some(qp),
            true,
            Some(settings),
        ));
        Ok(self.conns.len() - 1)
    }

    pub fn state(&self, conn: usize) -> Option<&ConnState> {
        self.conns.get(conn).map(|c| &c.state)
    }

    pub fn negotiated(&self, conn: usize) -> Option<&Negotiated> {
        self.conns.get(conn)?.negotiated.as_ref()
    }

    /// Aborts a connection (RST); its QP enters Error with flushed work.
    pub fn abort(&mut self, conn: usize) {
        if let Some(c) = self.conns.get_mut(conn) {
            if c.socket_gone {
                return;
            }
            self.sockets.get_mut::<tcp::Socket>(c.handle).abort();
            let had_stream = c.has_stream();
            c.state = ConnState::Closed;
            if let (Some(qp), true) = (c.qp, had_stream) {
                self.rnic.connection_lost(qp, false);
            }
        }
    }

    // ---- relay mode: the control plane runs MPA (the three-process RNIC) ----

    /// Listens on `port` for relay connections, `backlog` handshakes at a time (at most 16):
    /// each completed one becomes [`NodeEvent::Incoming`].
    pub fn relay_listen(&mut self, port: u16, backlog: u16) -> Result<(), String> {
        if port == 0 || self.listeners.iter().any(|l| l.port == port) {
            return Err(format!("port {port} is already listening or invalid"));
        }
        self.claim(port)?;
        let mut sockets = Vec::new();
        for _ in 0..backlog.clamp(1, 16) {
            let h = self.socket();
            if let Err(e) = self.sockets.get_mut::<tcp::Socket>(h).listen(port) {
                self.sockets.remove(h);
                for h in sockets {
                    self.sockets.remove(h);
                }
                self.dev.port.release_tcp_port(port);
                return Err(format!("listen on {port}: {e}"));
            }
            sockets.push(h);
        }
        self.listeners.push(Listener { port, sockets });
        Ok(())
    }

    /// Stops listening on `port` (connections already accepted stay).
    pub fn relay_unlisten(&mut self, port: u16) -> bool {
        let Some(i) = self.listeners.iter().position(|l| l.port == port) else {
            return false;
        };
        for h in self.listeners.swap_remove(i).sockets {
            self.sockets.remove(h);
        }
        // Connections accepted there keep their frames coming here until they are gone.
        self.release_if_unused(port);
        true
    }

    /// Active open of relay connection `conn` (the control plane's id) to `remote`.
    pub fn relay_connect(&mut self, conn: u32, remote: SocketAddrV4) -> Result<(), String> {
        if self.find(conn).is_some() {
            return Err(format!("connection {conn} exists"));
        }
        let h = self.socket();
        let [a, b, c, d] = remote.ip().octets();
        let ep = IpEndpoint::new(IpAddress::Ipv4(Ipv4Address::new(a, b, c, d)), remote.port());
        // The next ephemeral port whose frames steer to this worker.
        for _ in 0..=u16::MAX {
            self.next_ephemeral = self
                .next_ephemeral
                .checked_add(1)
                .unwrap_or(49152)
                .max(49152);
            if self.dev.port.steers_here(self.next_ephemeral) {
                break;
            }
        }
        let cx = self.iface.context();
        if let Err(e) = self
            .sockets
            .get_mut::<tcp::Socket>(h)
            .connect(cx, ep, self.next_ephemeral)
        {
            self.sockets.remove(h);
            return Err(format!("connect to {remote}: {e}"));
        }
        self.conns.push(Conn::new(conn, h, None, true, None));
        Ok(())
    }

    /// Names the engine QP that will own relay connection `conn` once in RTS.
    pub fn relay_bind(&mut self, conn: u32, qp: u32) -> Result<(), String> {
        let i = self.live(conn)?;
        self.conns[i].qp = Some(qp);
        Ok(())
    }

    /// Sends bytes (an MPA Request or Reply) on a relay connection before RTS.
    pub fn relay_send(&mut self, conn: u32, bytes: &[u8]) -> Result<(), String> {
        let i = self.live(conn)?;
        let s = self.sockets.get_mut::<tcp::Socket>(self.conns[i].handle);
        match s.send_slice(bytes) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(n) => Err(format!(
                "connection {conn}: send buffer took {n} of {}",
                bytes.len()
            )),
            Err(e) => Err(format!("connection {conn}: {e}")),
        }
    }

    /// MPA is done: the engine QP bound to `conn` enters RTS with `params`, and every byte
    /// after the peer's MPA frame (still in the socket) goes to it.
    pub fn relay_rts(&mut self, conn: u32, qp: u32, params: ConnParams) -> Result<(), String> {
        let i = self.live(conn)?;
        if self.conns[i].state != ConnState::Relay {
            return Err(format!("connection {conn} is not in MPA setup"));
        }
        let params = ConnParams {
            max_fpdu: params.max_fpdu.min(self.segment_size(i)),
            ..params
        };
        self.rnic
            .connect(qp, params)
            .map_err(|e| format!("QP to RTS: {e:?}"))?;
        let c = &mut self.conns[i];
        c.qp = Some(qp);
        c.state = ConnState::Rts;
        Ok(())
    }

    /// Graceful close of a relay connection. A QP in RTS goes to Closing first (Verbs
    /// section 6.2): its send queue and outstanding Reads finish, and the FIN follows its
    /// last FPDU (see `transmit`). Anything else closes at once (FIN after what is queued).
    pub fn relay_close(&mut self, conn: u32) -> Result<(), String> {
        let i = self.live(conn)?;
        let c = &self.conns[i];
        if let (ConnState::Rts, Some(qp)) = (&c.state, c.qp) {
            if self.rnic.qp_state(qp) == Some(iwarp_engine::QpState::Rts) {
                return self
                    .rnic
                    .modify_qp(qp, iwarp_engine::QpState::Closing)
                    .map_err(|e| format!("QP to Closing: {e:?}"));
            }
        }
        self.sockets
            .get_mut::<tcp::Socket>(self.conns[i].handle)
            .close();
        self.conns[i].closing = true;
        Ok(())
    }

    /// Abortive close (RST) of a relay connection; its QP, if any, enters Error.
    pub fn relay_abort(&mut self, conn: u32) -> Result<(), String> {
        let i = self.live(conn)?;
        self.abort(i);
        Ok(())
    }

    /// Lets relay connection `conn` go on without its QP, which is being destroyed. One
    /// whose graceful close was asked for finishes that close, as a kernel socket closed
    /// after shutdown does: the FIN follows what is already in TCP (work the QP had not
    /// handed to TCP yet is flushed with it), and the peer's TCP still gets and acknowledges
    /// everything before the FIN, where a RST now would let it discard what its RNIC has not
    /// read yet. It is reset if data comes for the QP that is gone, or after
    /// [`ORPHAN_LINGER`]. Any other connection is aborted (RST).
    pub fn relay_release(&mut self, conn: u32) -> Result<(), String> {
        let i = self.live(conn)?;
        let c = &mut self.conns[i];
        let draining =
            c.qp.is_some_and(|qp| self.rnic.qp_state(qp) == Some(iwarp_engine::QpState::Closing));
        if !(c.closing || draining) {
            self.abort(i);
            return Ok(());
        }
        if !c.closing {
            self.sockets.get_mut::<tcp::Socket>(c.handle).close();
            c.closing = true;
        }
        c.qp = None;
        c.orphaned_since = Some(std::time::Instant::now());
        Ok(())
    }

    /// The engine QP bound to relay connection `conn`, if it is live and has one.
    pub fn qp_of_conn(&self, conn: u32) -> Option<u32> {
        self.conns
            .iter()
            .find(|c| c.id == conn && !c.socket_gone && !c.is_over())
            .and_then(|c| c.qp)
    }

    /// The relay connection owned by engine QP `qp`, if one is live.
    pub fn conn_of_qp(&self, qp: u32) -> Option<u32> {
        self.conns
            .iter()
            .find(|c| c.qp == Some(qp) && !c.socket_gone && !c.is_over())
            .map(|c| c.id)
    }

    /// Connections the node still keeps state for (live ones, and ended ones whose socket
    /// is not reclaimed yet).
    pub fn tracked_connections(&self) -> usize {
        self.conns.len()
    }

    /// What relay connections did since the last call.
    pub fn take_events(&mut self) -> impl Iterator<Item = NodeEvent> + '_ {
        self.events.drain(..)
    }

    fn find(&self, conn: u32) -> Option<usize> {
        self.conns
            .iter()
            .position(|c| c.id == conn && c.settings.is_none() && !c.socket_gone)
    }

    fn live(&self, conn: u32) -> Result<usize, String> {
        self.find(conn)
            .filter(|&i| !self.conns[i].is_over())
            .ok_or_else(|| format!("no connection {conn}"))
    }

    /// Turns completed handshakes on relay listeners into connections.
    fn accept_incoming(&mut self) -> bool {
        let mut busy = false;
        for l in 0..self.listeners.len() {
            for k in 0..self.listeners[l].sockets.len() {
                let h = self.listeners[l].sockets[k];
                let (state, remote) = {
                    let s = self.sockets.get::<tcp::Socket>(h);
                    (s.state(), s.remote_endpoint())
                };
                match state {
                    tcp::State::Listen | tcp::State::SynReceived => continue,
                    tcp::State::Closed => {
                        // A handshake reset before completing: listen again.
                        let port = self.listeners[l].port;
                        let _ = self.sockets.get_mut::<tcp::Socket>(h).listen(port);
                        continue;
                    }
                    _ => {}
                }
                let port = self.listeners[l].port;
                let fresh = self.socket();
                let _ = self.sockets.get_mut::<tcp::Socket>(fresh).listen(port);
                self.listeners[l].sockets[k] = fresh;
                let id = self.next_incoming;
                self.next_incoming = self.incoming_base
                    + (self.next_incoming.wrapping_sub(self.incoming_base) + 1) % INCOMING_IDS;
                let mut c = Conn::new(id, h, None, false, None);
                c.accepted_on = Some(port);
                c.state = ConnState::Relay;
                c.ever_established = true;
                self.conns.push(c);
                self.track_peer(self.conns.len() - 1);
                let peer = match remote.map(|e| e.addr) {
                    Some(IpAddress::Ipv4(a)) => {
                        SocketAddrV4::new(Ipv4Addr::from(a.octets()), remote.map_or(0, |e| e.port))
                    }
                    _ => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                };
                self.events.push_back(NodeEvent::Incoming {
                    conn: id,
                    local_port: port,
                    peer,
                });
                busy = true;
            }
        }
        busy
    }

    pub fn counters(&self) -> Counters {
        Counters {
            rx_frames: self.dev.rx_frames,
            tx_frames: self.dev.tx_frames,
            rx_bytes: self.dev.rx_bytes,
            tx_bytes: self.dev.tx_bytes,
            fpdus_tx: self.fpdus_tx,
            stream_bytes_rx: self.stream_rx,
            drops: self.dev.port.dropped(),
            arp_paced: self.dev.arp.dropped,
            conns_lost: self.conns_lost,
            connections: self.conns.iter().filter(|c| !c.is_over()).count() as u64,
            crc_errors: self.rnic.stats.crc_errors,
            terminates_sent: self.rnic.stats.terminates_sent,
            terminates_received: self.rnic.stats.terminates_received,
            stages: self.stage_timing.then_some(self.stages),
        }
    }

    /// Clean shutdown: every live connection is aborted (a RST goes to each peer, its QP
    /// enters Error with flushed work), and the RSTs are sent before returning.
    pub fn shutdown(&mut self) {
        for i in 0..self.conns.len() {
            if !matches!(
                self.conns[i].state,
                ConnState::Failed(_) | ConnState::Closed
            ) {
                self.abort(i);
            }
        }
        self.iface_poll();
        let _ = self.dev.port.flush();
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

    fn iface_egress(&mut self, now: smoltcp::time::Instant) {
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
    }

    /// Received frames into TCP, nothing out yet: the ACK for a request then leaves with the
    /// engine's answer (a Read Response, a Send) in one segment instead of a pure ACK
    /// first, which would cost a frame and wake the peer for nothing.
    fn iface_ingress(&mut self, now: smoltcp::time::Instant) {
        self.iface.poll_maintenance(now);
        while self
            .iface
            .poll_ingress_single(now, &mut self.dev, &mut self.sockets)
            != PollIngressSingleResult::None
        {}
    }

    /// One turn of the poll loop: receive a burst, run TCP, move every connection's bytes
    /// through the engine, transmit. Returns whether anything happened.
    pub fn poll(&mut self) -> bool {
        self.poll_with(|_| {})
    }

    /// [`Node::poll`], calling `before_rx` after the port burst and before any received
    /// byte reaches the engine or the engine transmits: where the host posts the receives
    /// applications queued, so a message that arrived after its receive was posted always
    /// finds it, and the work they posted, so it leaves in this turn.
    pub fn poll_with(&mut self, before_rx: impl FnOnce(&mut Rnic)) -> bool {
        let mut clock = StageClock::new(self.stage_timing);
        let mut t = StageNs::default();
        let mut got = 0;
        // One clock read per turn: TCP sees the turn's start for what it receives and sends
        // (the turn lasts microseconds; a clock read costs as much as a TCP segment here).
        let now = self.clock.now();
        self.turn_now = now;
        // Drain what the port holds (a few bursts), so a full receive queue does not drop.
        for _ in 0..8 {
            let n = self.dev.fill();
            t.port += clock.lap();
            got += n;
            self.iface_ingress(now);
            t.tcp += clock.lap();
            if n == 0 {
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
            t.tcp += clock.lap();
            let _ = self.dev.port.flush();
            t.port += clock.lap();
        }
        before_rx(&mut self.rnic);
        clock.lap();
        let mut busy = got > 0;
        busy |= self.accept_incoming();
        for i in 0..self.conns.len() {
            busy |= self.service(i);
        }
        self.forget_reclaimed();
        t.engine += clock.lap();
        self.iface_egress(now);
        t.tcp += clock.lap();
        let _ = self.dev.port.flush();
        t.port += clock.lap();
        if busy && self.stage_timing {
            self.stages.port += t.port;
            self.stages.tcp += t.tcp;
            self.stages.engine += t.engine;
        }
        busy
    }

    /// Times the stages of every poll (see [`StageNs`]); off by default.
    pub fn set_stage_timing(&mut self, on: bool) {
        self.stage_timing = on;
    }

    /// Real time until smoltcp wants to be polled again (for adaptive back-off).
    pub fn poll_delay(&mut self) -> Option<std::time::Duration> {
        let now = self.clock.now();
        self.iface
            .poll_delay(now, &self.sockets)
            .map(|d| self.clock.virtual_to_real(d))
    }

    fn fail(&mut self, i: usize, why: String) {
        let c = &mut self.conns[i];
        self.sockets.get_mut::<tcp::Socket>(c.handle).abort();
        c.state = ConnState::Failed(why);
        self.conns_lost += 1;
        if let Some(qp) = c.qp {
            self.rnic.connection_lost(qp, false);
        }
    }

    /// The connection is over: tell the engine and, in relay mode, the control plane.
    fn ended(&mut self, i: usize, reason: CloseReason) {
        let c = &mut self.conns[i];
        let had_stream = c.has_stream();
        c.state = ConnState::Closed;
        self.conns_lost += 1;
        if let (Some(qp), true) = (c.qp, had_stream) {
            self.rnic
                .connection_lost(qp, reason == CloseReason::Graceful);
        }
        if c.settings.is_none() {
            self.events
                .push_back(NodeEvent::Closed { conn: c.id, reason });
        }
    }

    /// Drops relay connections whose socket was reclaimed, so a daemon that has served a
    /// million connections holds no trace of the ended ones. Relay connections are found by
    /// id; connections the node runs itself are addressed by index, so while any exists
    /// nothing is removed (no index moves).
    fn forget_reclaimed(&mut self) {
        if self.conns.iter().any(|c| c.socket_gone)
            && self.conns.iter().all(|c| c.settings.is_none())
        {
            self.conns.retain(|c| !c.socket_gone);
        }
    }

    /// A relay connection that is over and whose socket has finished: free the socket and
    /// its buffers. An aborted socket is Closed at once but still owes its peer the RST
    /// (smoltcp sends it on a later poll, after ARP if the neighbour entry expired); it is
    /// freed once that went out (no remote endpoint left), or after [`RECLAIM_AFTER`].
    fn reclaim(&mut self, i: usize, tcp_state: tcp::State) {
        let c = &mut self.conns[i];
        if c.settings.is_some() || c.socket_gone {
            return;
        }
        let since = *c.over_since.get_or_insert_with(std::time::Instant::now);
        let rst_sent = self
            .sockets
            .get::<tcp::Socket>(c.handle)
            .remote_endpoint()
            .is_none();
        let done = match tcp_state {
            tcp::State::TimeWait => true,
            tcp::State::Closed => rst_sent,
            _ => false,
        };
        if done || since.elapsed() >= RECLAIM_AFTER {
            self.sockets.remove(c.handle);
            c.socket_gone = true;
            c.inbuf = Vec::new();
            if let Some(key) = c.flow.take() {
                self.dev.peers.forget(key);
            }
            if let Some(port) = c.accepted_on {
                self.release_if_unused(port);
            }
        }
    }

    /// Starts tracking what connection `i`'s peer says that smoltcp keeps to itself (see
    /// `peer_tcp.rs`).
    fn track_peer(&mut self, i: usize) {
        let c = &mut self.conns[i];
        let s = self.sockets.get::<tcp::Socket>(c.handle);
        let (Some(local), Some(remote)) = (s.local_endpoint(), s.remote_endpoint()) else {
            return;
        };
        let IpAddress::Ipv4(peer) = remote.addr;
        let key = FlowKey::new(local.port, peer.octets(), remote.port);
        if self.dev.peers.adopt(key) {
            c.flow = Some(key);
        }
    }

    /// The largest TCP segment of connection `i`, and so its largest FPDU: our MSS, or the
    /// peer's where smaller (never below 64 octets, which every FPDU header fits in; a peer
    /// asking for less gets cut FPDUs, as it would from any sender).
    fn segment_size(&self, i: usize) -> usize {
        let ours = self.tcp.mss;
        self.conns[i]
            .flow
            .and_then(|k| self.dev.peers.mss(k))
            .map_or(ours, |peer| peer.clamp(64, ours))
    }

    /// Gives up the steering of `port` once nothing here uses it: no listener, no accepted
    /// connection whose socket lives.
    fn release_if_unused(&mut self, port: u16) {
        let used = self.listeners.iter().any(|l| l.port == port)
            || self
                .conns
                .iter()
                .any(|c| c.accepted_on == Some(port) && !c.socket_gone);
        if !used {
            self.dev.port.release_tcp_port(port);
        }
    }

    fn service(&mut self, i: usize) -> bool {
        if self.conns[i].socket_gone {
            return false;
        }
        let handle = self.conns[i].handle;
        let state = self.conns[i].state.clone();
        let (tcp_state, may_recv, may_send, unread) = {
            let s = self.sockets.get::<tcp::Socket>(handle);
            (s.state(), s.may_recv(), s.may_send(), s.can_recv())
        };
        if self.conns[i].is_over() {
            self.reclaim(i, tcp_state);
            return false;
        }
        // A connection that outlived its QP has nobody to hand data to (Linux resets a closed
        // socket that receives data, too), and it lingers a bounded time.
        if let Some(since) = self.conns[i].orphaned_since {
            if unread || since.elapsed() >= ORPHAN_LINGER {
                self.abort(i);
                return true;
            }
        }
        if tcp_state == tcp::State::Established && !self.conns[i].ever_established {
            self.conns[i].ever_established = true;
            self.track_peer(i);
        }
        // The peer closed its half (FIN) and the engine has read everything before it (a
        // Terminate, the last messages): a graceful disconnect by the peer. A QP with the
        // stream in RTS or Closing goes to Error (flushing what it cannot finish) and ends its
        // own half after its last FPDU. A relay connection still in
        // setup has nothing more coming: it ends now, and the control plane hears of it (as
        // the setup's failure) instead of waiting for a timeout.
        if tcp_state == tcp::State::CloseWait && !unread {
            let c = &mut self.conns[i];
            match c.qp {
                Some(qp) if c.has_stream() => {
                    use iwarp_engine::QpState::{Closing, Rts};
                    if matches!(self.rnic.qp_state(qp), Some(Rts | Closing)) {
                        self.rnic.connection_lost(qp, true);
                    }
                }
                _ if !c.has_stream() && !c.closing => {
                    self.sockets.get_mut::<tcp::Socket>(handle).close();
                    c.closing = true;
                }
                _ => {}
            }
        }
        // The connection ended: the peer closed, reset, or it never came up.
        if self.conns[i].ever_established
            && !may_recv
            && !may_send
            && tcp_state != tcp::State::Established
        {
            // smoltcp ends both a reset and a finished close in Closed; the peer's RST,
            // when seen, tells them apart.
            let reset = tcp_state == tcp::State::Closed
                && self.conns[i]
                    .flow
                    .is_some_and(|k| self.dev.peers.was_reset(k));
            let graceful = !reset
                && matches!(
                    tcp_state,
                    tcp::State::TimeWait
                        | tcp::State::Closed
                        | tcp::State::LastAck
                        | tcp::State::Closing
                );
            let reason = if graceful || self.conns[i].closing {
                CloseReason::Graceful
            } else {
                CloseReason::Reset
            };
            self.ended(i, reason);
            return true;
        }
        if state == ConnState::Connecting
            && tcp_state == tcp::State::Closed
            && !self.conns[i].ever_established
        {
            // An active open refused (RST) or given up.
            self.ended(i, CloseReason::Refused);
            return true;
        }
        match state {
            ConnState::Connecting if tcp_state == tcp::State::Established => {
                let Some(settings) = self.conns[i].settings.clone() else {
                    self.conns[i].state = ConnState::Relay;
                    let conn = self.conns[i].id;
                    self.events.push_back(NodeEvent::Established { conn });
                    return true;
                };
                if self.conns[i].initiator {
                    let req = match negotiation::request(&settings) {
                        Ok(r) => r,
                        Err(e) => {
                            self.fail(i, format!("MPA Request: {e:?}"));
                            return true;
                        }
                    };
                    let _ = self.sockets.get_mut::<tcp::Socket>(handle).send_slice(&req);
                    self.conns[i].state = ConnState::AwaitReply;
                } else {
                    self.conns[i].state = ConnState::AwaitRequest;
                }
                true
            }
            ConnState::Relay => self.relay_frame(i),
            ConnState::AwaitReply | ConnState::AwaitRequest => self.setup(i),
            ConnState::Rts => self.pump(i),
            _ => false,
        }
    }

    /// Relay mode before RTS: hands the peer's MPA Request/Reply to the control plane, whole
    /// and alone. Bytes after it stay in the socket for the engine (RFC 5044 section 7.1: the
    /// first FPDU may follow the frame at once).
    fn relay_frame(&mut self, i: usize) -> bool {
        if self.conns[i].frame_relayed {
            return false;
        }
        let handle = self.conns[i].handle;
        let mut buf = [0u8; 2048];
        let s = self.sockets.get_mut::<tcp::Socket>(handle);
        let n = s.peek_slice(&mut buf).unwrap_or(0);
        if n == 0 {
            return false;
        }
        let take = match negotiation::frame_complete(&buf[..n]) {
            Ok(Some(len)) => len,
            Ok(None) if n < buf.len() => return false,
            // Not a frame (or larger than any valid one): let the control plane see it and
            // refuse the connection.
            _ => n,
        };
        let got = s.recv_slice(&mut buf[..take]).unwrap_or(0);
        self.conns[i].frame_relayed = true;
        let conn = self.conns[i].id;
        self.events.push_back(NodeEvent::Bytes {
            conn,
            data: buf[..got].to_vec(),
        });
        true
    }

    /// MPA Request/Reply on the stream's first bytes.
    fn setup(&mut self, i: usize) -> bool {
        let handle = self.conns[i].handle;
        let mut buf = [0u8; 2048];
        let n = self
            .sockets
            .get_mut::<tcp::Socket>(handle)
            .recv_slice(&mut buf)
            .unwrap_or(0);
        if n == 0 {
            return false;
        }
        self.conns[i].inbuf.extend_from_slice(&buf[..n]);
        let len = match negotiation::frame_complete(&self.conns[i].inbuf) {
            Ok(Some(len)) => len,
            Ok(None) => return true,
            Err(e) => {
                self.fail(i, format!("bad MPA frame: {e:?}"));
                return true;
            }
        };
        let frame: Vec<u8> = self.conns[i].inbuf.drain(..len).collect();
        let Some(settings) = self.conns[i].settings.clone() else {
            return false;
        };
        let Some(qp) = self.conns[i].qp else {
            return false;
        };
        let result: Result<Negotiated, SetupError> = if self.conns[i].initiator {
            negotiation::parse_reply(&frame, &settings)
        } else {
            negotiation::parse_request(&frame).and_then(|req| {
                let (reply, n) = negotiation::accept(&req, &settings)?;
                let _ = self
                    .sockets
                    .get_mut::<tcp::Socket>(handle)
                    .send_slice(&reply);
                Ok(n)
            })
        };
        match result {
            Ok(n) => {
                let params = ConnParams {
                    tx: n.tx,
                    rx: n.rx,
                    ird: n.ird,
                    ord: n.ord,
                    rdmap_version: n.rdmap_version,
                    max_fpdu: self.segment_size(i),
                    max_rx_ulpdu: 65535,
                    // RFC 6581 peer-to-peer: the RTR negotiation agreed on (one kind).
                    p2p: n.rtr.and_then(|r| {
                        let rtr = if r.send {
                            RtrKind::Send
                        } else if r.write {
                            RtrKind::Write
                        } else if r.read {
                            RtrKind::Read
                        } else {
                            return None;
                        };
                        Some(PeerToPeer {
                            rtr,
                            initiator: self.conns[i].initiator,
                        })
                    }),
                };
                if let Err(e) = self.rnic.connect(qp, params) {
                    self.fail(i, format!("QP to RTS: {e:?}"));
                    return true;
                }
                self.conns[i].negotiated = Some(n);
                self.conns[i].state = ConnState::Rts;
                // Bytes after the frame are the first FPDUs.
                let rest = std::mem::take(&mut self.conns[i].inbuf);
                if !rest.is_empty() {
                    self.rnic.handle_stream(qp, &rest);
                }
            }
            Err(e) => self.fail(i, format!("MPA setup: {e:?}")),
        }
        true
    }

    /// The QP's next FPDU emitted straight into the free space at the end of the socket's
    /// send ring, if that holds the largest FPDU in one piece.
    fn transmit_into_socket(&mut self, handle: SocketHandle, qp: u32) -> Direct {
        let (rnic, largest) = (&mut self.rnic, self.fpdu.len());
        let sent = self.sockets.get_mut::<tcp::Socket>(handle).send(|ring| {
            if ring.len() < largest {
                return (0, Direct::NoRoom);
            }
            match rnic.poll_transmit(qp, ring) {
                Some(n) => (n, Direct::Sent(n)),
                None => (0, Direct::Nothing),
            }
        });
        // A socket that cannot send: the FPDU is built aside and lost as before (the
        // connection is ending).
        sent.unwrap_or(Direct::NoRoom)
    }

    /// RTS: received bytes into the engine, the engine's FPDUs into the socket.
    fn pump(&mut self, i: usize) -> bool {
        let handle = self.conns[i].handle;
        let Some(qp) = self.conns[i].qp else {
            return false;
        };
        let mut busy = false;
        let rnic = &mut self.rnic;
        let mut got = 0;
        {
            let s = self.sockets.get_mut::<tcp::Socket>(handle);
            while s.can_recv() {
                let n = s
                    .recv(|data| {
                        rnic.handle_stream(qp, data);
                        (data.len(), data.len())
                    })
                    .unwrap_or(0);
                if n == 0 {
                    break;
                }
                got += n;
            }
        }
        self.stream_rx += got as u64;
        busy |= got > 0;
        // Transmit: whole FPDUs only, each as it will go on the wire, packed several to a
        // segment while they fit (RFC 5044 section 8 allows it; a burst of small messages then
        // costs one segment per MSS rather than one per message). smoltcp cuts what is
        // queued into segments of `seg` octets from the first unsent one, so a group that
        // does not end on that cut is sent on its own before more is queued behind it.
        let flow = self.conns[i].flow;
        let seg = self.segment_size(i);
        let mut open = 0;
        while self.rnic.wants_transmit(qp) {
            let room = {
                let s = self.sockets.get::<tcp::Socket>(handle);
                let queued = s.send_queue();
                let mut room =
                    (s.send_capacity() - queued).min(self.tcp.max_inflight.saturating_sub(queued));
                // Within the peer's window too, or smoltcp cuts the last FPDU at its edge.
                // With nothing queued a window below one segment is sent into anyway: it
                // is the peer's to open, and waiting for it could wait forever.
                if queued > 0 {
                    if let Some(window) = flow.and_then(|k| self.dev.peers.window(k)) {
                        room = room.min(window.saturating_sub(queued));
                    }
                }
                room
            };
            if room < seg {
                break;
            }
            // An FPDU that starts a segment is written straight into the socket's send ring
            // where the ring has room for the largest in one piece (a copy per octet fewer);
            // one that may join a group is built aside first, since the group goes on its
            // own when the FPDU turns out not to fit behind it.
            let n = match (open == 0).then(|| self.transmit_into_socket(handle, qp)) {
                Some(Direct::Sent(n)) => n,
                Some(Direct::Nothing) => break,
                Some(Direct::NoRoom) | None => {
                    let Some(n) = self.rnic.poll_transmit(qp, &mut self.fpdu) else {
                        break;
                    };
                    if open + n > seg {
                        self.iface_egress(self.turn_now);
                        open = 0;
                    }
                    let _ = self
                        .sockets
                        .get_mut::<tcp::Socket>(handle)
                        .send_slice(&self.fpdu[..n]);
                    n
                }
            };
            open = (open + n) % seg;
            self.fpdus_tx += 1;
            busy = true;
        }
        if open > 0 {
            // The group goes now, so that the next FPDU queued starts a segment.
            self.iface_egress(self.turn_now);
        }
        // A QP in Error has sent its last FPDU (a Terminate, if any, is queued): the stream
        // ends after it (RFC 5040 section 5.3), so the peer's QP learns it too; so does one
        // that finished Closing (back in Idle after RTS: a graceful disconnect). In relay
        // mode the control plane owns the connection and hears of its end.
        let c = &mut self.conns[i];
        let done = match self.rnic.qp_state(qp) {
            Some(iwarp_engine::QpState::Error) => true,
            Some(iwarp_engine::QpState::Idle) => c.state == ConnState::Rts,
            _ => false,
        };
        if c.settings.is_none() && !c.closing && done && !self.rnic.wants_transmit(qp) {
            c.closing = true;
            self.sockets.get_mut::<tcp::Socket>(handle).close();
            busy = true;
        }
        busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The node's own state per connection beyond the socket buffers (issue 4: at most
    /// 4 KiB per connection beyond TCP buffers and rings): a slot of smoltcp's socket set
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
}
