//! The daemon's end of the command ring: what iwarp-control asks (resources, memory,
//! connections) done on the node this core owns, and the fast path of every QP the
//! applications created (their SQ/RQ/S-RQ rings into the engine, completions out to their
//! CQ rings), once per poll-loop turn.
//!
//! Ids are iwarp-control's (QP numbers, CQ, S-RQ and PD ids, STags, connection ids), and
//! the engine is given the same ones (`Rnic::create_qp_at`, `Rnic::register_mr_at`, ...), so
//! its completions and events name what control and the application know. Every command gets one
//! [`Upcall::Reply`]; upcalls wait in order in a local queue while the ring is full, so
//! none is lost when control is slow.
//!
//! Nothing an application wrote can stop this loop: segments are opened by path with their
//! kind checked and only when their size is sealed (an application cannot truncate what is
//! mapped here, which would be a SIGBUS in this process), ring indices are checked by the
//! ring, records by `convert`; a QP whose ring is corrupt goes to Error and the others keep
//! running.
//!
//! A turn reads only the rings that have work: those the applications' doorbell bitmaps mark
//! ([`iwarp_abi::doorbell`]), those a visit left work in, and the few without a doorbell slot.

use super::convert;
use super::fastpath::{register_segment, HostCq, HostMr, HostQp, HostSrq, Registration};
use super::owners::Owners;
use crate::node::{Node, NodeEvent};
use crate::port::Port;
use crate::worker::Service;
use iwarp_abi::command::{
    reply_status as st, Chunk, Command, RtrKind as AbiRtr, RtsParams, NO_SRQ,
};
use iwarp_abi::daemon_shm::DaemonSide;
use iwarp_abi::doorbell::{BellRef, Drainer};
use iwarp_abi::id::{CqId, PdId, QpId, SrqId, Stag};
use iwarp_abi::notify::Notify;
use iwarp_abi::segment::{Segment, SegmentKind};
use iwarp_abi::wake::DaemonWake;
use iwarp_abi::wqe::{Cqe, RecvWqe, SendWqe};
use iwarp_abi::{command::Upcall, ring};
use iwarp_engine::{ConnParams, PeerToPeer, QpCaps, QpState, Rnic, RtrKind};
use iwarp_wire::mpa::MpaParams;
use rustc_hash::FxHashMap;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Commands taken from the ring per turn: the data path is never starved by a burst of
/// slow-path work.
const COMMANDS_PER_TURN: usize = 16;

/// QPs whose lines a ring pump asks the cache for at once (see [`Host::pump_rings`]): enough
/// that their misses overlap, few enough that the lines are still cached when read.
const PREFETCH_QPS: usize = 8;

struct Cq {
    host: HostCq,
}

struct Qp {
    host: HostQp,
    send_cq: CqId,
    recv_cq: CqId,
    /// The process that created its rings (control checked it is the application's).
    owner: u32,
    /// Its doorbell and slot; `None`: read every turn.
    bell: Option<(FileId, u32)>,
    /// Its RQ's own slot; `None`: the RQ is read with the SQ.
    rq_bell: Option<(FileId, u32)>,
}

struct Srq {
    host: HostSrq,
    bell: Option<(FileId, u32)>,
}

/// A file's (device, inode).
type FileId = (u64, u64);

/// What a doorbell slot names: a QP (its SQ, and its RQ when the RQ has no slot of its
/// own), a QP's RQ alone, or an S-RQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rung {
    Qp(QpId),
    Rq(QpId),
    Srq(SrqId),
}

/// One application's doorbell bitmap, mapped with the first ring that names it.
struct AppBell {
    drainer: Drainer,
    /// The process that created it, and whose rings alone may name it.
    owner: u32,
    /// What each slot names, by slot (grown to the highest slot attached).
    rungs: Vec<Option<Rung>>,
    /// Its rings attached: it is unmapped with the last.
    users: usize,
}

/// How often the owners of QPs are checked for having exited.
const OWNER_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// Everything the applications created on this node, by control's ids, and the daemon's
/// end of the command ring.
pub struct Host {
    side: DaemonSide,
    pds: HashSet<PdId>,
    /// Looked up for every visit of a rung QP and every CQ drained: hashed cheaply (ids are
    /// control's counters).
    cqs: FxHashMap<CqId, Cq>,
    srqs: FxHashMap<SrqId, Srq>,
    qps: FxHashMap<QpId, Qp>,
    /// The applications' doorbells, by their segments' file ids.
    bells: HashMap<FileId, AppBell>,
    /// QPs and S-RQs without a doorbell slot (none named, or not usable): read every turn.
    unbelled: Vec<Rung>,
    /// QPs and S-RQs to visit next turn besides those rung: work was left in them, or they
    /// were just created.
    next_qps: Vec<QpId>,
    next_srqs: Vec<SrqId>,
    /// This turn's visits (kept for their capacity).
    turn_qps: Vec<QpId>,
    turn_rqs: Vec<QpId>,
    turn_srqs: Vec<SrqId>,
    /// QP and S-RQ visits so far, each at most once a turn.
    visits: u64,
    mrs: HashMap<Stag, HostMr>,
    /// Window and fast-register STags: they may point into the regions, so they go first.
    windows: std::collections::HashSet<Stag>,
    /// Memory segments mapped for registrations, shared by the regions in them, by (device,
    /// inode): a path such as `/proc/<pid>/fd/<n>` may name another file once its
    /// descriptor is closed and the number reused.
    segments: HashMap<(u64, u64), Arc<Segment>>,
    /// Upcalls the full ring could not take yet.
    backlog: VecDeque<Upcall>,
    /// Ports listened on and connections opened for control: what it owns in the node
    /// besides QPs, ended when another control attaches.
    listening: HashSet<u16>,
    relay_conns: HashSet<u32>,
    /// The processes owning QPs, and when they were last looked at.
    owners: Owners,
    owners_checked: Instant,
    max_fpdu: usize,
    /// The control process served (its generation word); a new one starts from nothing.
    control_generation: u64,
    /// Nanoseconds spent on the rings in busy turns, when timed.
    ring_ns: Option<u64>,
    /// CQs a drain left completions in, listed again after it (kept for its capacity).
    cqs_left: Vec<CqId>,
    /// CQs a drain wrote to that have a notification word, and whether what it wrote meets
    /// a solicited-only arming (kept for its capacity).
    cqs_written: Vec<(CqId, bool)>,
    /// What applications and control ring when this core sleeps.
    doorbell: Option<DaemonWake>,
}

impl Host {
    /// `max_fpdu` is the node's TCP MSS: no FPDU is larger (RFC 5044 section 8).
    pub fn new(side: DaemonSide, max_fpdu: usize) -> Host {
        Host {
            side,
            pds: HashSet::new(),
            cqs: FxHashMap::default(),
            srqs: FxHashMap::default(),
            qps: FxHashMap::default(),
            bells: HashMap::new(),
            unbelled: Vec::new(),
            next_qps: Vec::new(),
            next_srqs: Vec::new(),
            turn_qps: Vec::new(),
            turn_rqs: Vec::new(),
            turn_srqs: Vec::new(),
            visits: 0,
            mrs: HashMap::new(),
            windows: Default::default(),
            segments: HashMap::new(),
            backlog: VecDeque::new(),
            listening: HashSet::new(),
            relay_conns: HashSet::new(),
            owners: Owners::default(),
            owners_checked: Instant::now(),
            max_fpdu,
            control_generation: 0,
            ring_ns: None,
            cqs_left: Vec::new(),
            cqs_written: Vec::new(),
            doorbell: None,
        }
    }

    /// Lets the poll loop sleep until applications or control ring `bell` (see
    /// [`crate::worker`]); without one it backs off on a timer.
    pub fn with_doorbell(mut self, bell: DaemonWake) -> Host {
        self.doorbell = Some(bell);
        self
    }

    /// How many QP and S-RQ visits turns have made (a QP's RQ and SQ count once).
    pub fn ring_visits(&self) -> u64 {
        self.visits
    }

    /// Times the rings and commands of each busy turn (the bench's per-stage breakdown).
    pub fn set_stage_timing(&mut self, on: bool) {
        self.ring_ns = on.then_some(0);
    }

    /// Runs one of the turn's ring steps, adding its time to `ring_ns` when timed and when
    /// it found work, as the node counts its stages: a busy core looks at the rings on
    /// every turn, and its idle looks are not time spent on anyone's work.
    fn timed(&mut self, step: impl FnOnce(&mut Host) -> bool) -> bool {
        let t = self.ring_ns.map(|_| std::time::Instant::now());
        let worked = step(self);
        if let (true, Some(t), Some(ns)) = (worked, t, self.ring_ns.as_mut()) {
            *ns += t.elapsed().as_nanos() as u64;
        }
        worked
    }

    /// A new iwarp-control attached: what the old one created is orphaned (its applications
    /// lost their control connection), so every QP is flushed and its connection reset (the
    /// peers see it end), every connection still in setup reset, every port it listened on
    /// closed, every region deregistered and every segment unmapped. Upcalls meant for the
    /// old control are dropped.
    fn reset<P: Port>(&mut self, node: &mut Node<P>, rnic: &mut Rnic) {
        let (qps, mrs) = (self.qps.len(), self.mrs.len());
        for &qp in self.qps.keys() {
            if let Some(conn) = node.conn_of_qp(qp) {
                let _ = node.relay_abort(rnic, conn);
            }
        }
        for conn in self.relay_conns.drain() {
            let _ = node.relay_abort(rnic, conn);
        }
        for port in self.listening.drain() {
            node.relay_unlisten(port);
        }
        self.owners.clear();
        // The engine stops pointing into a segment before the segment is unmapped; windows
        // first, since a region they point into cannot be deregistered before them.
        for &stag in self.windows.iter().chain(self.mrs.keys()) {
            let _ = rnic.deregister_mr(stag.0);
        }
        // The new control hands out the same ids again: the engine forgets every one, QPs
        // (with no window bound on them any more) before the CQs and S-RQs they use.
        for &qp in self.qps.keys() {
            let _ = rnic.destroy_qp(qp);
        }
        self.qps.clear();
        self.mrs.clear();
        self.windows.clear();
        self.segments.clear();
        for &srq in self.srqs.keys() {
            let _ = rnic.destroy_srq(srq);
        }
        for &cq in self.cqs.keys() {
            let _ = rnic.destroy_cq(cq);
        }
        self.cqs.clear();
        self.srqs.clear();
        self.bells.clear();
        self.unbelled.clear();
        self.next_qps.clear();
        self.next_srqs.clear();
        self.pds.clear();
        self.backlog.clear();
        tracing::warn!(
            "a new iwarp-control attached: {qps} QPs and {mrs} regions of the previous one \
             torn down"
        );
    }

    /// One turn: the heartbeat, commands, connection events, every QP's rings, engine
    /// events.
    pub fn serve<P: Port>(&mut self, node: &mut Node<P>, rnic: &mut Rnic) -> bool {
        self.side.beat();
        let generation = self.side.control_generation();
        if generation != self.control_generation {
            if self.control_generation != 0 {
                self.reset(node, rnic);
            }
            self.control_generation = generation;
        }
        let mut worked = self.flush();
        for _ in 0..COMMANDS_PER_TURN {
            match self.side.recv_command() {
                Some(Ok((req_id, c))) => {
                    let (status, value) = self.execute(node, rnic, &c);
                    if status != st::OK {
                        tracing::warn!("command {c:?} refused: status {status}");
                    }
                    self.upcall(Upcall::Reply {
                        req_id,
                        status,
                        value,
                    });
                    worked = true;
                }
                Some(Err(e)) => {
                    tracing::warn!("undecodable command slot: {e}");
                    worked = true;
                }
                None => break,
            }
        }
        let events: Vec<NodeEvent> = node.take_events().collect();
        for e in events {
            worked = true;
            self.node_event(e);
        }
        if self.owners_checked.elapsed() >= OWNER_CHECK {
            self.owners_checked = Instant::now();
            worked |= self.owners_gone(node, rnic);
        }
        worked |= self.drain_cqs(rnic);
        while let Some(e) = rnic.poll_event() {
            worked = true;
            tracing::info!("{e:?}");
            let (_, up) = convert::event(&e);
            self.upcall(up);
        }
        worked
    }

    /// Ends the connections of QPs whose owning process has exited, as Destroy QP would
    /// (reset, unless a graceful close is under way), so their peers learn of it even while
    /// no control plane runs to clean up after the application; control's cleanup, when it
    /// comes, finds them ended.
    fn owners_gone<P: Port>(&mut self, node: &mut Node<P>, rnic: &mut Rnic) -> bool {
        let gone = self.owners.exited();
        for pid in &gone {
            for (&qp, _) in self.qps.iter().filter(|(_, q)| q.owner == *pid) {
                if let Some(conn) = node.conn_of_qp(qp) {
                    tracing::info!("{qp}: its application (pid {pid}) exited; connection ended");
                    let _ = node.relay_release(rnic, conn);
                }
            }
        }
        !gone.is_empty()
    }

    fn upcall(&mut self, u: Upcall) {
        if !self.backlog.is_empty() || self.side.send_upcall(&u).is_err() {
            self.backlog.push_back(u);
        }
    }

    fn flush(&mut self) -> bool {
        let mut sent = false;
        while let Some(u) = self.backlog.front() {
            if self.side.send_upcall(u).is_err() {
                break;
            }
            self.backlog.pop_front();
            sent = true;
        }
        sent
    }

    fn node_event(&mut self, e: NodeEvent) {
        match e {
            NodeEvent::Established { conn } => self.upcall(Upcall::TcpEstablished { conn }),
            NodeEvent::Incoming {
                conn,
                local_port,
                peer,
            } => {
                self.relay_conns.insert(conn);
                self.upcall(Upcall::TcpIncoming {
                    conn,
                    local_port,
                    peer: SocketAddr::V4(peer),
                })
            }
            NodeEvent::Bytes { conn, data } => {
                for bytes in Chunk::split(&data) {
                    self.upcall(Upcall::TcpBytes { conn, bytes });
                }
            }
            NodeEvent::Closed { conn, reason } => {
                self.relay_conns.remove(&conn);
                self.upcall(Upcall::TcpClosed { conn, reason })
            }
        }
    }

    /// The RQs and S-RQs with work, then the SQs with work, into the engine: run after the
    /// port's burst and before the engine sees the received bytes or sends anything. The
    /// receives first, so that a message that arrived after its receive was posted always
    /// finds it; the sends before the engine transmits, so that work posted before a turn
    /// leaves in that turn (pumped after it, it would wait a turn). The only place these
    /// rings are read; what it did counts as the turn's work.
    ///
    /// With work: rung in a doorbell bitmap, left with work by the last visit, or without a
    /// doorbell slot. A post rings after publishing its ring head, and a slot is taken before
    /// its ring is read, so every post is seen in the turn that takes its doorbell, or a
    /// later one.
    pub fn pump_rings(&mut self, rnic: &mut Rnic) -> bool {
        let mut qps = std::mem::take(&mut self.turn_qps);
        let mut rqs = std::mem::take(&mut self.turn_rqs);
        let mut srqs = std::mem::take(&mut self.turn_srqs);
        qps.append(&mut self.next_qps);
        srqs.append(&mut self.next_srqs);
        let mut list = |r: Rung| match r {
            Rung::Qp(q) => qps.push(q),
            Rung::Rq(q) => rqs.push(q),
            Rung::Srq(s) => srqs.push(s),
        };
        for bell in self.bells.values_mut() {
            let AppBell { drainer, rungs, .. } = bell;
            drainer.drain(|slot| {
                if let Some(&Some(r)) = rungs.get(slot as usize) {
                    list(r);
                }
            });
        }
        self.unbelled.iter().for_each(|&r| list(r));
        for v in [&mut qps, &mut rqs] {
            v.sort_unstable();
            v.dedup();
        }
        srqs.sort_unstable();
        srqs.dedup();
        let mut worked = false;
        // An RQ is read when it was rung, with its SQ when it has no slot of its own, or
        // when the engine's full RQ left an entry behind.
        for ids in qps.chunks(PREFETCH_QPS) {
            // The QPs' entries here, looked up together so that their misses overlap.
            for id in ids {
                if let Some(qp) = self.qps.get(id) {
                    iwarp_abi::prefetch::prefetch(qp);
                }
            }
            for id in ids {
                let Some(qp) = self.qps.get_mut(id) else {
                    continue;
                };
                self.visits += 1;
                let read_rq =
                    qp.rq_bell.is_none() || qp.host.rq_left() || rqs.binary_search(id).is_ok();
                if read_rq && !qp.host.is_corrupt() {
                    let r = qp.host.pump_rq(rnic);
                    worked |= r.posted + r.rejected > 0;
                }
            }
        }
        for id in rqs.iter().filter(|id| qps.binary_search(id).is_err()) {
            let Some(qp) = self.qps.get_mut(id) else {
                continue;
            };
            self.visits += 1;
            if !qp.host.is_corrupt() {
                let r = qp.host.pump_rq(rnic);
                worked |= r.posted + r.rejected > 0;
            }
            if Self::revisit(qp, rnic) {
                self.next_qps.push(*id);
            }
        }
        for id in &srqs {
            let Some(srq) = self.srqs.get_mut(id) else {
                continue;
            };
            self.visits += 1;
            let r = srq.host.pump(rnic);
            worked |= r.posted + r.rejected > 0;
            if srq.host.pending() {
                self.next_srqs.push(*id);
            }
        }
        // A few QPs at a time, their lines asked for before any is pumped: each QP's ring
        // and engine state is cold with thousands of QPs, and its misses then overlap those
        // of the QPs beside it instead of following them.
        for ids in qps.chunks(PREFETCH_QPS) {
            for id in ids {
                if let Some(qp) = self.qps.get(id) {
                    qp.host.prefetch_sq(rnic);
                }
            }
            for id in ids {
                let Some(qp) = self.qps.get_mut(id) else {
                    continue;
                };
                worked |= Self::pump_qp(qp, rnic);
                if Self::revisit(qp, rnic) {
                    self.next_qps.push(*id);
                }
            }
        }
        qps.clear();
        rqs.clear();
        srqs.clear();
        (self.turn_qps, self.turn_rqs, self.turn_srqs) = (qps, rqs, srqs);
        worked
    }

    /// Maps the doorbell a ring segment names after its ring of `ring_len` octets
    /// (once per application) and gives `rung` its slot there. `None` when the segment names
    /// none, or one that is not `owner`'s sealed doorbell segment, or a slot out of range or
    /// taken: the ring is then read every turn.
    fn attach_bell(
        &mut self,
        seg: &Segment,
        ring_len: usize,
        owner: u32,
        rung: Rung,
    ) -> Option<(FileId, u32)> {
        let r = BellRef::read(seg, ring_len)?;
        let path = r.path.to_path();
        // Mapped once per application: a doorbell known by its file is not opened again.
        let known = std::fs::metadata(&path).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        });
        let id = match known.filter(|id| self.bells.contains_key(id)) {
            Some(id) => id,
            None => {
                let opened = open(&path, SegmentKind::Doorbell).ok()?;
                let id = opened.file_id();
                if let std::collections::hash_map::Entry::Vacant(e) = self.bells.entry(id) {
                    if opened.header().creator_pid != owner {
                        tracing::warn!("{rung:?}: its doorbell segment is not its application's");
                        return None;
                    }
                    let drainer = Drainer::attach_segment(&opened)
                        .map_err(|err| tracing::warn!("{rung:?}: doorbell segment: {err}"))
                        .ok()?;
                    e.insert(AppBell {
                        drainer,
                        owner,
                        rungs: Vec::new(),
                        users: 0,
                    });
                }
                id
            }
        };
        let bell = self.bells.get_mut(&id)?;
        // Another application's queue: its slots are not this ring's to take.
        if bell.owner != owner {
            tracing::warn!("{rung:?}: its doorbell segment is not its application's");
            return None;
        }
        if r.slot >= bell.drainer.slots() {
            return None;
        }
        let slot = r.slot as usize;
        if bell.rungs.len() <= slot {
            bell.rungs.resize(slot + 1, None);
        }
        if bell.rungs[slot].is_some() {
            tracing::warn!("{rung:?}: its doorbell slot {slot} is taken");
            return None;
        }
        bell.rungs[slot] = Some(rung);
        bell.users += 1;
        Some((id, r.slot))
    }

    /// Gives up the slot of a QP or S-RQ being destroyed, and its doorbell with its
    /// last slot; or takes it off the list read every turn.
    fn detach_bell(&mut self, bell: Option<(FileId, u32)>, rung: Rung) {
        let Some((id, slot)) = bell else {
            self.unbelled.retain(|r| *r != rung);
            return;
        };
        if let Some(b) = self.bells.get_mut(&id) {
            if let Some(r) = b.rungs.get_mut(slot as usize) {
                *r = None;
            }
            b.users -= 1;
            if b.users == 0 {
                self.bells.remove(&id);
            }
        }
    }

    /// After a QP or S-RQ is created: on the list read every turn when it has no doorbell
    /// slot; visited next turn either way.
    fn bell_or_scan(&mut self, bell: Option<(FileId, u32)>, rung: Rung) {
        if bell.is_none() {
            self.unbelled.push(rung);
        }
        match rung {
            Rung::Qp(q) | Rung::Rq(q) => self.next_qps.push(q),
            Rung::Srq(s) => self.next_srqs.push(s),
        }
    }

    /// Whether `qp` is visited next turn although no post rings for it: a ring found corrupt
    /// in this visit (the next puts the QP in Error), or work its pumps left behind.
    fn revisit(qp: &mut Qp, rnic: &Rnic) -> bool {
        let broken = qp.host.is_corrupt() && rnic.qp_state(qp.host.qp) != Some(QpState::Error);
        broken || qp.host.pending()
    }

    /// Moves `qp`'s posted send work into the engine (or, for a QP whose ring indices are
    /// corrupt, puts it in Error).
    fn pump_qp(qp: &mut Qp, rnic: &mut Rnic) -> bool {
        let id = qp.host.qp;
        if qp.host.is_corrupt() {
            if rnic.qp_state(id) == Some(QpState::Error) {
                return false;
            }
            tracing::warn!("{id}: ring indices corrupt, QP to Error");
            let _ = rnic.force_error(id);
            return true;
        }
        let s = qp.host.pump_sq(rnic);
        s.posted + s.rejected > 0
    }

    /// Moves what the application posted to `qp`'s rings into the engine, before a command
    /// that changes the QP's state (a disconnect, Modify QP): the command acts on every WR
    /// posted before it was asked for, as a kernel verbs call would. The post reached the
    /// ring first, but a turn reads the rings before its commands, and a command that came
    /// in between would otherwise go first. A receive left behind by a disconnect would
    /// reach the QP in Idle and wait there for an RTS that never comes, never flushed
    /// (Verbs section 6.2.5); posted sends go out before the FIN. The other QPs wait for
    /// the next turn.
    fn pump_posted(qp: &mut Qp, rnic: &mut Rnic) {
        if !qp.host.is_corrupt() {
            qp.host.pump_rq(rnic);
        }
        // The SQ a burst at a time, up to its depth's worth.
        for _ in 0..64 {
            if !Self::pump_qp(qp, rnic) {
                break;
            }
        }
    }

    /// Moves completions into the CQ rings of the CQs that have them (the engine lists
    /// those, [`Rnic::next_cq_ready`]), a burst each. A CQ left with completions (its ring
    /// full, or more than a burst) is listed again for the next turn.
    ///
    /// The applications' waiters are woken after every CQ is drained, behind one fence.
    fn drain_cqs(&mut self, rnic: &mut Rnic) -> bool {
        let mut worked = false;
        while let Some(cq_id) = rnic.next_cq_ready() {
            let Some(cq) = self.cqs.get_mut(&cq_id) else {
                continue;
            };
            let d = cq.host.drain(rnic);
            if d.completed > 0 {
                worked = true;
                if cq.host.notify.is_some() {
                    self.cqs_written.push((cq_id, d.solicited));
                }
            }
            if d.left {
                self.cqs_left.push(cq_id);
            }
        }
        if !self.cqs_written.is_empty() {
            let cqs = &self.cqs;
            Notify::wake_armed(self.cqs_written.iter().filter_map(|&(id, solicited)| {
                Some((cqs.get(&id)?.host.notify.as_ref()?, solicited))
            }));
            self.cqs_written.clear();
        }
        for cq_id in self.cqs_left.drain(..) {
            rnic.mark_cq(cq_id);
        }
        worked
    }

    /// Runs one command; its reply status and value.
    fn execute<P: Port>(&mut self, node: &mut Node<P>, rnic: &mut Rnic, c: &Command) -> (u32, u64) {
        let r = self.run(node, rnic, c);
        match r {
            Ok(v) => (st::OK, v),
            Err(status) => (status, 0),
        }
    }

    /// `pd`, when control allocated it here.
    fn pd(&self, pd: PdId) -> Result<PdId, u32> {
        self.pds.contains(&pd).then_some(pd).ok_or(st::NO_SUCH_ID)
    }

    /// `qp`, when it was created here.
    fn qp(&self, qp: QpId) -> Result<QpId, u32> {
        self.qps
            .contains_key(&qp)
            .then_some(qp)
            .ok_or(st::NO_SUCH_ID)
    }

    fn run<P: Port>(
        &mut self,
        node: &mut Node<P>,
        rnic: &mut Rnic,
        c: &Command,
    ) -> Result<u64, u32> {
        let net = |e: String| {
            tracing::warn!("{e}");
            st::NETWORK
        };
        match *c {
            // A PD is a name the engine checks resources against: nothing to create there.
            Command::AllocPd { pd } => {
                if !self.pds.insert(pd) {
                    return Err(st::EXISTS);
                }
            }
            Command::DeallocPd { pd } => {
                self.pds.remove(&pd).then_some(()).ok_or(st::NO_SUCH_ID)?;
            }
            Command::CreateCq { cq, depth, ring } => {
                if self.cqs.contains_key(&cq) {
                    return Err(st::EXISTS);
                }
                let seg = open(&ring.to_path(), SegmentKind::CompletionQueue)?;
                let (producer, _) =
                    ring::attach_segment::<Cqe>(&seg).map_err(|_| st::BAD_SEGMENT)?;
                let notify = Notify::of_cq_segment(&seg, producer.capacity());
                rnic.create_cq_at(cq, depth as usize)
                    .map_err(|_| st::EXISTS)?;
                self.cqs.insert(
                    cq,
                    Cq {
                        host: HostCq::new(cq, producer, notify),
                    },
                );
            }
            Command::ResizeCq { cq, depth, ring } => self.resize_cq(rnic, cq, depth, ring)?,
            Command::DestroyCq { cq } => {
                if self
                    .qps
                    .values()
                    .any(|q| q.send_cq == cq || q.recv_cq == cq)
                {
                    return Err(st::INVALID);
                }
                self.cqs.remove(&cq).ok_or(st::NO_SUCH_ID)?;
                let _ = rnic.destroy_cq(cq);
            }
            Command::CreateSrq {
                srq,
                pd,
                depth,
                ring,
            } => {
                if self.srqs.contains_key(&srq) {
                    return Err(st::EXISTS);
                }
                let pd = self.pd(pd)?;
                let seg = open(&ring.to_path(), SegmentKind::SharedRecvQueue)?;
                let (_, consumer) = ring::attach_segment(&seg).map_err(|_| st::BAD_SEGMENT)?;
                rnic.create_srq_at(srq, pd, depth as usize)
                    .map_err(|_| st::EXISTS)?;
                let ring_len = ring::ring_bytes::<RecvWqe>(consumer.capacity());
                let owner = seg.header().creator_pid;
                let bell = self.attach_bell(&seg, ring_len, owner, Rung::Srq(srq));
                self.bell_or_scan(bell, Rung::Srq(srq));
                let host = HostSrq::new(srq, consumer);
                self.srqs.insert(srq, Srq { host, bell });
            }
            Command::ArmSrq { srq, limit } => {
                self.srqs.get(&srq).ok_or(st::NO_SUCH_ID)?;
                rnic.arm_srq_limit(srq, limit as usize)
                    .map_err(|_| st::INVALID)?;
            }
            Command::DestroySrq { srq } => {
                let s = self.srqs.remove(&srq).ok_or(st::NO_SUCH_ID)?;
                self.detach_bell(s.bell, Rung::Srq(srq));
                let _ = rnic.destroy_srq(srq);
            }
            Command::CreateQp {
                qp,
                pd,
                send_cq,
                recv_cq,
                srq,
                sq_depth,
                rq_depth,
                sq,
                rq,
            } => {
                if self.qps.contains_key(&qp) {
                    return Err(st::EXISTS);
                }
                let pd = self.pd(pd)?;
                let known = |cq: CqId| {
                    self.cqs
                        .contains_key(&cq)
                        .then_some(cq)
                        .ok_or(st::NO_SUCH_ID)
                };
                let (send_cq, recv_cq) = (known(send_cq)?, known(recv_cq)?);
                let srq = match srq {
                    NO_SRQ => None,
                    s => Some(self.srqs.get(&s).ok_or(st::NO_SUCH_ID)?.host.srq),
                };
                let sq_seg = open(&sq.to_path(), SegmentKind::SendQueue)?;
                let owner = sq_seg.header().creator_pid;
                let (_, sq_ring) = ring::attach_segment(&sq_seg).map_err(|_| st::BAD_SEGMENT)?;
                let rq_seg = match srq {
                    Some(_) => None,
                    None => Some(open(&rq.to_path(), SegmentKind::RecvQueue)?),
                };
                let rq_ring = match &rq_seg {
                    Some(seg) => Some(ring::attach_segment(seg).map_err(|_| st::BAD_SEGMENT)?.1),
                    None => None,
                };
                let caps = QpCaps {
                    sq_depth: sq_depth as usize,
                    rq_depth: rq_depth as usize,
                    srq,
                };
                rnic.create_qp_at(qp, pd, send_cq, recv_cq, caps)
                    .map_err(|_| st::INVALID)?;
                if let Err(e) = self.owners.add(owner) {
                    tracing::warn!("{qp}: cannot watch its application (pid {owner}): {e}");
                }
                let ring_len = ring::ring_bytes::<SendWqe>(sq_ring.capacity());
                let bell = self.attach_bell(&sq_seg, ring_len, owner, Rung::Qp(qp));
                self.bell_or_scan(bell, Rung::Qp(qp));
                // An RQ that names no slot (or one not usable) is read with the SQ.
                let rq_bell = match (&rq_seg, &rq_ring) {
                    (Some(seg), Some(r)) => {
                        let ring_len = ring::ring_bytes::<RecvWqe>(r.capacity());
                        self.attach_bell(seg, ring_len, owner, Rung::Rq(qp))
                    }
                    _ => None,
                };
                self.qps.insert(
                    qp,
                    Qp {
                        host: HostQp::new(qp, sq_ring, rq_ring),
                        send_cq,
                        recv_cq,
                        owner,
                        bell,
                        rq_bell,
                    },
                );
            }
            Command::DestroyQp { qp } => {
                let qp = self.qp(qp)?;
                // Windows still bound on it (Verbs section 6.1.4): refused before its
                // connection or its work is touched, so the QP goes on as it was.
                rnic.can_destroy_qp(qp).map_err(|_| st::IN_USE)?;
                // A connection closing gracefully finishes that close without the QP; any
                // other is reset.
                if let Some(conn) = node.conn_of_qp(qp) {
                    let _ = node.relay_release(rnic, conn);
                }
                // Flushed completions reach the CQ rings before the QP goes.
                let _ = rnic.force_error(qp);
                if let Some(q) = self.qps.get_mut(&qp) {
                    Self::pump_qp(q, rnic);
                }
                self.drain_cqs(rnic);
                rnic.destroy_qp(qp).map_err(|_| st::IN_USE)?;
                let q = self.qps.remove(&qp).ok_or(st::NO_SUCH_ID)?;
                self.detach_bell(q.bell, Rung::Qp(qp));
                // An RQ without a slot was never listed on its own: nothing to take back.
                if q.rq_bell.is_some() {
                    self.detach_bell(q.rq_bell, Rung::Rq(qp));
                }
                self.owners.remove(q.owner);
            }
            Command::ModifyQp { qp, state } => {
                let qp = self.qp(qp)?;
                if let Some(q) = self.qps.get_mut(&qp) {
                    Self::pump_posted(q, rnic);
                }
                rnic.modify_qp(qp, state).map_err(|_| st::INVALID)?;
            }
            Command::RegisterMr {
                stag,
                pd,
                access,
                zero_based,
                offset,
                len,
                va,
                segment,
            } => {
                if self.mrs.contains_key(&stag) {
                    return Err(st::EXISTS);
                }
                let pd = self.pd(pd)?;
                let opened = open(&segment.to_path(), SegmentKind::Memory)?;
                let id = opened.file_id();
                let seg = self.segments.entry(id).or_insert(opened).clone();
                let reg = Registration {
                    stag: stag.0,
                    pd,
                    offset,
                    len,
                    access,
                    base_to: if zero_based { 0 } else { va },
                };
                let mr = register_segment(rnic, &seg, reg).map_err(|_| st::INVALID)?;
                self.mrs.insert(stag, mr);
            }
            Command::DeregisterMr { stag } | Command::DeallocMw { stag } => {
                rnic.deregister_mr(stag.0).map_err(|e| match e {
                    iwarp_engine::VerbsError::StagInUse => st::IN_USE,
                    _ => st::NO_SUCH_ID,
                })?;
                self.mrs.remove(&stag);
                self.windows.remove(&stag);
                // Unmap segments no region uses any more.
                self.segments.retain(|_, s| Arc::strong_count(s) > 1);
            }
            Command::AllocMw { stag, pd } => {
                let pd = self.pd(pd)?;
                rnic.alloc_mw_at(stag.0, pd).map_err(|_| st::EXISTS)?;
                self.windows.insert(stag);
            }
            Command::AllocFastRegStag { stag, pd } => {
                let pd = self.pd(pd)?;
                rnic.alloc_fastreg_at(stag.0, pd).map_err(|_| st::EXISTS)?;
                self.windows.insert(stag);
            }
            Command::TcpListen { port, backlog } => {
                node.relay_listen(port, backlog).map_err(net)?;
                self.listening.insert(port);
                return Ok(port as u64);
            }
            Command::TcpUnlisten { port } => {
                self.listening.remove(&port);
                if !node.relay_unlisten(port) {
                    return Err(st::NO_SUCH_ID);
                }
            }
            Command::TcpConnect { conn, qp, remote } => {
                let qp = self.qp(qp)?;
                let SocketAddr::V4(remote) = remote else {
                    return Err(st::NETWORK);
                };
                node.relay_connect(conn, remote).map_err(net)?;
                self.relay_conns.insert(conn);
                node.relay_bind(conn, qp).map_err(net)?;
            }
            Command::TcpAccept { conn, qp } => {
                let qp = self.qp(qp)?;
                node.relay_bind(conn, qp).map_err(net)?;
            }
            Command::TcpSend { conn, ref bytes } => {
                node.relay_send(conn, bytes.as_bytes()).map_err(net)?;
            }
            // Ending a connection that already ended (its QP was destroyed, the peer reset
            // it) is done, not an error: control's teardown may cross the daemon's.
            Command::TcpClose { conn } => {
                if let Some(qp) = node.qp_of_conn(conn).and_then(|qp| self.qps.get_mut(&qp)) {
                    Self::pump_posted(qp, rnic);
                }
                if let Err(e) = node.relay_close(rnic, conn) {
                    tracing::debug!("close: {e}");
                }
            }
            Command::TcpAbort { conn } => {
                if let Err(e) = node.relay_abort(rnic, conn) {
                    tracing::debug!("abort: {e}");
                }
            }
            Command::QpRts { qp, conn, params } => {
                let qp = self.qp(qp)?;
                let p = conn_params(&params, self.max_fpdu);
                node.relay_rts(rnic, conn, qp, p).map_err(|e| {
                    tracing::warn!("{e}");
                    st::INVALID
                })?;
            }
            // The daemon stops on its own signals; control asking is acknowledged.
            Command::Shutdown => {}
        }
        Ok(0)
    }
}

impl Host {
    /// Modify CQ: completions go to the ring in `ring` from now on. Refused (nothing changes)
    /// when more completions are present than `depth` holds: those in the old ring the
    /// application has not taken and those in the engine's CQ. The
    /// application takes what the old ring holds before it reads the new one, so none is
    /// lost and the order stays.
    fn resize_cq(
        &mut self,
        rnic: &mut Rnic,
        cq: CqId,
        depth: u32,
        ring: iwarp_abi::command::ShmPath,
    ) -> Result<(), u32> {
        let c = self.cqs.get_mut(&cq).ok_or(st::NO_SUCH_ID)?;
        let in_ring = c.host.ring.capacity() - c.host.ring.free_slots();
        let in_engine = rnic.cq_status(cq).map_or(0, |s| s.0);
        if in_ring + in_engine > depth as usize {
            return Err(st::IN_USE);
        }
        let seg = open(&ring.to_path(), SegmentKind::CompletionQueue)?;
        let (producer, _) = ring::attach_segment::<Cqe>(&seg).map_err(|_| st::BAD_SEGMENT)?;
        if producer.capacity() < depth as usize {
            return Err(st::BAD_SEGMENT);
        }
        rnic.resize_cq(cq, depth as usize).map_err(|_| st::IN_USE)?;
        c.host.notify = Notify::of_cq_segment(&seg, producer.capacity());
        c.host.ring = producer;
        Ok(())
    }
}

/// Maps an application's segment: sealed ones only ([`Segment::open_sealed`]). The
/// descriptor is closed at once: the mapping lives without it, the seals are the file's,
/// and segments are told apart by the file id read at the open, so the daemon holds no
/// descriptor per QP, CQ or region however many applications create.
fn open(path: &std::path::Path, kind: SegmentKind) -> Result<Arc<Segment>, u32> {
    Segment::open_sealed(path, Some(kind))
        .map(|mut s| {
            drop(s.take_fd());
            Arc::new(s)
        })
        .map_err(|e| {
            tracing::warn!("segment {}: {e}", path.display());
            st::BAD_SEGMENT
        })
}

/// The engine's connection parameters from what control negotiated.
pub fn conn_params(p: &RtsParams, max_fpdu: usize) -> ConnParams {
    let rtr = match p.rtr {
        AbiRtr::None => None,
        AbiRtr::ZeroLengthSend => Some(RtrKind::Send),
        AbiRtr::ZeroLengthWrite => Some(RtrKind::Write),
        AbiRtr::ZeroLengthRead => Some(RtrKind::Read),
    };
    ConnParams {
        tx: MpaParams {
            crc: p.crc_tx,
            markers: p.markers_tx,
        },
        rx: MpaParams {
            crc: p.crc_rx,
            markers: p.markers_rx,
        },
        ird: p.ird,
        ord: p.ord,
        rdmap_version: p.rdmap_version,
        max_fpdu: (p.mss as usize).clamp(64, max_fpdu),
        max_rx_ulpdu: 65535,
        p2p: rtr.map(|rtr| PeerToPeer {
            rtr,
            initiator: p.rtr_initiator,
        }),
    }
}

impl<P: Port> Service<P> for Host {
    fn post(&mut self, rnic: &mut Rnic) -> bool {
        self.timed(|h| h.pump_rings(rnic))
    }
    fn serve(&mut self, node: &mut Node<P>, rnic: &mut Rnic) -> bool {
        self.timed(|h| Host::serve(h, node, rnic))
    }
    fn ring_ns(&self) -> Option<u64> {
        self.ring_ns
    }
    fn doorbell(&mut self) -> Option<&mut DaemonWake> {
        self.doorbell.as_mut()
    }
    fn can_sleep(&self, rnic: &Rnic) -> bool {
        // Control draining the upcall ring, or an application its CQ ring, rings no bell.
        // Every CQ holding completions is listed as ready (see `drain_cqs`).
        self.backlog.is_empty() && !rnic.cqs_ready()
    }
}
