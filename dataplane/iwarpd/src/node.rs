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
//! most the MSS, and full-size FPDUs are exactly the MSS. smoltcp cuts its send buffer into
//! MSS-sized segments from the first unsent byte, so a run of full-size FPDUs stays aligned
//! by itself; after a shorter FPDU the node makes smoltcp send at once (an interface poll)
//! before queuing the next, so the next FPDU starts a segment. A retransmission after loss
//! re-cuts from the oldest unacknowledged byte and may pack FPDUs differently; receivers
//! (ours, siw, hardware) reassemble any split, only first transmissions are aligned.

use crate::clock::DilatedClock;
use crate::device::PortDevice;
use crate::port::Port;
use iwarp_engine::{ConnParams, PeerToPeer, Rnic, RtrKind};
use iwarp_wire::mpa::negotiation::{self, Negotiated, Settings, SetupError};
use smoltcp::iface::{Config as IfaceConfig, Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint, Ipv4Address};
use std::net::Ipv4Addr;

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
}

impl Default for TcpSettings {
    fn default() -> TcpSettings {
        TcpSettings {
            rx_buffer: 4 << 20,
            tx_buffer: 4 << 20,
            min_rto_us: 1000,
            mss: 1460,
            max_inflight: 256 << 10,
            user_timeout: std::time::Duration::from_secs(2),
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
    /// Setup failed (reason), or the connection ended.
    Failed(String),
    Closed,
}

struct Conn {
    handle: SocketHandle,
    qp: u32,
    initiator: bool,
    settings: Settings,
    state: ConnState,
    inbuf: Vec<u8>,
    negotiated: Option<Negotiated>,
    ever_established: bool,
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
    /// Connections that ended other than by our own shutdown (peer reset or closed, user
    /// timeout, failed setup).
    pub conns_lost: u64,
    /// Connections in setup or RTS now.
    pub connections: u64,
}

pub struct Node<P: Port> {
    pub rnic: Rnic,
    iface: Interface,
    sockets: SocketSet<'static>,
    dev: PortDevice<P>,
    clock: DilatedClock,
    tcp: TcpSettings,
    conns: Vec<Conn>,
    fpdu: Vec<u8>,
    fpdus_tx: u64,
    stream_rx: u64,
    conns_lost: u64,
}

impl<P: Port> Node<P> {
    pub fn new(port: P, ip: Ipv4Addr, prefix: u8, tcp: TcpSettings) -> Node<P> {
        let clock = DilatedClock::new(tcp.min_rto_us);
        let mut dev = PortDevice::new(port);
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
            clock,
            tcp,
            conns: Vec::new(),
            fpdu: vec![0; tcp.mss],
            fpdus_tx: 0,
            stream_rx: 0,
            conns_lost: 0,
        }
    }

    fn socket(&mut self) -> SocketHandle {
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; self.tcp.rx_buffer]),
            tcp::SocketBuffer::new(vec![0; self.tcp.tx_buffer]),
        );
        // RDMA latency: no Nagle, no delayed ACK.
        s.set_nagle_enabled(false);
        s.set_ack_delay(None);
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

    /// Accepts one connection on `port` for engine QP `qp` (created by the caller in Idle).
    pub fn listen(&mut self, port: u16, qp: u32, settings: Settings) -> Result<usize, String> {
        let h = self.socket();
        self.sockets
            .get_mut::<tcp::Socket>(h)
            .listen(port)
            .map_err(|e| format!("listen on {port}: {e}"))?;
        self.conns.push(Conn {
            handle: h,
            qp,
            initiator: false,
            settings,
            state: ConnState::Connecting,
            inbuf: Vec::new(),
            negotiated: None,
            ever_established: false,
        });
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
        self.conns.push(Conn {
            handle: h,
            qp,
            initiator: true,
            settings,
            state: ConnState::Connecting,
            inbuf: Vec::new(),
            negotiated: None,
            ever_established: false,
        });
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
            self.sockets.get_mut::<tcp::Socket>(c.handle).abort();
            c.state = ConnState::Closed;
            self.rnic.connection_lost(c.qp, false);
        }
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
            conns_lost: self.conns_lost,
            connections: self
                .conns
                .iter()
                .filter(|c| !matches!(c.state, ConnState::Failed(_) | ConnState::Closed))
                .count() as u64,
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

    fn iface_poll(&mut self) {
        let now = self.clock.now();
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
    }

    /// One turn of the poll loop: receive a burst, run TCP, move every connection's bytes
    /// through the engine, transmit. Returns whether anything happened.
    pub fn poll(&mut self) -> bool {
        let mut got = 0;
        // Drain what the port holds (a few bursts), so a full receive queue does not drop.
        for _ in 0..8 {
            let n = self.dev.fill();
            got += n;
            self.iface_poll();
            if n == 0 {
                break;
            }
        }
        let mut busy = got > 0;
        for i in 0..self.conns.len() {
            busy |= self.service(i);
        }
        self.iface_poll();
        let _ = self.dev.port.flush();
        busy
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
        self.rnic.connection_lost(c.qp, false);
    }

    fn service(&mut self, i: usize) -> bool {
        let handle = self.conns[i].handle;
        let state = self.conns[i].state.clone();
        let (tcp_state, may_recv, may_send) = {
            let s = self.sockets.get::<tcp::Socket>(handle);
            (s.state(), s.may_recv(), s.may_send())
        };
        if matches!(state, ConnState::Failed(_) | ConnState::Closed) {
            return false;
        }
        if tcp_state == tcp::State::Established {
            self.conns[i].ever_established = true;
        }
        // The connection ended: the peer closed, reset, or it never came up.
        if self.conns[i].ever_established
            && !may_recv
            && !may_send
            && tcp_state != tcp::State::Established
        {
            let graceful = matches!(
                tcp_state,
                tcp::State::TimeWait
                    | tcp::State::Closed
                    | tcp::State::LastAck
                    | tcp::State::Closing
            );
            self.conns[i].state = ConnState::Closed;
            self.conns_lost += 1;
            self.rnic.connection_lost(self.conns[i].qp, graceful);
            return true;
        }
        match state {
            ConnState::Connecting if tcp_state == tcp::State::Established => {
                if self.conns[i].initiator {
                    let req = match negotiation::request(&self.conns[i].settings) {
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
            ConnState::AwaitReply | ConnState::AwaitRequest => self.setup(i),
            ConnState::Rts => self.pump(i),
            _ => false,
        }
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
        let settings = self.conns[i].settings.clone();
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
                    max_fpdu: self.tcp.mss,
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
                if let Err(e) = self.rnic.connect(self.conns[i].qp, params) {
                    self.fail(i, format!("QP to RTS: {e:?}"));
                    return true;
                }
                self.conns[i].negotiated = Some(n);
                self.conns[i].state = ConnState::Rts;
                // Bytes after the frame are the first FPDUs.
                let rest = std::mem::take(&mut self.conns[i].inbuf);
                if !rest.is_empty() {
                    self.rnic.handle_stream(self.conns[i].qp, &rest);
                }
            }
            Err(e) => self.fail(i, format!("MPA setup: {e:?}")),
        }
        true
    }

    /// RTS: received bytes into the engine, the engine's FPDUs into the socket.
    fn pump(&mut self, i: usize) -> bool {
        let (handle, qp) = (self.conns[i].handle, self.conns[i].qp);
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
        // Transmit: whole FPDUs only, each as it will go on the wire.
        loop {
            let room = {
                let s = self.sockets.get::<tcp::Socket>(handle);
                (s.send_capacity() - s.send_queue())
                    .min(self.tcp.max_inflight.saturating_sub(s.send_queue()))
            };
            if room < self.tcp.mss || !self.rnic.wants_transmit(qp) {
                break;
            }
            let Some(n) = self.rnic.poll_transmit(qp, &mut self.fpdu) else {
                break;
            };
            let _ = self
                .sockets
                .get_mut::<tcp::Socket>(handle)
                .send_slice(&self.fpdu[..n]);
            self.fpdus_tx += 1;
            busy = true;
            if n < self.tcp.mss {
                // Send it now, alone, so the next FPDU starts a segment.
                self.iface_poll();
            }
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
