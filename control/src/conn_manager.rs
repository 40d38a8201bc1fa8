//! The connection manager of one RNIC, sans-IO: listens, connects, accepts and rejects for
//! applications, runs one [`cm::Connection`] per connection over the daemon's TCP upcalls,
//! and hands each established connection to its QP with [`Command::QpRts`].
//!
//! Inputs: application calls (`listen`, `connect`, `accept`, `reject`, `disconnect`,
//! `app_gone`), daemon upcalls (`handle_upcall`) and time (`handle_timeout`). Outputs are
//! [`Action`]s: commands for iwarpd and events for an application.

use crate::cm::{self, Connection, Failure};
use crate::daemon_link::rts_params;
use crate::resources::AppId;
use iwarp_abi::app::{ConnSettings, ConnectFailure, ConnectRequest, Established, Event};
use iwarp_abi::command::{Chunk, Command, Upcall};
use iwarp_abi::id::QpId;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// What the driver must do.
// A Command is as large as the ring slot it is copied into; boxing it would allocate per
// command for no gain.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Daemon(Command),
    App { app: AppId, event: Event },
}

/// Why an application's connection call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmError {
    /// The port is already listened on.
    PortInUse,
    /// No such connection of this application.
    NoSuchConnection,
    /// The application does not listen on that port.
    NotListening,
}

#[derive(Debug)]
struct Conn {
    app: AppId,
    qp: Option<u32>,
    cm: Connection,
    established: bool,
    /// An initiator's move to RTS waiting out the hold (see [`ConnManager::with_rts_delay`]):
    /// when it is due, and the actions that make it.
    held: Option<(u64, Vec<Action>)>,
    /// When TCP came up, which is when an initiator sent its MPA Request.
    tcp_up_at: Option<u64>,
    /// An incoming connection past the limit: its Request is answered with a reject
    /// naming the limit, and its application hears nothing of it.
    refusing: bool,
}

impl Conn {
    fn next_timeout(&self) -> Option<u64> {
        match self.held {
            Some((at, _)) => Some(at),
            None => self.cm.next_timeout(),
        }
    }
}

/// The longest an initiator holds its move to RTS for a peer that was slow to reply (see
/// [`ConnManager::with_rts_delay`]).
pub const MAX_RTS_HOLD_MS: u64 = 100;

/// The private data of the MPA reject an incoming connection past `limits.max_qp` gets: MPA
/// has no reason code (RFC 5044 section 7.1.2), so the reason is text the initiator's
/// application is shown.
pub const LIMIT_REJECT: &[u8] = b"connection limit reached at the peer (limits.max_qp)";

/// Incoming connections past the limit that may wait for their Request at once, to be
/// refused with [`LIMIT_REJECT`]; beyond them an incoming connection is reset at once, so a
/// flood costs no more than this many sockets.
const MAX_REFUSING: usize = 64;

/// Every connection's earliest deadline (its MPA setup's wait, or its RTS hold), in time
/// order: the control loop asks for what is due every 200 µs, and a connection storm
/// changes deadlines on every input, so neither may walk every connection. Each input
/// notes the connection it touched; the notes are filed again before the next look.
#[derive(Debug, Default)]
struct Deadlines {
    by_time: BTreeSet<(u64, u32)>,
    /// The deadline each connection is filed under.
    filed: BTreeMap<u32, u64>,
    /// Connections whose deadline may have changed (or that are gone) since last filed.
    touched: Vec<u32>,
}

impl Deadlines {
    fn touch(&mut self, conn: u32) {
        self.touched.push(conn);
    }

    /// Files every touched connection under its deadline now, or under none.
    fn refile(&mut self, conns: &BTreeMap<u32, Conn>) {
        for conn in self.touched.drain(..) {
            if let Some(t) = self.filed.remove(&conn) {
                self.by_time.remove(&(t, conn));
            }
            if let Some(t) = conns.get(&conn).and_then(Conn::next_timeout) {
                self.by_time.insert((t, conn));
                self.filed.insert(conn, t);
            }
        }
    }

    fn earliest(&self) -> Option<u64> {
        self.by_time.first().map(|&(t, _)| t)
    }

    /// The connections due at `now`, earliest first.
    fn due(&self, now: u64) -> Vec<u32> {
        self.by_time
            .range(..=(now, u32::MAX))
            .map(|&(_, conn)| conn)
            .collect()
    }
}

/// All connections of one RNIC.
#[derive(Debug)]
pub struct ConnManager {
    conns: BTreeMap<u32, Conn>,
    listeners: BTreeMap<u16, (AppId, ConnSettings)>,
    /// Port and peer of incoming connections until their request is shown to the app.
    peers: BTreeMap<u32, (u16, SocketAddr)>,
    next_conn: u32,
    timeout_ms: u64,
    mss: u32,
    rts_delay_ms: u64,
    /// The time of the latest input, for holds started while draining.
    now: u64,
    /// The QPs of connections closed gracefully whose stream has not ended yet.
    closing: BTreeMap<u32, u32>,
    /// Connections (in setup or established) at most; past it new ones are refused.
    max_conns: usize,
    deadlines: Deadlines,
}

impl ConnManager {
    /// `timeout_ms` bounds every wait of MPA setup; `mss` is the TCP MSS FPDUs fit.
    pub fn new(timeout_ms: u64, mss: u32) -> ConnManager {
        ConnManager {
            conns: BTreeMap::new(),
            listeners: BTreeMap::new(),
            peers: BTreeMap::new(),
            // Control-chosen ids count from 1; ids the daemon chooses for incoming
            // connections are used as given.
            next_conn: 1,
            timeout_ms,
            mss,
            rts_delay_ms: 0,
            now: 0,
            closing: BTreeMap::new(),
            max_conns: usize::MAX,
            deadlines: Deadlines::default(),
        }
    }

    /// At most `n` connections at once (`limits.max_qp`: each needs a QP): past it, a
    /// Connect fails at once with a reason naming the limit, and an incoming connection's
    /// MPA Request is answered with a reject whose private data is [`LIMIT_REJECT`] (reset
    /// at once when 64 refusals are already under way).
    pub fn with_max_conns(mut self, n: usize) -> ConnManager {
        self.max_conns = n;
        self
    }

    fn at_limit(&self) -> bool {
        self.conns.len() >= self.max_conns
    }

    /// After a valid MPA Reply, an initiator waits at least `ms` before its QP enters RTS and
    /// its application hears Established, so its first FPDU cannot overtake a responder still
    /// handing the socket to its QP. Linux siw sends its Reply before it does that, and
    /// data arriving in between sits unread until more data comes: a first Send (or RTR) that
    /// is answered before anything else is sent then hangs both sides (seen against siw in a
    /// VM, see `verbs-api/verbs/tests/siw_interop.rs`). A peer slow to reply is slow at that
    /// step too (a preempted VM), so the hold grows to half the time the Reply took, up to
    /// [`MAX_RTS_HOLD_MS`]. 0 turns the hold off.
    pub fn with_rts_delay(mut self, ms: u64) -> ConnManager {
        self.rts_delay_ms = ms;
        self
    }

    pub fn listen(
        &mut self,
        app: AppId,
        port: u16,
        s: ConnSettings,
    ) -> Result<Vec<Action>, CmError> {
        if self.listeners.contains_key(&port) {
            return Err(CmError::PortInUse);
        }
        self.listeners.insert(port, (app, s));
        Ok(vec![Action::Daemon(Command::TcpListen {
            port,
            backlog: iwarp_abi::command::LISTEN_BACKLOG,
        })])
    }

    /// Forgets the listener on `port` (the daemon could not listen there).
    pub fn unlisten(&mut self, port: u16) {
        self.listeners.remove(&port);
    }

    /// `app` stops listening on `port`: the daemon closes the port, so connections to it
    /// are refused and the port can be listened on again. Requests that already arrived
    /// stay the application's to accept or reject.
    pub fn stop_listening(&mut self, app: AppId, port: u16) -> Result<Vec<Action>, CmError> {
        match self.listeners.get(&port) {
            Some((owner, _)) if *owner == app => {}
            _ => return Err(CmError::NotListening),
        }
        self.listeners.remove(&port);
        Ok(vec![Action::Daemon(Command::TcpUnlisten { port })])
    }

    /// Active open for `qp` to `remote` (the initiator sends the MPA Request).
    pub fn connect(
        &mut self,
        app: AppId,
        qp: u32,
        remote: SocketAddr,
        s: ConnSettings,
        now: u64,
    ) -> (u32, Vec<Action>) {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.deadlines.touch(conn);
        if self.at_limit() {
            let event = Event::ConnectFailed {
                conn,
                cause: ConnectFailure::Other,
                reason: format!(
                    "connection limit reached: {} connections open or in setup \
                     (limits.max_qp)",
                    self.conns.len()
                ),
            };
            return (conn, vec![Action::App { app, event }]);
        }
        self.conns.insert(
            conn,
            Conn {
                app,
                qp: Some(qp),
                cm: Connection::initiator(s, now, self.timeout_ms),
                established: false,
                held: None,
                tcp_up_at: None,
                refusing: false,
            },
        );
        (
            conn,
            vec![Action::Daemon(Command::TcpConnect {
                conn,
                qp: QpId(qp),
                remote,
            })],
        )
    }

    fn owned(&mut self, app: AppId, conn: u32) -> Result<&mut Conn, CmError> {
        match self.conns.get_mut(&conn) {
            Some(c) if c.app == app => Ok(c),
            _ => Err(CmError::NoSuchConnection),
        }
    }

    /// Accepts a [`Event::ConnectRequest`] for `qp` with the application's settings.
    pub fn accept(
        &mut self,
        app: AppId,
        conn: u32,
        qp: u32,
        s: ConnSettings,
    ) -> Result<Vec<Action>, CmError> {
        self.deadlines.touch(conn);
        let c = self.owned(app, conn)?;
        c.qp = Some(qp);
        c.cm.accept(s);
        let mut out = vec![Action::Daemon(Command::TcpAccept { conn, qp: QpId(qp) })];
        self.drain(conn, &mut out);
        Ok(out)
    }

    /// Rejects a request with private data, then closes the connection.
    pub fn reject(
        &mut self,
        app: AppId,
        conn: u32,
        private_data: &[u8],
    ) -> Result<Vec<Action>, CmError> {
        self.deadlines.touch(conn);
        let c = self.owned(app, conn)?;
        c.cm.reject(private_data);
        let mut out = Vec::new();
        self.drain(conn, &mut out);
        Ok(out)
    }

    /// The QP `app`'s connection `conn` runs on, once it has one.
    pub fn qp_of(&self, app: AppId, conn: u32) -> Option<u32> {
        self.conns
            .get(&conn)
            .filter(|c| c.app == app)
            .and_then(|c| c.qp)
    }

    /// The QP of a connection closed gracefully, once its stream ended (`u` is the daemon's
    /// `TcpClosed` for it); each such QP is given once.
    pub fn closed_qp(&mut self, u: &Upcall) -> Option<u32> {
        match *u {
            Upcall::TcpClosed { conn, .. } => self.closing.remove(&conn),
            _ => None,
        }
    }

    /// Graceful (`abort == false`: TCP FIN after the QP's Closing) or abortive disconnect.
    pub fn disconnect(
        &mut self,
        app: AppId,
        conn: u32,
        abort: bool,
    ) -> Result<Vec<Action>, CmError> {
        self.deadlines.touch(conn);
        self.owned(app, conn)?;
        let qp = self.conns.remove(&conn).and_then(|c| c.qp);
        if let (Some(qp), false) = (qp, abort) {
            self.closing.insert(conn, qp);
        }
        Ok(vec![Action::Daemon(if abort {
            Command::TcpAbort { conn }
        } else {
            Command::TcpClose { conn }
        })])
    }

    /// The application went away: abort its connections (its peers see them end) and stop
    /// its listens.
    pub fn app_gone(&mut self, app: AppId) -> Vec<Action> {
        let mut out = Vec::new();
        let mine: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.app == app)
            .map(|(k, _)| *k)
            .collect();
        for conn in mine {
            self.conns.remove(&conn);
            self.deadlines.touch(conn);
            out.push(Action::Daemon(Command::TcpAbort { conn }));
        }
        let ports: Vec<u16> = self
            .listeners
            .iter()
            .filter(|(_, (a, _))| *a == app)
            .map(|(p, _)| *p)
            .collect();
        for port in ports {
            self.listeners.remove(&port);
            out.push(Action::Daemon(Command::TcpUnlisten { port }));
        }
        out
    }

    pub fn handle_upcall(&mut self, u: &Upcall, now: u64) -> Vec<Action> {
        self.now = now;
        let mut out = Vec::new();
        if let Upcall::TcpIncoming { conn, .. }
        | Upcall::TcpEstablished { conn }
        | Upcall::TcpBytes { conn, .. }
        | Upcall::TcpClosed { conn, .. } = *u
        {
            self.deadlines.touch(conn);
        }
        match *u {
            Upcall::TcpIncoming {
                conn,
                local_port,
                peer,
            } => match self.listeners.get(&local_port) {
                Some(_) if self.conns.len() >= self.max_conns.saturating_add(MAX_REFUSING) => {
                    out.push(Action::Daemon(Command::TcpAbort { conn }))
                }
                Some((app, s)) => {
                    let refusing = self.at_limit();
                    self.conns.insert(
                        conn,
                        Conn {
                            app: *app,
                            qp: None,
                            cm: Connection::responder(s.clone(), now, self.timeout_ms),
                            established: false,
                            held: None,
                            tcp_up_at: None,
                            refusing,
                        },
                    );
                    // Remember the peer for the request event.
                    self.pending_peer(conn, local_port, peer);
                }
                None => out.push(Action::Daemon(Command::TcpAbort { conn })),
            },
            Upcall::TcpEstablished { conn } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.tcp_up_at = Some(now);
                    c.cm.handle_tcp_established(now);
                }
                self.drain(conn, &mut out);
            }
            Upcall::TcpBytes { conn, ref bytes } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.cm.handle_bytes(bytes.as_bytes());
                }
                self.drain(conn, &mut out);
            }
            Upcall::TcpClosed { conn, reason } => {
                if let Some(mut c) = self.conns.remove(&conn) {
                    if c.held.is_some() {
                        out.push(Action::App {
                            app: c.app,
                            event: Event::ConnectFailed {
                                conn,
                                cause: Failure::TcpClosed(reason).cause(),
                                reason: Failure::TcpClosed(reason).to_string(),
                            },
                        });
                    } else if c.established {
                        out.push(Action::App {
                            app: c.app,
                            event: Event::Disconnected {
                                conn,
                                reason: format!("{reason:?}"),
                            },
                        });
                    } else {
                        c.cm.handle_tcp_closed(reason);
                        self.conns.insert(conn, c);
                        self.drain(conn, &mut out);
                    }
                }
            }
            _ => {}
        }
        out
    }

    pub fn handle_timeout(&mut self, now: u64) -> Vec<Action> {
        self.now = now;
        self.deadlines.refile(&self.conns);
        if self.deadlines.earliest().is_none_or(|t| now < t) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for conn in self.deadlines.due(now) {
            self.deadlines.touch(conn);
            if let Some(c) = self.conns.get_mut(&conn) {
                // A held connection's only deadline is its hold (`Conn::next_timeout`).
                if let Some((_, actions)) = c.held.take() {
                    c.established = true;
                    out.extend(actions);
                } else {
                    c.cm.handle_timeout(now);
                }
            }
            self.drain(conn, &mut out);
        }
        self.deadlines.refile(&self.conns);
        out
    }

    /// The earliest deadline of any connection in setup.
    pub fn next_timeout(&mut self) -> Option<u64> {
        self.deadlines.refile(&self.conns);
        self.deadlines.earliest()
    }

    fn pending_peer(&mut self, conn: u32, port: u16, peer: SocketAddr) {
        self.peers.insert(conn, (port, peer));
    }

    /// A connection refused for the limit: its Request is rejected with [`LIMIT_REJECT`]
    /// and the connection closed after the reject; whatever else ends it (a timeout, a
    /// bad frame, the peer closing) only closes it. No application hears of it.
    fn drain_refusal(
        &mut self,
        conn: u32,
        events: Vec<cm::Event>,
        state: cm::State,
        out: &mut Vec<Action>,
    ) {
        let done = state == cm::State::Rejected;
        for ev in events {
            match ev {
                cm::Event::Transmit(bytes) => out.extend(
                    Chunk::split(&bytes)
                        .map(|bytes| Action::Daemon(Command::TcpSend { conn, bytes })),
                ),
                cm::Event::Request(_) => {
                    self.peers.remove(&conn);
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.cm.reject(LIMIT_REJECT);
                    }
                    // Sends the reject, then closes.
                    self.drain(conn, out);
                    return;
                }
                cm::Event::Failed(_) => {
                    out.push(Action::Daemon(Command::TcpAbort { conn }));
                    self.peers.remove(&conn);
                    self.conns.remove(&conn);
                    return;
                }
                cm::Event::Established { .. } | cm::Event::Rejected { .. } => {}
            }
        }
        if done {
            out.push(Action::Daemon(Command::TcpClose { conn }));
            self.conns.remove(&conn);
        }
    }

    fn drain(&mut self, conn: u32, out: &mut Vec<Action>) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let app = c.app;
        let qp = c.qp.unwrap_or(u32::MAX);
        let role = c.cm.role();
        let state = c.cm.state();
        let refusing = c.refusing;
        let events: Vec<cm::Event> = std::iter::from_fn(|| c.cm.poll_event()).collect();
        if refusing {
            self.drain_refusal(conn, events, state, out);
            return;
        }
        let mut remove = false;
        for ev in events {
            match ev {
                cm::Event::Transmit(bytes) => out.extend(
                    Chunk::split(&bytes)
                        .map(|bytes| Action::Daemon(Command::TcpSend { conn, bytes })),
                ),
                cm::Event::Request(inc) => {
                    let (port, peer) = self
                        .peers
                        .remove(&conn)
                        .unwrap_or((0, SocketAddr::from(([0, 0, 0, 0], 0))));
                    out.push(Action::App {
                        app,
                        event: Event::ConnectRequest(ConnectRequest {
                            conn,
                            port,
                            peer,
                            private_data: inc.private_data,
                        }),
                    });
                }
                cm::Event::Established { params, .. } => {
                    // Bytes that followed the MPA frame would be the engine's first FPDUs;
                    // neither side sends any before both are in RTS in the flows used here
                    // (RFC 5044 section 7.1), so there are none to hand over.
                    let initiator = role == cm::Role::Initiator;
                    let rts = vec![
                        Action::Daemon(Command::QpRts {
                            qp: QpId(qp),
                            conn,
                            params: rts_params(&params, initiator, self.mss),
                        }),
                        Action::App {
                            app,
                            event: Event::Established(Established {
                                conn,
                                qp: QpId(qp),
                                ird: params.ird,
                                ord: params.ord,
                                rdmap_version: params.rdmap_version,
                                private_data: params.peer_private_data,
                            }),
                        },
                    ];
                    let (floor, now) = (self.rts_delay_ms, self.now);
                    if let Some(c) = self.conns.get_mut(&conn) {
                        if initiator && floor > 0 {
                            let reply_took = now.saturating_sub(c.tcp_up_at.unwrap_or(now));
                            let hold = floor.max((reply_took / 2).min(MAX_RTS_HOLD_MS));
                            c.held = Some((now + hold, rts));
                        } else {
                            c.established = true;
                            out.extend(rts);
                        }
                    }
                }
                cm::Event::Rejected { private_data } => {
                    remove = true;
                    out.push(Action::App {
                        app,
                        event: Event::Rejected { conn, private_data },
                    });
                    out.push(Action::Daemon(Command::TcpClose { conn }));
                }
                cm::Event::Failed(reason) => {
                    remove = true;
                    out.push(Action::App {
                        app,
                        event: Event::ConnectFailed {
                            conn,
                            cause: reason.cause(),
                            reason: reason.to_string(),
                        },
                    });
                    out.push(Action::Daemon(Command::TcpAbort { conn }));
                }
            }
        }
        if state == cm::State::Rejected && role == cm::Role::Responder {
            // Our reject went out: close after it (graceful, so the Reply is delivered).
            remove = true;
            out.push(Action::Daemon(Command::TcpClose { conn }));
        }
        if remove {
            self.conns.remove(&conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_abi::command::{CloseReason, RtrKind};

    const A: AppId = 10;
    const B: AppId = 20;

    /// Two RNICs' connection managers joined by a simulated TCP: a command of one becomes the
    /// upcall the other's daemon would report.
    struct Net {
        cms: [ConnManager; 2],
        /// Control's conn id on each side for one TCP connection (side 0 id -> side 1 id).
        link: BTreeMap<(usize, u32), (usize, u32)>,
        app_events: Vec<(usize, AppId, Event)>,
        rts: Vec<(usize, QpId, iwarp_abi::command::RtsParams)>,
        listening: Vec<(usize, u16)>,
        /// The time upcalls are delivered at.
        now: u64,
    }

    impl Net {
        fn new() -> Net {
            Net {
                cms: [ConnManager::new(1000, 1460), ConnManager::new(1000, 1460)],
                link: BTreeMap::new(),
                app_events: vec![],
                rts: vec![],
                listening: vec![],
                now: 0,
            }
        }

        fn run(&mut self, side: usize, actions: Vec<Action>) {
            let mut queue: Vec<(usize, Action)> = actions.into_iter().map(|a| (side, a)).collect();
            while !queue.is_empty() {
                let (s, a) = queue.remove(0);
                let other = 1 - s;
                let mut ups: Vec<(usize, Upcall)> = vec![];
                match a {
                    Action::App { app, event } => self.app_events.push((s, app, event)),
                    Action::Daemon(Command::TcpListen { port, .. }) => {
                        self.listening.push((s, port))
                    }
                    Action::Daemon(Command::TcpConnect { conn, remote, .. }) => {
                        let port = remote.port();
                        if self.listening.contains(&(other, port)) {
                            let peer_conn = 1000 + conn;
                            self.link.insert((s, conn), (other, peer_conn));
                            self.link.insert((other, peer_conn), (s, conn));
                            ups.push((
                                other,
                                Upcall::TcpIncoming {
                                    conn: peer_conn,
                                    local_port: port,
                                    peer: SocketAddr::from(([10, 0, 0, 1], 40000)),
                                },
                            ));
                            ups.push((s, Upcall::TcpEstablished { conn }));
                        } else {
                            ups.push((
                                s,
                                Upcall::TcpClosed {
                                    conn,
                                    reason: CloseReason::Refused,
                                },
                            ));
                        }
                    }
                    Action::Daemon(Command::TcpSend { conn, bytes }) => {
                        if let Some(&(o, oc)) = self.link.get(&(s, conn)) {
                            ups.push((o, Upcall::TcpBytes { conn: oc, bytes }));
                        }
                    }
                    Action::Daemon(Command::TcpClose { conn })
                    | Action::Daemon(Command::TcpAbort { conn }) => {
                        let reason = if matches!(a, Action::Daemon(Command::TcpClose { .. })) {
                            CloseReason::Graceful
                        } else {
                            CloseReason::Reset
                        };
                        if let Some((o, oc)) = self.link.remove(&(s, conn)) {
                            self.link.remove(&(o, oc));
                            ups.push((o, Upcall::TcpClosed { conn: oc, reason }));
                        }
                    }
                    Action::Daemon(Command::QpRts { qp, params, .. }) => {
                        self.rts.push((s, qp, params))
                    }
                    Action::Daemon(Command::TcpUnlisten { port }) => {
                        self.listening.retain(|l| *l != (s, port))
                    }
                    Action::Daemon(_) => {}
                }
                for (to, u) in ups {
                    let acts = self.cms[to].handle_upcall(&u, self.now);
                    queue.extend(acts.into_iter().map(|a| (to, a)));
                }
            }
        }

        fn request(&self) -> u32 {
            self.app_events
                .iter()
                .find_map(|(_, _, e)| match e {
                    Event::ConnectRequest(r) => Some(r.conn),
                    _ => None,
                })
                .expect("a connect request")
        }
    }

    fn settings(ird: u16, ord: u16, pd: &[u8]) -> ConnSettings {
        ConnSettings {
            ird,
            ord,
            private_data: pd.to_vec(),
            ..ConnSettings::default()
        }
    }

    fn remote() -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 2], 5000))
    }

    /// Connects side 0 (holding its RTS `hold` ms) to side 1's listener at time 0, and
    /// side 1 accepts at `accept_at`; returns side 0's connection id.
    fn connect_with_hold_accepted_at(n: &mut Net, hold: u64, accept_at: u64) -> u32 {
        n.cms[0] = ConnManager::new(1000, 1460).with_rts_delay(hold);
        let acts = n.cms[1].listen(B, 5000, ConnSettings::default()).unwrap();
        n.run(1, acts);
        let (conn, acts) = n.cms[0].connect(A, 7, remote(), ConnSettings::default(), 0);
        n.run(0, acts);
        n.now = accept_at;
        let acts = n.cms[1]
            .accept(B, n.request(), 9, ConnSettings::default())
            .unwrap();
        n.run(1, acts);
        conn
    }

    fn connect_with_hold(n: &mut Net, hold: u64) -> u32 {
        connect_with_hold_accepted_at(n, hold, 0)
    }

    fn established_on(n: &Net, side: usize) -> bool {
        n.app_events
            .iter()
            .any(|(s, _, e)| *s == side && matches!(e, Event::Established(_)))
    }

    fn failures_on(n: &Net, side: usize) -> Vec<String> {
        n.app_events
            .iter()
            .filter_map(|(s, _, e)| match e {
                Event::ConnectFailed { reason, .. } if *s == side => Some(reason.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn past_the_connection_limit_a_connect_fails_naming_it_and_an_incoming_one_is_rejected_naming_it(
    ) {
        let mut n = Net::new();
        n.cms[0] = ConnManager::new(1000, 1460).with_max_conns(2);
        n.cms[1] = ConnManager::new(1000, 1460).with_max_conns(1);
        let acts = n.cms[1].listen(B, 5000, ConnSettings::default()).unwrap();
        n.run(1, acts);
        // The first reaches side 1's application; the second finds side 1 at its limit.
        for _ in 0..2 {
            let (_, acts) = n.cms[0].connect(A, 7, remote(), ConnSettings::default(), 0);
            n.run(0, acts);
        }
        let requests = n
            .app_events
            .iter()
            .filter(|(_, _, e)| matches!(e, Event::ConnectRequest(_)))
            .count();
        assert_eq!(requests, 1);
        // RFC 5044 section 7.1.2: the responder answers the Request with a Reply whose Rej
        // bit is set; its private data names the limit (MPA carries no reason code).
        let rejected: Vec<_> = n
            .app_events
            .iter()
            .filter_map(|(s, _, e)| match e {
                Event::Rejected { private_data, .. } if *s == 0 => Some(private_data.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(rejected, vec![LIMIT_REJECT.to_vec()]);
        assert!(failures_on(&n, 0).is_empty(), "{:?}", failures_on(&n, 0));
        // Side 1's application heard only of the connection it can take, and the refused
        // one is gone from side 1.
        let on_1: Vec<_> = n.app_events.iter().filter(|(s, _, _)| *s == 1).collect();
        assert!(
            matches!(on_1[..], [(_, _, Event::ConnectRequest(_))]),
            "{on_1:?}"
        );
        assert_eq!(n.cms[1].conns.len(), 1);
        // Side 0 holds one connection in setup; with a limit of one more, a third is open
        // and a fourth fails before any TCP is started.
        let (_, acts) = n.cms[0].connect(A, 7, remote(), ConnSettings::default(), 0);
        assert!(matches!(
            acts[..],
            [Action::Daemon(Command::TcpConnect { .. })]
        ));
        let (_, acts) = n.cms[0].connect(A, 7, remote(), ConnSettings::default(), 0);
        assert!(
            matches!(&acts[..], [Action::App { event: Event::ConnectFailed { reason, .. }, .. }]
                if reason.contains("connection limit") && reason.contains("limits.max_qp")),
            "{acts:?}"
        );
    }

    #[test]
    fn the_initiator_enters_rts_only_after_its_hold() {
        let mut n = Net::new();
        connect_with_hold(&mut n, 5);
        // The responder is in RTS at once; the initiator has the Reply but waits.
        assert_eq!(n.rts.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1]);
        assert!(established_on(&n, 1) && !established_on(&n, 0));
        assert_eq!(n.cms[0].next_timeout(), Some(5));
        assert!(n.cms[0].handle_timeout(4).is_empty());
        let acts = n.cms[0].handle_timeout(5);
        n.run(0, acts);
        assert_eq!(n.rts.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 0]);
        assert!(established_on(&n, 0));
        assert_eq!(n.cms[0].next_timeout(), None);
    }

    #[test]
    fn a_peer_slow_to_reply_gets_half_its_reply_time_as_the_hold_up_to_the_cap() {
        // Reply 60 ms after the Request: held 30 ms, not the 5 ms floor.
        let mut n = Net::new();
        connect_with_hold_accepted_at(&mut n, 5, 60);
        assert_eq!(n.cms[0].next_timeout(), Some(60 + 30));
        assert!(n.cms[0].handle_timeout(89).is_empty());
        let acts = n.cms[0].handle_timeout(90);
        n.run(0, acts);
        assert!(established_on(&n, 0));
        // Reply after 900 ms: the hold stops at the cap.
        let mut n = Net::new();
        connect_with_hold_accepted_at(&mut n, 5, 900);
        assert_eq!(n.cms[0].next_timeout(), Some(900 + MAX_RTS_HOLD_MS));
        // A quick peer gets the floor; a floor of 0 keeps the hold off however slow the peer.
        let mut n = Net::new();
        connect_with_hold_accepted_at(&mut n, 5, 4);
        assert_eq!(n.cms[0].next_timeout(), Some(4 + 5));
        let mut n = Net::new();
        connect_with_hold_accepted_at(&mut n, 0, 900);
        assert!(established_on(&n, 0));
        assert_eq!(n.cms[0].next_timeout(), None);
    }

    #[test]
    fn a_connection_lost_during_the_hold_fails_instead_of_establishing() {
        let mut n = Net::new();
        let conn = connect_with_hold(&mut n, 5);
        let acts = n.cms[0].handle_upcall(
            &Upcall::TcpClosed {
                conn,
                reason: CloseReason::Reset,
            },
            2,
        );
        n.run(0, acts);
        assert!(n.app_events.iter().any(|(s, _, e)| *s == 0
            && matches!(
                e,
                Event::ConnectFailed { reason, .. }
                    if *reason == Failure::TcpClosed(CloseReason::Reset).to_string()
            )));
        let acts = n.cms[0].handle_timeout(10);
        n.run(0, acts);
        assert!(!established_on(&n, 0), "no Established after the loss");
        assert_eq!(n.rts.iter().filter(|r| r.0 == 0).count(), 0);
    }

    /// Stopping a listen closes the port in the daemon: a connect is then refused, and the
    /// port can be listened on again. Only the listening application may stop it.
    #[test]
    fn stop_listening_refuses_connects_and_frees_the_port() {
        let mut n = Net::new();
        let acts = n.cms[1].listen(B, 5000, ConnSettings::default()).unwrap();
        n.run(1, acts);
        assert_eq!(n.cms[1].stop_listening(A, 5000), Err(CmError::NotListening));
        let acts = n.cms[1].stop_listening(B, 5000).unwrap();
        assert_eq!(
            acts,
            vec![Action::Daemon(Command::TcpUnlisten { port: 5000 })]
        );
        n.run(1, acts);
        assert_eq!(n.cms[1].stop_listening(B, 5000), Err(CmError::NotListening));
        let (conn, acts) = n.cms[0].connect(A, 7, remote(), settings(4, 8, b""), 0);
        n.run(0, acts);
        assert!(n.app_events.iter().any(|(s, app, e)| *s == 0
            && *app == A
            && matches!(e, Event::ConnectFailed { conn: c, .. } if *c == conn)));
        assert!(!n.app_events.iter().any(|(s, ..)| *s == 1));
        let acts = n.cms[1].listen(A, 5000, ConnSettings::default()).unwrap();
        n.run(1, acts);
        assert!(n.listening.contains(&(1, 5000)));
    }

    #[test]
    fn connect_accept_puts_both_qps_in_rts_with_each_sides_ird_ord() {
        let mut n = Net::new();
        let acts = n.cms[1].listen(B, 5000, ConnSettings::default()).unwrap();
        n.run(1, acts);
        assert_eq!(
            n.cms[1].listen(B, 5000, ConnSettings::default()),
            Err(CmError::PortInUse)
        );
        let (conn, acts) = n.cms[0].connect(A, 7, remote(), settings(4, 8, b"hi"), 0);
        n.run(0, acts);
        let peer_conn = n.request();
        assert!(n.app_events.iter().any(|(s, app, e)| *s == 1
            && *app == B
            && matches!(e, Event::ConnectRequest(r) if r.port == 5000 && r.private_data == b"hi")));
        // Only the listening app may accept.
        assert_eq!(
            n.cms[1].accept(A, peer_conn, 9, ConnSettings::default()),
            Err(CmError::NoSuchConnection)
        );
        let acts = n.cms[1]
            .accept(B, peer_conn, 9, settings(2, 16, b"ok"))
            .unwrap();
        n.run(1, acts);
        let rts: BTreeMap<usize, (QpId, u16, u16, bool)> = n
            .rts
            .iter()
            .map(|(s, qp, p)| (*s, (*qp, p.ird, p.ord, p.crc_tx)))
            .collect();
        assert_eq!(
            rts[&0],
            (QpId(7), 4, 2, true),
            "initiator's ORD capped by peer IRD 2"
        );
        assert_eq!(
            rts[&1],
            (QpId(9), 2, 4, true),
            "responder's ORD capped by peer IRD 4"
        );
        assert!(n.rts.iter().all(|(_, _, p)| p.rtr == RtrKind::None));
        assert!(n.app_events.iter().any(|(s, _, e)| *s == 0
            && matches!(e, Event::Established(x) if x.conn == conn && x.private_data == b"ok")));
        // Graceful disconnect: the peer's application hears of it.
        let acts = n.cms[0].disconnect(A, conn, false).unwrap();
        n.run(0, acts);
        assert!(n.app_events.iter().any(|(s, _, e)| *s == 1
            && matches!(
                e,
                Event::Disconnected { reason, .. } if reason == "Graceful"
            )));
        // Its QP is handed back once, when its own stream ended.
        let closed = Upcall::TcpClosed {
            conn,
            reason: CloseReason::Graceful,
        };
        assert_eq!(n.cms[0].closed_qp(&closed), Some(7));
        assert_eq!(n.cms[0].closed_qp(&closed), None);
    }

    #[test]
    fn a_reject_reaches_the_initiator_with_its_private_data() {
        let mut n = Net::new();
        let acts = n.cms[1].listen(B, 5000, ConnSettings::default()).unwrap();
        n.run(1, acts);
        let (conn, acts) = n.cms[0].connect(A, 7, remote(), ConnSettings::default(), 0);
        n.run(0, acts);
        let acts = n.cms[1].reject(B, n.request(), b"busy").unwrap();
        n.run(1, acts);
        assert!(n.app_events.contains(&(
            0,
            A,
            Event::Rejected {
                conn,
                private_data: b"busy".to_vec()
            }
        )));
        assert!(n.rts.is_empty());
        assert!(n.cms[0].conns.is_empty() && n.cms[1].conns.is_empty());
    }

    #[test]
    fn refused_silent_and_dead_apps_each_end_with_a_reason() {
        let mut n = Net::new();
        // Nobody listens: refused, and said so.
        let (conn, acts) = n.cms[0].connect(A, 7, remote(), ConnSettings::default(), 0);
        n.run(0, acts);
        let refused = Failure::TcpClosed(CloseReason::Refused);
        assert!(n.app_events.contains(&(
            0,
            A,
            Event::ConnectFailed {
                conn,
                cause: ConnectFailure::Refused,
                reason: refused.to_string()
            }
        )));
        assert!(refused.to_string().contains("refused"), "{refused}");
        // The listener's app never decides: its side times out and resets the peer.
        let acts = n.cms[1].listen(B, 5000, ConnSettings::default()).unwrap();
        n.run(1, acts);
        let (conn2, acts) = n.cms[0].connect(A, 8, remote(), ConnSettings::default(), 0);
        n.run(0, acts);
        assert_eq!(n.cms[1].next_timeout(), Some(1000));
        let acts = n.cms[1].handle_timeout(1000);
        n.run(1, acts);
        assert!(n.app_events.iter().any(|(s, _, e)| *s == 1
            && matches!(
                e,
                Event::ConnectFailed { cause: ConnectFailure::TimedOut, reason, .. }
                    if *reason == Failure::Timeout {
                        state: cm::State::AwaitingDecision
                    }
                    .to_string()
            )));
        assert!(n.app_events.contains(&(
            0,
            A,
            Event::ConnectFailed {
                conn: conn2,
                cause: ConnectFailure::Reset,
                reason: Failure::TcpClosed(CloseReason::Reset).to_string()
            }
        )));
        // An established connection whose app dies: aborted, the peer sees a reset.
        let (c3, acts) = n.cms[0].connect(A, 9, remote(), ConnSettings::default(), 0);
        n.run(0, acts);
        let req = n
            .app_events
            .iter()
            .rev()
            .find_map(|(_, _, e)| match e {
                Event::ConnectRequest(r) => Some(r.conn),
                _ => None,
            })
            .unwrap();
        let acts = n.cms[1].accept(B, req, 3, ConnSettings::default()).unwrap();
        n.run(1, acts);
        let acts = n.cms[1].app_gone(B);
        assert!(acts.contains(&Action::Daemon(Command::TcpUnlisten { port: 5000 })));
        n.run(1, acts);
        assert!(n.app_events.contains(&(
            0,
            A,
            Event::Disconnected {
                conn: c3,
                reason: "Reset".into()
            }
        )));
    }

    /// Deadlines come due in time order, a connection's deadline is the one its latest
    /// input left (a disconnected one has none), and a look with nothing due costs no walk.
    #[test]
    fn deadlines_follow_each_connection_and_fire_in_order() {
        const A: AppId = 1;
        let mut cm = ConnManager::new(100, 1460);
        let conns: Vec<u32> = [0, 10, 20, 30]
            .iter()
            .map(|&at| cm.connect(A, 7, remote(), ConnSettings::default(), at).0)
            .collect();
        assert_eq!(cm.next_timeout(), Some(100));
        // The first goes away before its wait ends: the second's deadline is next.
        cm.disconnect(A, conns[0], true).unwrap();
        assert_eq!(cm.next_timeout(), Some(110));
        assert!(cm.handle_timeout(109).is_empty(), "nothing due yet");
        let failed = |acts: &[Action]| -> Vec<u32> {
            acts.iter()
                .filter_map(|a| match a {
                    Action::App {
                        event: Event::ConnectFailed { conn, .. },
                        ..
                    } => Some(*conn),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(failed(&cm.handle_timeout(110)), [conns[1]]);
        assert_eq!(cm.next_timeout(), Some(120));
        // Two due at one look, earliest first; none fires twice.
        assert_eq!(failed(&cm.handle_timeout(135)), [conns[2], conns[3]]);
        assert!(failed(&cm.handle_timeout(500)).is_empty());
        assert_eq!(cm.next_timeout(), None);
    }
}
