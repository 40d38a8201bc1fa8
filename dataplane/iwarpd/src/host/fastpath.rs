//! The fast path per QP and per CQ: application rings in, engine calls, CQE rings out.
//!
//! Back-pressure end to end: SQ/RQ entries the engine refuses with `QueueFull` wait in a
//! one-entry stash (never dropped, order kept); completions move from the engine's CQ to the
//! CQE ring only as far as the ring has room, so an application that never polls fills the
//! engine's CQ, which then overflows with the Verbs semantics (event, QPs to Error).

use super::convert;
use iwarp_abi::ring::{Consumer, Producer};
use iwarp_abi::segment::Segment;
use iwarp_abi::wqe::{Cqe, CqeOpcode, CqeStatus, RecvWqe, SendWqe};
use iwarp_engine::{Access, RecvWr, Rnic, SendWr, VerbsError, WorkCompletion};
use std::sync::Arc;

/// Entries moved per ring per pump call (fairness between QPs: no QP starves the others).
pub const BURST: usize = 32;

/// A CQ: the engine's CQ and the application's CQE ring.
pub struct HostCq {
    pub engine_cq: u32,
    pub ring: Producer<Cqe>,
    /// The application's notification word, woken after completions are written.
    pub notify: Option<iwarp_abi::notify::Notify>,
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
    /// Entries completed at once with an error (corrupted or refused).
    pub rejected: usize,
    /// CQEs written.
    pub completed: usize,
}

/// A QP's application-side rings.
pub struct HostQp {
    /// The QP number the application and control know.
    pub qp_num: u32,
    pub engine_qp: u32,
    pub sq: Consumer<SendWqe>,
    /// None when the QP takes receives from an S-RQ.
    pub rq: Option<Consumer<RecvWqe>>,
    /// Error completions for the SQ and RQ go straight to these CQE rings' owners through
    /// the engine-independent path below (they never entered the engine).
    sq_stash: Option<SendWr>,
    rq_stash: Option<RecvWr>,
    /// Error CQEs waiting for room in the CQ ring (kept in order, never dropped).
    pub pending_send_cqes: Vec<Cqe>,
    pub pending_recv_cqes: Vec<Cqe>,
}

fn refused_status(e: VerbsError) -> CqeStatus {
    match e {
        VerbsError::InvalidStag | VerbsError::ReadSinkNeedsRemoteWrite => {
            CqeStatus::LocalProtectionError
        }
        _ => CqeStatus::LocalQpOperationError,
    }
}

impl HostQp {
    pub fn new(
        qp_num: u32,
        engine_qp: u32,
        sq: Consumer<SendWqe>,
        rq: Option<Consumer<RecvWqe>>,
    ) -> HostQp {
        HostQp {
            qp_num,
            engine_qp,
            sq,
            rq,
            sq_stash: None,
            rq_stash: None,
            pending_send_cqes: Vec::new(),
            pending_recv_cqes: Vec::new(),
        }
    }

    /// Moves up to [`BURST`] SQ entries into the engine.
    pub fn pump_sq(&mut self, rnic: &mut Rnic) -> Pumped {
        let mut p = Pumped::default();
        if self.sq.is_corrupt() {
            return p;
        }
        for _ in 0..BURST {
            let wr = match self.sq_stash.take() {
                Some(wr) => wr,
                None => {
                    let Some(w) = self.sq.pop() else { break };
                    match convert::send_wr(&w) {
                        Ok(wr) => wr,
                        Err(()) => {
                            self.pending_send_cqes.push(convert::error_cqe(
                                w.wr_id,
                                self.qp_num,
                                convert::opcode_of(&w),
                                CqeStatus::LocalQpOperationError,
                            ));
                            p.rejected += 1;
                            continue;
                        }
                    }
                }
            };
            match rnic.post_send(self.engine_qp, wr) {
                Ok(()) => p.posted += 1,
                Err(VerbsError::QueueFull) => {
                    self.sq_stash = Some(wr);
                    break;
                }
                Err(e) => {
                    let op = match wr.op {
                        iwarp_engine::SendOp::Write { .. }
                        | iwarp_engine::SendOp::WriteImm { .. } => CqeOpcode::Write,
                        iwarp_engine::SendOp::Read { .. } | iwarp_engine::SendOp::ReadV2 { .. } => {
                            CqeOpcode::Read
                        }
                        _ => CqeOpcode::Send,
                    };
                    self.pending_send_cqes.push(convert::error_cqe(
                        wr.wr_id,
                        self.qp_num,
                        op,
                        refused_status(e),
                    ));
                    p.rejected += 1;
                }
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
        loop {
            let wr = match self.rq_stash.take() {
                Some(wr) => wr,
                None => {
                    let Some(w) = rq.pop() else { break };
                    match convert::recv_wr(&w) {
                        Ok(wr) => wr,
                        Err(()) => {
                            self.pending_recv_cqes.push(convert::error_cqe(
                                w.wr_id,
                                self.qp_num,
                                CqeOpcode::Recv,
                                CqeStatus::LocalQpOperationError,
                            ));
                            p.rejected += 1;
                            continue;
                        }
                    }
                }
            };
            match rnic.post_recv(self.engine_qp, wr) {
                Ok(()) => p.posted += 1,
                Err(VerbsError::QueueFull) => {
                    self.rq_stash = Some(wr);
                    break;
                }
                Err(e) => {
                    self.pending_recv_cqes.push(convert::error_cqe(
                        wr.wr_id,
                        self.qp_num,
                        CqeOpcode::Recv,
                        refused_status(e),
                    ));
                    p.rejected += 1;
                }
            }
        }
        p
    }

    /// Whether a ring's producer index was found impossible (a broken application): the
    /// caller moves the QP to Error.
    pub fn is_corrupt(&mut self) -> bool {
        self.sq.is_corrupt() || self.rq.as_ref().is_some_and(|r| r.is_corrupt())
    }
}

impl HostCq {
    pub fn new(
        engine_cq: u32,
        ring: Producer<Cqe>,
        notify: Option<iwarp_abi::notify::Notify>,
    ) -> HostCq {
        HostCq {
            engine_cq,
            ring,
            notify,
            wcs: Box::new([WorkCompletion::default(); BURST]),
            cqes: Box::new([Cqe::default(); BURST]),
        }
    }

    /// Writes `pending` error CQEs first (in order), then up to [`BURST`] engine completions,
    /// as far as the CQE ring has room. `qp_num` maps an engine QP id to the application's.
    pub fn drain(
        &mut self,
        rnic: &mut Rnic,
        pending: &mut Vec<Cqe>,
        qp_num: impl Fn(u32) -> u32,
    ) -> Pumped {
        let mut p = Pumped::default();
        if !pending.is_empty() {
            let n = self.ring.push_batch(pending);
            pending.drain(..n);
            p.completed += n;
        }
        let room = self.ring.free_slots().min(BURST);
        if room == 0 {
            return p;
        }
        let n = rnic
            .poll_cq(self.engine_cq, &mut self.wcs[..room])
            .unwrap_or(0);
        for (c, wc) in self.cqes.iter_mut().zip(&self.wcs[..n]) {
            *c = convert::cqe(wc, qp_num(wc.qp));
        }
        // `room` slots were free and only we produce: all n fit, one doorbell.
        let written = self.ring.push_batch(&self.cqes[..n]);
        debug_assert_eq!(written, n);
        p.completed += written;
        if p.completed > 0 {
            if let Some(w) = &self.notify {
                w.wake_if_armed();
            }
        }
        p
    }
}

/// An S-RQ's application ring.
pub struct HostSrq {
    pub engine_srq: u32,
    ring: Consumer<RecvWqe>,
    stash: Option<RecvWr>,
}

impl HostSrq {
    pub fn new(engine_srq: u32, ring: Consumer<RecvWqe>) -> HostSrq {
        HostSrq {
            engine_srq,
            ring,
            stash: None,
        }
    }

    /// Moves every S-RQ entry the ring holds into the engine (until it is full), as
    /// [`HostQp::pump_rq`] does and for the same reason. A malformed entry has no QP to
    /// complete on (an S-RQ serves many) and is dropped with a warning.
    pub fn pump(&mut self, rnic: &mut Rnic) -> Pumped {
        let mut p = Pumped::default();
        if self.ring.is_corrupt() {
            return p;
        }
        loop {
            let wr = match self.stash.take() {
                Some(wr) => wr,
                None => {
                    let Some(w) = self.ring.pop() else { break };
                    match convert::recv_wr(&w) {
                        Ok(wr) => wr,
                        Err(()) => {
                            tracing::warn!("S-RQ {}: malformed entry dropped", self.engine_srq);
                            p.rejected += 1;
                            continue;
                        }
                    }
                }
            };
            match rnic.post_srq_recv(self.engine_srq, wr) {
                Ok(()) => p.posted += 1,
                Err(_) => {
                    self.stash = Some(wr);
                    break;
                }
            }
        }
        p
    }
}

/// Why a registration from a segment was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterError {
    /// offset + len runs past the segment's data area.
    OutOfBounds,
    /// Access bits outside the defined set.
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
/// (chosen by iwarp-control) in engine PD `pd`; `base_to` is the tagged offset of its first
/// octet (its virtual address, or 0 when zero-based).
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    pub stag: u32,
    pub pd: u32,
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
    let access = u8::try_from(r.access)
        .ok()
        .filter(|a| u32::from(*a) & !iwarp_abi::wqe::access::ALL == 0)
        .ok_or(RegisterError::BadAccess)?;
    // SAFETY: [offset, offset+len) lies in the segment's data area (checked above), which
    // stays mapped while the returned HostMr holds the Arc; the engine only copies into it
    // or runs atomics on it, as its contract requires.
    unsafe {
        let base = core::ptr::NonNull::new_unchecked(seg.data().as_ptr().add(r.offset as usize));
        rnic.register_mr_at(
            r.stag,
            r.pd,
            base,
            r.len as usize,
            Access(access),
            r.base_to,
        )
    }
    .map_err(|_| RegisterError::StagInUse)?;
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
    use iwarp_abi::wqe::{SendOpcode, Sge};
    use iwarp_engine::{QpCaps, QpState};

    fn seg(tag: &str, bytes: usize) -> Arc<Segment> {
        let name = format!("iwarpd-host-{tag}-{}", std::process::id());
        Arc::new(Segment::create(&name, SegmentKind::Other, bytes, HugePolicy::Off).unwrap())
    }

    /// The application's receives and sends reach the engine through the rings; moving the
    /// QP to Error flushes them back as CQEs in order; a corrupted entry completes with
    /// LocalQpOperationError without stopping the others.
    #[test]
    fn rings_to_engine_and_flushed_completions_back() {
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

        let sq_seg = seg("sq", ring::ring_bytes::<SendWqe>(16));
        let rq_seg = seg("rq", ring::ring_bytes::<RecvWqe>(16));
        let cq_seg = seg("cq", ring::ring_bytes::<Cqe>(64));
        let (mut app_sq, sq_c) = ring::init_segment::<SendWqe>(&sq_seg, 16).unwrap();
        let (mut app_rq, rq_c) = ring::init_segment::<RecvWqe>(&rq_seg, 16).unwrap();
        let (cq_p, mut app_cq) = ring::init_segment::<Cqe>(&cq_seg, 64).unwrap();
        let mut qp = HostQp::new(7, eqp, sq_c, Some(rq_c));
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
        let p = qp.pump_rq(&mut rnic);
        assert_eq!((p.posted, p.rejected), (3, 1));

        // A send in Idle is refused by the engine and completes with an error.
        app_sq
            .push(SendWqe::new(50, SendOpcode::Send, &[sge]).unwrap())
            .unwrap();
        let p = qp.pump_sq(&mut rnic);
        assert_eq!(p.posted + p.rejected, 1);

        rnic.modify_qp(eqp, QpState::Error).unwrap();
        let mut pending = core::mem::take(&mut qp.pending_recv_cqes);
        pending.append(&mut qp.pending_send_cqes);
        let map = |e: u32| if e == eqp { 7 } else { u32::MAX };
        let d = cq.drain(&mut rnic, &mut pending, map);
        assert!(pending.is_empty());
        let got: Vec<Cqe> = std::iter::from_fn(|| app_cq.pop()).collect();
        assert_eq!(got.len(), d.completed);
        assert!(got.iter().all(|c| c.qp_num == 7));
        let bad_cqe = got.iter().find(|c| c.wr_id == 99).unwrap();
        assert_eq!(bad_cqe.status().unwrap(), CqeStatus::LocalQpOperationError);
        let flushed: Vec<u64> = got
            .iter()
            .filter(|c| {
                c.status().unwrap() == CqeStatus::WrFlushed && c.op().unwrap() == CqeOpcode::Recv
            })
            .map(|c| c.wr_id)
            .collect();
        assert_eq!(flushed, vec![0, 1, 2], "flushed in posting order");
        assert!(
            got.iter().any(|c| c.wr_id == 50),
            "the send completed (error or flush)"
        );
    }

    /// Every receive the application posted is in the engine after one pump, not a burst's
    /// worth: 16 packed Sends arriving in the turn after 100 receives were posted must find
    /// them all. What the engine's RQ cannot take waits, in order, for the next pump.
    #[test]
    fn one_pump_moves_every_posted_receive() {
        let mut rnic = Rnic::new();
        let pd = rnic.alloc_pd();
        let ecq = rnic.create_cq(256);
        let caps = QpCaps {
            sq_depth: 4,
            rq_depth: 64,
            srq: None,
        };
        let eqp = rnic.create_qp(pd, ecq, ecq, caps).unwrap();
        let sq_seg = seg("sq3", ring::ring_bytes::<SendWqe>(4));
        let rq_seg = seg("rq3", ring::ring_bytes::<RecvWqe>(128));
        let (_app_sq, sq_c) = ring::init_segment::<SendWqe>(&sq_seg, 4).unwrap();
        let (mut app_rq, rq_c) = ring::init_segment::<RecvWqe>(&rq_seg, 128).unwrap();
        let mut qp = HostQp::new(3, eqp, sq_c, Some(rq_c));
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
        let mut qp = HostQp::new(1, eqp, sq_c, Some(rq_c));
        let mut cq = HostCq::new(ecq, cq_p, None);
        for i in 0..10 {
            app_rq.push(RecvWqe::new(i, &[]).unwrap()).unwrap();
        }
        assert_eq!(qp.pump_rq(&mut rnic).posted, 10);
        rnic.modify_qp(eqp, QpState::Error).unwrap();
        let mut none = Vec::new();
        assert_eq!(cq.drain(&mut rnic, &mut none, |_| 1).completed, 4);
        assert_eq!(
            cq.drain(&mut rnic, &mut none, |_| 1).completed,
            0,
            "ring full"
        );
        let mut ids = Vec::new();
        while ids.len() < 10 {
            while let Some(c) = app_cq.pop() {
                ids.push(c.wr_id);
            }
            cq.drain(&mut rnic, &mut none, |_| 1);
        }
        assert_eq!(
            ids,
            (0..10).collect::<Vec<u64>>(),
            "nothing lost, order kept"
        );
    }
}
