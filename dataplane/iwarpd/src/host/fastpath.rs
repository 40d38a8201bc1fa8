//! The fast path per QP and per CQ: application rings in, engine calls, CQE rings out.
//!
//! Every completion leaves through the engine's CQ, so a queue's completions keep posting
//! order: an entry that cannot be posted (undecodable, or refused by the engine) is posted
//! as a failed WR that completes in its turn (`Rnic::post_send_failed`), since the
//! application's Post Send returned when it wrote the ring.
//!
//! Back-pressure end to end: SQ/RQ entries the engine refuses with `QueueFull` wait in a
//! one-entry stash (never dropped, order kept); completions move from the engine's CQ to the
//! CQE ring only as far as the ring has room, so an application that never polls fills the
//! engine's CQ, which then overflows with the Verbs semantics (event, QPs to Error).

use super::convert;
use iwarp_abi::id::{CqId, PdId, QpId, SrqId};
use iwarp_abi::notify::Notify;
use iwarp_abi::ring::{Consumer, Producer};
use iwarp_abi::segment::Segment;
use iwarp_abi::wqe::{Cqe, RecvWqe, SendWqe};
use iwarp_engine::{Access, RecvWr, Rnic, SendWr, Status, VerbsError, WorkCompletion};
use std::sync::Arc;

/// Entries moved per ring per pump call (fairness between QPs: no QP starves the others).
pub const BURST: usize = 32;

/// A CQ: the engine's CQ and the application's CQE ring.
pub struct HostCq {
    pub cq: CqId,
    pub ring: Producer<Cqe>,
    /// The application's notification word, woken after completions are written.
    pub notify: Option<Notify>,
    /// Room for one burst of engine completions and their CQEs, kept so that a drain (every
    /// turn, for every CQ, mostly finding nothing) does not clear 3 KiB of stack each time.
    wcs: Box<[WorkCompletion; BURST]>,
    cqes: Box<[Cqe; BURST]>,
}

/// What a pump did, for counters and for the caller's "anything to do?" decision.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pumped {
    /// Entries handed to the engine.
    pub posted: usize,
    /// Entries posted as failed WRs (undecodable, or refused by the engine), which complete
    /// with an error in their turn, or dropped because their QP is gone.
    pub rejected: usize,
}

/// A QP's application-side rings.
pub struct HostQp {
    /// The QP number: control's, the application's and the engine's.
    pub qp: QpId,
    pub sq: Consumer<SendWqe>,
    /// None when the QP takes receives from an S-RQ.
    pub rq: Option<Consumer<RecvWqe>>,
    /// The entry the engine's full queue refused, with the status it fails with if it is
    /// a failed WR: posted first next time.
    sq_stash: Option<(SendWr, Option<Status>)>,
    rq_stash: Option<(RecvWr, Option<Status>)>,
    /// The last SQ pump stopped at its burst before finding the ring empty.
    sq_more: bool,
}

/// The completion status of a WR the engine refused at post time: a local STag it cannot
/// use is a protection error, anything else a malformed WR (Verbs figure 23).
fn refused_status(e: VerbsError) -> Status {
    match e {
        VerbsError::InvalidStag
        | VerbsError::ReadSinkNeedsRemoteWrite
        | VerbsError::InvalidAtomicSge => Status::LocalProtectionError,
        _ => Status::LocalQpOperationError,
    }
}

/// What posting one entry came to.
enum Posted {
    /// Accepted, to run or to fail in its turn (true when failed).
    Accepted { failed: bool },
    /// The engine's queue is full: stash it with its status and try again later.
    Full(Option<Status>),
    /// The QP is gone: nothing can complete it.
    Gone,
}

/// Counts what posting an entry of queue `queue` came to. `Some` with the entry's status
/// when the engine's queue was full: the caller stashes the entry and stops.
fn tally(queue: impl core::fmt::Display, r: Posted, p: &mut Pumped) -> Option<Option<Status>> {
    match r {
        Posted::Accepted { failed: false } => p.posted += 1,
        Posted::Accepted { failed: true } => p.rejected += 1,
        Posted::Gone => {
            tracing::warn!("{queue}: entry dropped, the engine has no such queue");
            p.rejected += 1;
        }
        Posted::Full(failed) => return Some(failed),
    }
    None
}

/// The engine's post verb for a queue (QP or S-RQ `id`), and its failed-WR twin.
type Post<I, W> = fn(&mut Rnic, I, W) -> Result<(), VerbsError>;
type PostFailed<I, W> = fn(&mut Rnic, I, W, Status) -> Result<(), VerbsError>;

/// Posts `wr` to queue `id`, or, when it is failed already or the engine refuses it, posts
/// it as a failed WR.
fn post_or_fail<I: Copy, W: Copy>(
    rnic: &mut Rnic,
    id: I,
    (wr, failed): (W, Option<Status>),
    post: Post<I, W>,
    post_failed: PostFailed<I, W>,
) -> Posted {
    let status = match failed {
        Some(s) => s,
        None => match post(rnic, id, wr) {
            Ok(()) => return Posted::Accepted { failed: false },
            Err(VerbsError::QueueFull) => return Posted::Full(None),
            Err(VerbsError::InvalidQp | VerbsError::InvalidSrq) => return Posted::Gone,
            Err(e) => refused_status(e),
        },
    };
    match post_failed(rnic, id, wr, status) {
        Ok(()) => Posted::Accepted { failed: true },
        Err(VerbsError::QueueFull) => Posted::Full(Some(status)),
        Err(_) => Posted::Gone,
    }
}

/// A receive entry of an RQ or S-RQ ring as the engine takes it, with the status it fails
/// with when it cannot be decoded (it still completes, in its turn).
fn recv_entry(w: &RecvWqe) -> (RecvWr, Option<Status>) {
    match convert::recv_wr(w) {
        Ok(wr) => (wr, None),
        Err(()) => (
            RecvWr::new(w.wr_id, &[]),
            Some(Status::LocalQpOperationError),
        ),
    }
}

impl HostQp {
    pub fn new(qp: QpId, sq: Consumer<SendWqe>, rq: Option<Consumer<RecvWqe>>) -> HostQp {
        HostQp {
            qp,
            sq,
            rq,
            sq_stash: None,
            rq_stash: None,
            sq_more: false,
        }
    }

    /// Asks the cache for what [`HostQp::pump_sq`] reads first: the SQ ring's producer index
    /// and oldest entry, and the engine's QP.
    pub fn prefetch_sq(&self, rnic: &Rnic) {
        self.sq.prefetch_next();
        rnic.prefetch_qp(self.qp);
    }

    /// Moves up to [`BURST`] SQ entries into the engine.
    pub fn pump_sq(&mut self, rnic: &mut Rnic) -> Pumped {
        let mut p = Pumped::default();
        if self.sq.is_corrupt() {
            return p;
        }
        let qp = self.qp;
        self.sq_more = true;
        for _ in 0..BURST {
            let (wr, failed) = match self.sq_stash.take() {
                Some(stashed) => stashed,
                None => {
                    let Some(w) = self.sq.pop() else {
                        self.sq_more = false;
                        break;
                    };
                    match convert::send_wr(&w) {
                        Ok(wr) => (wr, None),
                        // Undecodable: a stand-in with its id and operation fails in its turn.
                        Err(()) => (convert::stand_in(&w), Some(Status::LocalQpOperationError)),
                    }
                }
            };
            let r = post_or_fail(
                rnic,
                qp,
                (wr, failed),
                Rnic::post_send,
                Rnic::post_send_failed,
            );
            if let Some(failed) = tally(qp, r, &mut p) {
                self.sq_stash = Some((wr, failed));
                break;
            }
        }
        p
    }

    /// Moves every RQ entry the ring holds into the engine (until the engine's RQ is full).
    /// Not a burst: a receive posted before a message arrives must be in the engine when
    /// the message is, however many messages one turn brings (packed small Sends bring
    /// dozens); the ring's depth bounds the work.
    pub fn pump_rq(&mut self, rnic: &mut Rnic) -> Pumped {
        let mut p = Pumped::default();
        let Some(rq) = self.rq.as_mut() else { return p };
        if rq.is_corrupt() {
            return p;
        }
        let qp = self.qp;
        loop {
            let (wr, failed) = match self.rq_stash.take() {
                Some(stashed) => stashed,
                None => {
                    let Some(w) = rq.pop() else { break };
                    recv_entry(&w)
                }
            };
            let r = post_or_fail(
                rnic,
                qp,
                (wr, failed),
                Rnic::post_recv,
                Rnic::post_recv_failed,
            );
            if let Some(failed) = tally(qp, r, &mut p) {
                self.rq_stash = Some((wr, failed));
                break;
            }
        }
        p
    }

    /// Whether the engine's full RQ refused an entry, which waits for the next pump.
    pub fn rq_left(&self) -> bool {
        self.rq_stash.is_some()
    }

    /// Whether a ring's producer index was found impossible (a broken application): the
    /// caller moves the QP to Error.
    pub fn is_corrupt(&mut self) -> bool {
        self.sq.is_corrupt() || self.rq.as_ref().is_some_and(|r| r.is_corrupt())
    }

    /// Whether a pump left work behind (more than a burst, or an entry the engine's full
    /// queue refused): no post rings for it, so the caller visits the QP again. Known from
    /// the pumps, not by reading the rings' heads again: a post published after a pump
    /// found its ring empty rings the doorbell after it, and that is taken next turn.
    pub fn pending(&self) -> bool {
        self.sq_stash.is_some() || self.rq_stash.is_some() || self.sq_more
    }
}

impl HostCq {
    pub fn new(cq: CqId, ring: Producer<Cqe>, notify: Option<Notify>) -> HostCq {
        HostCq {
            cq,
            ring,
            notify,
            wcs: Box::new([WorkCompletion::default(); BURST]),
            cqes: Box::new([Cqe::default(); BURST]),
        }
    }

    /// Writes up to [`BURST`] engine completions, as far as the CQE ring has room. The
    /// application's waiter is not woken here: the caller does, once it has drained every
    /// CQ of its turn ([`Notify::wake_armed`]).
    pub fn drain(&mut self, rnic: &mut Rnic) -> Drained {
        let held = rnic.cq_status(self.cq).map_or(0, |(n, _)| n);
        let mut d = Drained {
            left: held > 0,
            ..Drained::default()
        };
        let waiting = held.min(BURST);
        if waiting == 0 {
            return d;
        }
        let room = self.ring.free_for(waiting).min(waiting);
        if room == 0 {
            return d;
        }
        let n = rnic.poll_cq(self.cq, &mut self.wcs[..room]).unwrap_or(0);
        d.left = held > n;
        for (c, wc) in self.cqes.iter_mut().zip(&self.wcs[..n]) {
            *c = convert::cqe(wc);
        }
        // `room` slots were free and only we produce: all n fit, one doorbell.
        let written = self.ring.push_batch(&self.cqes[..n]);
        debug_assert_eq!(written, n);
        d.completed = written;
        // A solicited-only arming is met by a solicited or an error completion (Verbs
        // section 8.3.4).
        d.solicited = self.wcs[..n]
            .iter()
            .any(|wc| wc.solicited || wc.status != Status::Success);
        d
    }
}

/// What a CQ drain wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// CQEs written.
    pub completed: usize,
    /// One of them was solicited or in error: it meets a solicited-only arming.
    pub solicited: bool,
    /// The engine still holds completions for the CQ (its ring was full, or more than a
    /// burst waited).
    pub left: bool,
}

/// An S-RQ's application ring.
pub struct HostSrq {
    pub srq: SrqId,
    ring: Consumer<RecvWqe>,
    stash: Option<(RecvWr, Option<Status>)>,
}

impl HostSrq {
    pub fn new(srq: SrqId, ring: Consumer<RecvWqe>) -> HostSrq {
        HostSrq {
            srq,
            ring,
            stash: None,
        }
    }

    /// Moves every S-RQ entry the ring holds into the engine (until it is full), as
    /// [`HostQp::pump_rq`] does and for the same reason. A malformed entry is posted as a
    /// failed receive: the QP whose message consumes it completes it in error.
    pub fn pump(&mut self, rnic: &mut Rnic) -> Pumped {
        let mut p = Pumped::default();
        if self.ring.is_corrupt() {
            return p;
        }
        let srq = self.srq;
        loop {
            let (wr, failed) = match self.stash.take() {
                Some(stashed) => stashed,
                None => {
                    let Some(w) = self.ring.pop() else { break };
                    recv_entry(&w)
                }
            };
            let r = post_or_fail(
                rnic,
                srq,
                (wr, failed),
                Rnic::post_srq_recv,
                Rnic::post_srq_recv_failed,
            );
            if let Some(failed) = tally(srq, r, &mut p) {
                self.stash = Some((wr, failed));
                break;
            }
        }
        p
    }

    /// Whether the pump left work behind (as [`HostQp::pending`]): only an entry the full
    /// engine refused, since a pump reads the ring until it is empty.
    pub fn pending(&self) -> bool {
        self.stash.is_some()
    }
}

/// Why a registration from a segment was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterError {
    /// offset + len runs past the segment's data area.
    OutOfBounds,
    /// Access bits outside the defined set, or remote rights that write without Local
    /// Write (Verbs figure 18).
    BadAccess,
    /// The STag is 0 or its index is taken.
    StagInUse,
}

/// A memory region the engine knows, with the segment it lives in kept mapped.
pub struct HostMr {
    pub engine_stag: u32,
    _seg: Arc<Segment>,
}

/// A registration request: `len` octets at `offset` of a segment's data area, as `stag`
/// (chosen by iwarp-control) in PD `pd`; `base_to` is the tagged offset of its first
/// octet (its virtual address, or 0 when zero-based).
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    pub stag: u32,
    pub pd: PdId,
    pub offset: u64,
    pub len: u64,
    pub access: u32,
    pub base_to: u64,
}

/// Registers part of `seg` with the engine. The mapping stays alive as long as the returned
/// [`HostMr`]; deregister it from the engine before dropping that.
pub fn register_segment(
    rnic: &mut Rnic,
    seg: &Arc<Segment>,
    r: Registration,
) -> Result<HostMr, RegisterError> {
    let end = r
        .offset
        .checked_add(r.len)
        .ok_or(RegisterError::OutOfBounds)?;
    if end > seg.data_len() as u64 || r.len == 0 {
        return Err(RegisterError::OutOfBounds);
    }
    let access = Access::from_bits(r.access).ok_or(RegisterError::BadAccess)?;
    // SAFETY: [offset, offset+len) lies in the segment's data area (checked above), which
    // stays mapped while the returned HostMr holds the Arc; the engine only copies into it
    // or runs atomics on it, as its contract requires.
    unsafe {
        let base = core::ptr::NonNull::new_unchecked(seg.data().as_ptr().add(r.offset as usize));
        rnic.register_mr_at(r.stag, r.pd, base, r.len as usize, access, r.base_to)
    }
    .map_err(|e| match e {
        VerbsError::InvalidAccess => RegisterError::BadAccess,
        _ => RegisterError::StagInUse,
    })?;
    Ok(HostMr {
        engine_stag: r.stag,
        _seg: seg.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_abi::ring;
    use iwarp_abi::segment::{HugePolicy, SegmentKind};
    use iwarp_abi::wqe::{CqeOpcode, CqeStatus, SendOpcode, Sge};
    use iwarp_engine::{QpCaps, QpState};

    fn seg(tag: &str, bytes: usize) -> Arc<Segment> {
        let name = format!("iwarpd-host-{tag}-{}", std::process::id());
        Arc::new(Segment::create(&name, SegmentKind::Other, bytes, HugePolicy::Off).unwrap())
    }

    /// An engine QP and its host side over fresh rings, with the application's writing ends.
    struct Fresh {
        qp: HostQp,
        app_sq: Producer<SendWqe>,
        app_rq: Producer<RecvWqe>,
        eqp: QpId,
        ecq: CqId,
    }

    /// A QP of `(sq_depth, rq_depth)` on a CQ of 256, over rings of `(sq, rq)` slots
    /// (segments named by `tag`).
    fn fresh_qp(
        rnic: &mut Rnic,
        tag: &str,
        depths: (usize, usize),
        slots: (usize, usize),
    ) -> Fresh {
        let pd = rnic.alloc_pd();
        let ecq = rnic.create_cq(256);
        let caps = QpCaps {
            sq_depth: depths.0,
            rq_depth: depths.1,
            srq: None,
        };
        let eqp = rnic.create_qp(pd, ecq, ecq, caps).unwrap();
        let sq_seg = seg(&format!("sq{tag}"), ring::ring_bytes::<SendWqe>(slots.0));
        let rq_seg = seg(&format!("rq{tag}"), ring::ring_bytes::<RecvWqe>(slots.1));
        let (app_sq, sq_c) = ring::init_segment::<SendWqe>(&sq_seg, slots.0).unwrap();
        let (app_rq, rq_c) = ring::init_segment::<RecvWqe>(&rq_seg, slots.1).unwrap();
        Fresh {
            qp: HostQp::new(eqp, sq_c, Some(rq_c)),
            app_sq,
            app_rq,
            eqp,
            ecq,
        }
    }

    /// The application's receives and sends reach the engine through the rings; moving the
    /// QP to Error flushes them back as CQEs in posting order, a corrupted receive among
    /// them included (it caused no error, so it is flushed too: Verbs section 6.2.4).
    #[test]
    fn rings_to_engine_and_flushed_completions_back() {
        let mut rnic = Rnic::new();
        let pd = rnic.alloc_pd();
        let ecq = rnic.create_cq(64);
        // The QP number control chose, which completions carry.
        let eqp = QpId(7);
        rnic.create_qp_at(
            eqp,
            pd,
            ecq,
            ecq,
            QpCaps {
                sq_depth: 16,
                rq_depth: 16,
                srq: None,
            },
        )
        .unwrap();

        let sq_seg = seg("sq", ring::ring_bytes::<SendWqe>(16));
        let rq_seg = seg("rq", ring::ring_bytes::<RecvWqe>(16));
        let cq_seg = seg("cq", ring::ring_bytes::<Cqe>(64));
        let (mut app_sq, sq_c) = ring::init_segment::<SendWqe>(&sq_seg, 16).unwrap();
        let (mut app_rq, rq_c) = ring::init_segment::<RecvWqe>(&rq_seg, 16).unwrap();
        let (cq_p, mut app_cq) = ring::init_segment::<Cqe>(&cq_seg, 64).unwrap();
        let mut qp = HostQp::new(eqp, sq_c, Some(rq_c));
        let mut cq = HostCq::new(ecq, cq_p, None);

        let mem = seg("mem", 4096);
        let reg = Registration {
            stag: 0x100 | 7,
            pd,
            offset: 0,
            len: 4096,
            access: 1,
            base_to: 0,
        };
        let mr = register_segment(&mut rnic, &mem, reg).unwrap();
        assert_eq!(mr.engine_stag, 0x107, "the STag control chose");
        let past = Registration {
            stag: 0x200 | 1,
            offset: 4000,
            ..reg
        };
        assert_eq!(
            register_segment(&mut rnic, &mem, past).err(),
            Some(RegisterError::OutOfBounds)
        );
        let taken = Registration {
            stag: 0x100 | 9,
            ..reg
        };
        assert_eq!(
            register_segment(&mut rnic, &mem, taken).err(),
            Some(RegisterError::StagInUse),
            "index 1 is in use whatever the key"
        );
        let sge = Sge {
            stag: mr.engine_stag,
            len: 100,
            to: 0,
        };
        for i in 0..3 {
            app_rq.push(RecvWqe::new(i, &[sge]).unwrap()).unwrap();
        }
        let mut bad = RecvWqe::new(99, &[]).unwrap();
        bad.num_sge = 50;
        app_rq.push(bad).unwrap();
        app_rq.push(RecvWqe::new(3, &[sge]).unwrap()).unwrap();
        let p = qp.pump_rq(&mut rnic);
        assert_eq!((p.posted, p.rejected), (4, 1));

        // A send in Idle is enqueued, not run (Verbs figure 7).
        app_sq
            .push(SendWqe::new(50, SendOpcode::Send, &[sge]).unwrap())
            .unwrap();
        assert_eq!(qp.pump_sq(&mut rnic).posted, 1);
        assert_eq!(cq.drain(&mut rnic).completed, 0);

        rnic.modify_qp(eqp, QpState::Error).unwrap();
        let d = cq.drain(&mut rnic);
        let got: Vec<Cqe> = std::iter::from_fn(|| app_cq.pop()).collect();
        assert_eq!(got.len(), d.completed);
        assert!(got.iter().all(|c| c.qp_num == 7));
        assert!(got
            .iter()
            .all(|c| c.status().unwrap() == CqeStatus::WrFlushed));
        let ids: Vec<(u64, CqeOpcode)> = got.iter().map(|c| (c.wr_id, c.op().unwrap())).collect();
        assert_eq!(
            ids,
            vec![
                (50, CqeOpcode::Send),
                (0, CqeOpcode::Recv),
                (1, CqeOpcode::Recv),
                (2, CqeOpcode::Recv),
                (99, CqeOpcode::Recv),
                (3, CqeOpcode::Recv)
            ],
            "each queue in posting order"
        );
    }

    /// Verbs section 8.2.2 rule 2 and figure 23: an SQ entry that cannot run (corrupted, or
    /// refused by the engine) completes in its turn, after the entries before it and never
    /// ahead of them; the QP goes to Error and the entries behind it are flushed.
    #[test]
    fn a_failed_send_completes_in_posting_order() {
        let mut rnic = Rnic::new();
        let pd = rnic.alloc_pd();
        let ecq = rnic.create_cq(64);
        let caps = QpCaps {
            sq_depth: 16,
            rq_depth: 16,
            srq: None,
        };
        let eqp = rnic.create_qp(pd, ecq, ecq, caps).unwrap();
        rnic.connect(eqp, iwarp_engine::ConnParams::new(false, 4, 4, 1460))
            .unwrap();
        let sq_seg = seg("sq4", ring::ring_bytes::<SendWqe>(16));
        let cq_seg = seg("cq4", ring::ring_bytes::<Cqe>(64));
        let (mut app_sq, sq_c) = ring::init_segment::<SendWqe>(&sq_seg, 16).unwrap();
        let (cq_p, mut app_cq) = ring::init_segment::<Cqe>(&cq_seg, 64).unwrap();
        let mut qp = HostQp::new(eqp, sq_c, None);
        let mut cq = HostCq::new(ecq, cq_p, None);

        let mem = seg("mem4", 4096);
        let reg = Registration {
            stag: 0x300,
            pd,
            offset: 0,
            len: 4096,
            access: 1,
            base_to: 0,
        };
        let mr = register_segment(&mut rnic, &mem, reg).unwrap();
        let sge = Sge {
            stag: mr.engine_stag,
            len: 100,
            to: 0,
        };
        app_sq
            .push(SendWqe::new(1, SendOpcode::Send, &[sge]).unwrap())
            .unwrap();
        let mut bad = SendWqe::new(2, SendOpcode::Write, &[sge]).unwrap();
        bad.num_sge = 50;
        app_sq.push(bad).unwrap();
        // A Read whose sink lacks Remote Write: the engine refuses it at post time.
        app_sq
            .push(SendWqe::new(3, SendOpcode::Read, &[sge]).unwrap())
            .unwrap();
        app_sq
            .push(SendWqe::new(4, SendOpcode::Send, &[sge]).unwrap())
            .unwrap();
        let p = qp.pump_sq(&mut rnic);
        assert_eq!((p.posted, p.rejected), (2, 2));
        assert_eq!(cq.drain(&mut rnic).completed, 0, "nothing jumps ahead");

        let mut wire = [0u8; 1460];
        while rnic.poll_transmit(eqp, &mut wire).is_some() {}
        cq.drain(&mut rnic);
        let got: Vec<(u64, CqeOpcode, CqeStatus)> = std::iter::from_fn(|| app_cq.pop())
            .map(|c| (c.wr_id, c.op().unwrap(), c.status().unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, CqeOpcode::Send, CqeStatus::Success),
                (2, CqeOpcode::Write, CqeStatus::LocalQpOperationError),
                (3, CqeOpcode::Read, CqeStatus::WrFlushed),
                (4, CqeOpcode::Send, CqeStatus::WrFlushed),
            ]
        );
        assert_eq!(rnic.qp_state(eqp), Some(QpState::Error));
    }

    /// Every receive the application posted is in the engine after one pump, not a burst's
    /// worth: 16 packed Sends arriving in the turn after 100 receives were posted must find
    /// them all. What the engine's RQ cannot take waits, in order, for the next pump.
    #[test]
    fn one_pump_moves_every_posted_receive() {
        let mut rnic = Rnic::new();
        let Fresh {
            mut qp,
            mut app_rq,
            eqp,
            ecq,
            ..
        } = fresh_qp(&mut rnic, "3", (4, 64), (4, 128));
        for i in 0..100 {
            app_rq.push(RecvWqe::new(i, &[]).unwrap()).unwrap();
        }
        const { assert!(BURST < 64) };
        assert_eq!(
            qp.pump_rq(&mut rnic).posted,
            64,
            "all the engine's RQ holds"
        );
        assert_eq!(qp.pump_rq(&mut rnic).posted, 0, "the engine is full");
        // The engine's receives flushed back: the first 64, in order.
        rnic.modify_qp(eqp, QpState::Error).unwrap();
        let mut wcs = vec![WorkCompletion::default(); 128];
        let n = rnic.poll_cq(ecq, &mut wcs).unwrap();
        let ids: Vec<u64> = wcs[..n].iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, (0..64).collect::<Vec<_>>());
    }

    /// A pump that stopped at its burst leaves its QP pending (no post will ring for what
    /// is left); one that emptied the ring does not, and nothing rereads the ring to say so:
    /// a later post rings the doorbell itself.
    #[test]
    fn a_qp_is_pending_while_its_sq_pump_stops_at_the_burst() {
        let mut rnic = Rnic::new();
        let Fresh {
            mut qp, mut app_sq, ..
        } = fresh_qp(&mut rnic, "5", (128, 4), (128, 4));
        assert!(!qp.pending());
        let send = |i| SendWqe::new(i, SendOpcode::Send, &[]).unwrap();
        for i in 0..BURST as u64 + 5 {
            app_sq.push(send(i)).unwrap();
        }
        assert_eq!(qp.pump_sq(&mut rnic).posted, BURST);
        assert!(qp.pending(), "five entries left behind the burst");
        assert_eq!(qp.pump_sq(&mut rnic).posted, 5);
        assert!(!qp.pending(), "the pump found the ring empty");
        app_sq.push(send(99)).unwrap();
        assert!(!qp.pending(), "a new post is the doorbell's to announce");
        assert_eq!(qp.pump_sq(&mut rnic).posted, 1);
    }

    /// A CQE ring the application never polls: completions stay in the engine (no loss in
    /// the ring), only as many as fit are written.
    #[test]
    fn a_full_cqe_ring_stops_the_drain() {
        let mut rnic = Rnic::new();
        let pd = rnic.alloc_pd();
        let ecq = rnic.create_cq(64);
        let eqp = rnic
            .create_qp(
                pd,
                ecq,
                ecq,
                QpCaps {
                    sq_depth: 16,
                    rq_depth: 16,
                    srq: None,
                },
            )
            .unwrap();
        let rq_seg = seg("rq2", ring::ring_bytes::<RecvWqe>(16));
        let sq_seg = seg("sq2", ring::ring_bytes::<SendWqe>(16));
        let cq_seg = seg("cq2", ring::ring_bytes::<Cqe>(4));
        let (mut app_rq, rq_c) = ring::init_segment::<RecvWqe>(&rq_seg, 16).unwrap();
        let (_, sq_c) = ring::init_segment::<SendWqe>(&sq_seg, 16).unwrap();
        let (cq_p, mut app_cq) = ring::init_segment::<Cqe>(&cq_seg, 4).unwrap();
        let mut qp = HostQp::new(eqp, sq_c, Some(rq_c));
        let mut cq = HostCq::new(ecq, cq_p, None);
        for i in 0..10 {
            app_rq.push(RecvWqe::new(i, &[]).unwrap()).unwrap();
        }
        assert_eq!(qp.pump_rq(&mut rnic).posted, 10);
        rnic.modify_qp(eqp, QpState::Error).unwrap();
        let d = cq.drain(&mut rnic);
        assert_eq!((d.completed, d.left), (4, true));
        let d = cq.drain(&mut rnic);
        assert_eq!((d.completed, d.left), (0, true), "ring full");
        let mut ids = Vec::new();
        while ids.len() < 10 {
            while let Some(c) = app_cq.pop() {
                ids.push(c.wr_id);
            }
            cq.drain(&mut rnic);
        }
        assert_eq!(
            ids,
            (0..10).collect::<Vec<u64>>(),
            "nothing lost, order kept"
        );
        assert!(!cq.drain(&mut rnic).left, "all written");
    }
}
