//! The control side of the control ↔ iwarpd contract, sans-IO: what the connection manager's
//! and the resource tables' results become as [`Command`]s, which of the daemon's workers
//! each goes to ([`Router`]), and a watcher that turns samples of the daemon segment's
//! generation and heartbeat words into "alive", "restarted" or "stalled", so a dead or
//! restarted iwarpd is detected, never waited on forever.

use crate::resources::AppId;
use crate::resources::Teardown;
use crate::stag::StagKind;
use iwarp_abi::command::{Command, RtrKind, RtsParams, Upcall};
use iwarp_abi::id::{CqId, PdId, QpId, SrqId};
use iwarp_abi::qp::QpState;
use iwarp_wire::mpa::negotiation::Negotiated;
use std::collections::HashMap;

/// Which worker of the daemon serves what. Every resource of an application lives on one
/// worker (its QPs' connections included, so a worker serves them end to end): the
/// application's commands go there. An application is placed when it connects, on the worker
/// serving the fewest applications then. A connection's commands go to the worker that holds it:
/// its QP's for an active open, or the one that reported it incoming (a listener's
/// connections arrive on the worker of the listening application).
#[derive(Debug)]
pub struct Router {
    workers: usize,
    apps: HashMap<AppId, usize>,
    qps: HashMap<QpId, usize>,
    conns: HashMap<u32, usize>,
    listens: HashMap<u16, usize>,
}

impl Router {
    pub fn new(workers: usize) -> Router {
        Router {
            workers: workers.max(1),
            apps: HashMap::new(),
            qps: HashMap::new(),
            conns: HashMap::new(),
            listens: HashMap::new(),
        }
    }

    /// Places application `app` on the worker that serves the fewest applications (the
    /// lowest-numbered of equals) and returns it.
    pub fn place(&mut self, app: AppId) -> usize {
        let mut load = vec![0usize; self.workers];
        for &w in self.apps.values() {
            load[w] += 1;
        }
        let w = (0..self.workers).min_by_key(|&w| load[w]).unwrap_or(0);
        self.apps.insert(app, w);
        w
    }

    /// The worker of application `app` (worker 0 for one never placed).
    pub fn app_worker(&self, app: AppId) -> usize {
        self.apps.get(&app).copied().unwrap_or(0)
    }

    /// `app` went away and its teardown was sent: its place is free.
    pub fn forget_app(&mut self, app: AppId) {
        self.apps.remove(&app);
    }

    /// The worker command `c` goes to, sent on behalf of `app` when the caller knows it
    /// (the connection manager's commands name a connection or a port instead). A
    /// connection or port nobody routed yet goes to worker 0, which answers that it has no
    /// such thing.
    pub fn route(&mut self, app: Option<AppId>, c: &Command) -> usize {
        let of_app = app.map_or(0, |a| self.app_worker(a));
        match *c {
            Command::CreateQp { qp, .. } => {
                self.qps.insert(qp, of_app);
                of_app
            }
            Command::DestroyQp { qp } => self.qps.remove(&qp).unwrap_or(of_app),
            Command::TcpConnect { conn, qp, .. } => {
                let w = self.qps.get(&qp).copied().unwrap_or(of_app);
                self.conns.insert(conn, w);
                w
            }
            Command::TcpListen { port, .. } => {
                self.listens.insert(port, of_app);
                of_app
            }
            Command::TcpUnlisten { port } => self.listens.remove(&port).unwrap_or(0),
            Command::TcpAccept { conn, .. }
            | Command::TcpSend { conn, .. }
            | Command::TcpClose { conn }
            | Command::TcpAbort { conn }
            | Command::QpRts { conn, .. } => self.conns.get(&conn).copied().unwrap_or(0),
            _ => of_app,
        }
    }

    /// Learns from `worker`'s upcall where an incoming connection lives, and forgets a
    /// connection the daemon reports closed (it has forgotten it too).
    pub fn learn(&mut self, worker: usize, u: &Upcall) {
        match *u {
            Upcall::TcpIncoming { conn, .. } => {
                self.conns.insert(conn, worker);
            }
            Upcall::TcpClosed { conn, .. } => {
                self.conns.remove(&conn);
            }
            _ => {}
        }
    }
}

/// The QpRts parameters for a connection whose MPA exchange gave `n`. `initiator` is the
/// side that sent the Request: in peer-to-peer mode it sends the agreed RTR message first
/// (RFC 6581 section 3). `mss` bounds every FPDU to one TCP segment (RFC 5044 section 8).
pub fn rts_params(n: &Negotiated, initiator: bool, mss: u32) -> RtsParams {
    let rtr = match n.rtr {
        None => RtrKind::None,
        Some(r) if r.write => RtrKind::ZeroLengthWrite,
        Some(r) if r.read => RtrKind::ZeroLengthRead,
        Some(_) => RtrKind::ZeroLengthSend,
    };
    RtsParams {
        crc_tx: n.tx.crc,
        crc_rx: n.rx.crc,
        markers_tx: n.tx.markers,
        markers_rx: n.rx.markers,
        // Markers count from the first octet after the MPA Request/Reply (RFC 5044 section
        // 4.3); the daemon's stream position starts there once the QP owns the connection.
        marker_offset: 0,
        mpa_rev: n.revision,
        ird: n.ird,
        ord: n.ord,
        rtr,
        rtr_initiator: initiator && rtr != RtrKind::None,
        rdmap_version: n.rdmap_version,
        mss,
    }
}

/// The commands that tear down what an application owned, in destroy order: every QP is
/// moved to Error first (which flushes its outstanding work with flushed completions and
/// ends its connection, so the peer sees it end), then destroyed; then its STags, S-RQs, CQs
/// and PDs.
pub fn teardown_commands(t: &Teardown) -> Vec<Command> {
    let mut out = Vec::new();
    for &qp in &t.qps {
        out.push(Command::ModifyQp {
            qp: QpId(qp),
            state: QpState::Error,
        });
        out.push(Command::DestroyQp { qp: QpId(qp) });
    }
    for &(stag, kind) in &t.stags {
        out.push(match kind {
            StagKind::Mr | StagKind::FastReg => Command::DeregisterMr { stag },
            StagKind::Mw => Command::DeallocMw { stag },
        });
    }
    out.extend(
        t.srqs
            .iter()
            .map(|&srq| Command::DestroySrq { srq: SrqId(srq) }),
    );
    out.extend(t.cqs.iter().map(|&cq| Command::DestroyCq { cq: CqId(cq) }));
    out.extend(t.pds.iter().map(|&pd| Command::DeallocPd { pd: PdId(pd) }));
    out
}

/// What the watcher concluded from the latest sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Alive,
    /// The generation word changed: a new iwarpd started; everything the old one held is gone.
    Restarted {
        old: u64,
        new: u64,
    },
    /// The heartbeat has not moved for at least the stall timeout.
    Stalled {
        since_ms: u64,
    },
}

/// Watches the daemon segment's generation and heartbeat words, sampled by the caller.
#[derive(Debug)]
pub struct DaemonWatch {
    generation: u64,
    beat: u64,
    beat_at: u64,
    stall_ms: u64,
}

impl DaemonWatch {
    pub fn new(generation: u64, beat: u64, now_ms: u64, stall_ms: u64) -> DaemonWatch {
        DaemonWatch {
            generation,
            beat,
            beat_at: now_ms,
            stall_ms,
        }
    }

    /// Feeds one sample. A restart is reported once, then the new generation is watched.
    pub fn sample(&mut self, generation: u64, beat: u64, now_ms: u64) -> Liveness {
        if generation != self.generation {
            let old = self.generation;
            *self = DaemonWatch::new(generation, beat, now_ms, self.stall_ms);
            return Liveness::Restarted {
                old,
                new: generation,
            };
        }
        if beat != self.beat {
            self.beat = beat;
            self.beat_at = now_ms;
            return Liveness::Alive;
        }
        let quiet = now_ms.saturating_sub(self.beat_at);
        if quiet >= self.stall_ms {
            Liveness::Stalled { since_ms: quiet }
        } else {
            Liveness::Alive
        }
    }
}

/// Commands sent to the daemon without waiting for each one's reply, and the events for
/// applications that must wait for them. A connection's move to RTS is told to its
/// application only once the daemon has answered the QpRts before it, so each event is
/// held until every command sent before it has been answered. Workers answer their own
/// commands in order, but not in step with each other, so what is awaited is a set.
#[derive(Debug)]
pub struct Pipeline<C, E> {
    /// Requests sent and not answered yet, by id, with what each was.
    outstanding: std::collections::BTreeMap<u64, C>,
    /// The highest request id sent so far.
    last: u64,
    /// Events in the order they were made, each with the last request sent before it.
    held: std::collections::VecDeque<(u64, E)>,
}

impl<C, E> Default for Pipeline<C, E> {
    fn default() -> Self {
        Pipeline {
            outstanding: Default::default(),
            last: 0,
            held: Default::default(),
        }
    }
}

impl<C, E> Pipeline<C, E> {
    /// Command `what`, with id `req`, was sent; its reply is still due. Ids must grow.
    pub fn sent(&mut self, req: u64, what: C) {
        self.outstanding.insert(req, what);
        self.last = self.last.max(req);
    }

    /// The reply to `req` came: the command it answers, or `None` when `req` was not sent
    /// through here (a reply someone else waits for).
    pub fn answered(&mut self, req: u64) -> Option<C> {
        self.outstanding.remove(&req)
    }

    /// Commands sent and not answered.
    pub fn in_flight(&self) -> usize {
        self.outstanding.len()
    }

    /// Events not yet released.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Holds `event` until every command sent so far is answered.
    pub fn hold(&mut self, event: E) {
        self.held.push_back((self.last, event));
    }

    /// The events, oldest first, whose commands are all answered. An event waits behind an
    /// older one still held, so one application's events keep their order.
    pub fn release(&mut self) -> Vec<E> {
        let oldest_due = self
            .outstanding
            .first_key_value()
            .map_or(u64::MAX, |(&req, _)| req);
        let mut out = Vec::new();
        while self.held.front().is_some_and(|(tag, _)| *tag < oldest_due) {
            if let Some((_, e)) = self.held.pop_front() {
                out.push(e);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stag::Stag;
    use iwarp_wire::mpa::{MpaParams, Rtr};

    fn negotiated(rtr: Option<Rtr>) -> Negotiated {
        Negotiated {
            tx: MpaParams {
                crc: true,
                markers: false,
            },
            rx: MpaParams {
                crc: true,
                markers: true,
            },
            revision: 2,
            ird: 4,
            ord: 2,
            rtr,
            rdmap_version: 2,
            peer_private_data: vec![],
        }
    }

    #[test]
    fn rts_params_carry_the_negotiated_values_and_who_sends_the_rtr() {
        let read = Some(Rtr {
            read: true,
            ..Rtr::NONE
        });
        let p = rts_params(&negotiated(read), true, 1460);
        assert_eq!((p.ird, p.ord, p.mpa_rev, p.rdmap_version), (4, 2, 2, 2));
        assert_eq!((p.crc_tx, p.markers_tx, p.markers_rx), (true, false, true));
        assert_eq!((p.rtr, p.rtr_initiator), (RtrKind::ZeroLengthRead, true));
        let p = rts_params(&negotiated(read), false, 1460);
        assert!(!p.rtr_initiator, "the responder waits for the RTR");
        let p = rts_params(&negotiated(None), true, 1460);
        assert_eq!((p.rtr, p.rtr_initiator), (RtrKind::None, false));
    }

    #[test]
    fn teardown_flushes_qps_first_and_frees_pds_last() {
        let t = Teardown {
            qps: vec![5],
            stags: vec![(Stag(0x101), StagKind::Mr), (Stag(0x201), StagKind::Mw)],
            srqs: vec![2],
            cqs: vec![3],
            pds: vec![1],
        };
        assert_eq!(
            teardown_commands(&t),
            vec![
                Command::ModifyQp {
                    qp: QpId(5),
                    state: QpState::Error
                },
                Command::DestroyQp { qp: QpId(5) },
                Command::DeregisterMr { stag: Stag(0x101) },
                Command::DeallocMw { stag: Stag(0x201) },
                Command::DestroySrq { srq: SrqId(2) },
                Command::DestroyCq { cq: CqId(3) },
                Command::DeallocPd { pd: PdId(1) },
            ]
        );
        assert!(teardown_commands(&Teardown::default()).is_empty());
    }

    #[test]
    fn an_application_and_its_connections_stay_on_one_worker() {
        use iwarp_abi::command::{Chunk, CloseReason};
        use std::net::SocketAddr;
        let mut r = Router::new(3);
        let peer: SocketAddr = "10.0.0.2:7000".parse().unwrap();
        // Apps 1, 2, 3, 4 on workers 0, 1, 2, 0; when 2 leaves, app 5 takes its worker.
        let w: Vec<usize> = (1..=4).map(|a| r.place(a)).collect();
        assert_eq!(w, [0, 1, 2, 0]);
        assert_eq!(r.app_worker(3), 2);
        r.forget_app(2);
        assert_eq!(r.place(5), 1, "the least loaded worker");
        r.place(2);
        assert_eq!(r.route(Some(2), &Command::AllocPd { pd: PdId(9) }), 1);
        // App 3's QP 1 connects: the connection's commands follow the QP without naming
        // the app.
        let ring = iwarp_abi::command::ShmPath::new(std::path::Path::new("/dev/shm/q")).unwrap();
        let create = Command::CreateQp {
            qp: QpId(1),
            pd: PdId(1),
            send_cq: CqId(1),
            recv_cq: CqId(1),
            srq: SrqId(iwarp_abi::command::NO_ID),
            sq_depth: 8,
            rq_depth: 8,
            sq: ring,
            rq: ring,
        };
        assert_eq!(r.route(Some(3), &create), 2);
        let connect = Command::TcpConnect {
            conn: 5,
            qp: QpId(1),
            remote: peer,
        };
        assert_eq!(r.route(None, &connect), 2);
        let send = Command::TcpSend {
            conn: 5,
            bytes: Chunk::new(b"MPA"),
        };
        assert_eq!(r.route(None, &send), 2);
        assert_eq!(r.route(None, &Command::TcpClose { conn: 5 }), 2);
        // App 2 listens; the connection its worker reports goes back to that worker.
        let listen = Command::TcpListen {
            port: 4000,
            backlog: 8,
        };
        assert_eq!(r.route(Some(2), &listen), 1);
        let incoming = Upcall::TcpIncoming {
            conn: 0x8100_0000,
            local_port: 4000,
            peer,
        };
        r.learn(1, &incoming);
        let accept = Command::TcpAccept {
            conn: 0x8100_0000,
            qp: QpId(3),
        };
        assert_eq!(r.route(Some(2), &accept), 1);
        assert_eq!(r.route(None, &Command::TcpUnlisten { port: 4000 }), 1);
        // Closed: forgotten; a late command goes to worker 0, which has no such connection.
        r.learn(
            2,
            &Upcall::TcpClosed {
                conn: 5,
                reason: CloseReason::Graceful,
            },
        );
        assert_eq!(r.route(None, &Command::TcpAbort { conn: 5 }), 0);
        assert_eq!(r.route(None, &Command::TcpUnlisten { port: 4000 }), 0);
        assert_eq!(r.route(None, &Command::DestroyQp { qp: QpId(1) }), 2);
    }

    #[test]
    fn a_restart_and_a_stall_are_each_reported() {
        let mut w = DaemonWatch::new(7, 0, 0, 1000);
        assert_eq!(w.sample(7, 1, 10), Liveness::Alive);
        assert_eq!(w.sample(7, 1, 900), Liveness::Alive);
        assert_eq!(w.sample(7, 1, 1010), Liveness::Stalled { since_ms: 1000 });
        assert_eq!(w.sample(7, 2, 1020), Liveness::Alive, "beating again");
        assert_eq!(w.sample(8, 0, 1030), Liveness::Restarted { old: 7, new: 8 });
        assert_eq!(w.sample(8, 0, 1040), Liveness::Alive, "reported once");
    }

    #[test]
    fn pipeline_holds_an_event_until_the_commands_before_it_are_answered() {
        let mut p = Pipeline::default();
        p.hold("before anything");
        p.sent(1, 'a');
        p.sent(2, 'b');
        p.hold("after 1 and 2");
        p.sent(3, 'c');
        p.hold("after 3");
        assert_eq!(p.release(), vec!["before anything"]);
        // Worker order: 2 answered before 1 (another worker) releases nothing.
        assert_eq!(p.answered(2), Some('b'));
        assert!(p.release().is_empty());
        assert_eq!(p.answered(1), Some('a'));
        assert_eq!(p.release(), vec!["after 1 and 2"]);
        assert_eq!(p.in_flight(), 1);
        assert_eq!(p.held(), 1);
        assert_eq!(p.answered(3), Some('c'));
        assert_eq!(p.answered(3), None, "answered once");
        assert_eq!(p.release(), vec!["after 3"]);
        assert_eq!((p.in_flight(), p.held()), (0, 0));
    }

    #[test]
    fn pipeline_keeps_event_order_and_ignores_replies_it_did_not_send() {
        let mut p = Pipeline::default();
        p.sent(5, ());
        p.hold(1);
        // Sent later but answered already: still behind the older held event.
        p.sent(6, ());
        p.hold(2);
        assert!(p.answered(6).is_some());
        assert!(p.release().is_empty());
        assert!(
            p.answered(4).is_none(),
            "a reply a synchronous call waits for"
        );
        assert!(p.answered(5).is_some());
        assert_eq!(p.release(), vec![1, 2]);
    }
}
