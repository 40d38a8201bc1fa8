//! The RNIC: resources and the verbs that act on them. Transmit and receive processing live
//! in `tx.rs` and `rx.rs`; this file holds what both share (completions, flushing, state).

use crate::cq::{Cq, Notify};
use crate::fifo::TakeFront;
use crate::id_index::IdIndex;
use crate::mem::MemTable;
use crate::qp::{Conn, ConnParams, Qp, QpState};
use crate::types::{
    Access, AsyncEvent, RecvWr, SendOp, SendWr, Status, VerbsError, WcOpcode, WorkCompletion,
    MAX_SGE,
};
use core::ptr::NonNull;
use iwarp_abi::id::{CqId, PdId, QpId, SrqId};
use iwarp_wire::terminate::{TermCause, TerminateRepr};
use std::collections::VecDeque;

/// Sizes a QP is created with.
#[derive(Debug, Clone, Copy)]
pub struct QpCaps {
    pub sq_depth: usize,
    pub rq_depth: usize,
    /// Take receives from this S-RQ (created with `create_srq`) instead of the QP's own RQ.
    pub srq: Option<SrqId>,
}

/// A shared receive queue (Verbs section 6.3) with its limit event.
#[derive(Debug)]
pub(crate) struct Srq {
    pub id: SrqId,
    pub pd: PdId,
    pub rq: VecDeque<RecvWr>,
    pub depth: usize,
    /// Armed limit: when fewer WRs than this remain, raise `SrqLimitReached` once.
    pub limit: Option<usize>,
}

/// One id space: the caller's ids onto the slots of a dense table. Only calls from outside
/// look an id up, once each (an index, see [`IdIndex`]); inside, a QP names its CQs and
/// S-RQ by slot.
#[derive(Debug)]
pub(crate) struct Slots<I> {
    index: IdIndex<I>,
    /// The next id an allocating create (`create_qp` rather than `create_qp_at`) tries.
    next: u32,
    /// Slots emptied by [`Slots::remove`], taken again before the table grows: a create
    /// finds its slot without walking the table, a walk that costs a cache miss per QP
    /// already there.
    free: Vec<u32>,
}

impl<I> Default for Slots<I> {
    fn default() -> Slots<I> {
        Slots {
            index: IdIndex::default(),
            next: 1,
            free: Vec::new(),
        }
    }
}

impl<I: Copy + Eq + core::hash::Hash + From<u32> + Into<u32>> Slots<I> {
    #[inline]
    pub(crate) fn get(&self, id: I) -> Option<u32> {
        self.index.get(id)
    }

    /// An id not in use, for a caller that lets the engine choose.
    fn fresh(&mut self) -> I {
        loop {
            let id = I::from(self.next);
            self.next = self.next.wrapping_add(1).max(1);
            if !self.index.contains(id) {
                return id;
            }
        }
    }

    /// Puts `item` under `id` in a free slot of `table` (one emptied before, else a new
    /// one); `None` when `id` is taken.
    fn insert<T>(&mut self, table: &mut Vec<Option<T>>, id: I, item: T) -> Option<u32> {
        if self.index.contains(id) {
            return None;
        }
        let slot = match self.free.pop() {
            Some(s) => {
                debug_assert!(table[s as usize].is_none(), "a freed slot is empty");
                table[s as usize] = Some(item);
                s
            }
            None => {
                table.push(Some(item));
                (table.len() - 1) as u32
            }
        };
        self.index.insert(id, slot);
        Some(slot)
    }

    /// Takes `id`'s item out of `table`; its slot is free for the next insert.
    fn remove<T>(&mut self, table: &mut [Option<T>], id: I) -> Option<T> {
        let slot = self.index.remove(id)?;
        self.free.push(slot);
        table[slot as usize].take()
    }
}

/// One RNIC: memory table, CQs and QPs, driven by its caller. QPs, CQs and S-RQs are named
/// by the caller's ids (the daemon passes iwarp-control's), which completions and events
/// carry back.
#[derive(Debug, Default)]
pub struct Rnic {
    pub(crate) mem: MemTable,
    pub(crate) cqs: Vec<Option<Cq>>,
    pub(crate) qps: Vec<Option<Qp>>,
    pub(crate) events: VecDeque<AsyncEvent>,
    pub(crate) srqs: Vec<Option<Srq>>,
    pub(crate) qp_slots: Slots<QpId>,
    pub(crate) cq_slots: Slots<CqId>,
    pub(crate) srq_slots: Slots<SrqId>,
    /// QPs that may have something to transmit because of a call from outside the receive
    /// path (a post, a state change), each at most once: the caller's turn visits these
    /// instead of every QP. Bytes fed to [`Rnic::handle_stream`] mark nothing, since the
    /// caller that fed them transmits for that QP in the same step.
    tx_ready: VecDeque<u32>,
    /// CQs that received completions since the caller last took them, each at most once.
    cq_ready: VecDeque<u32>,
    next_pd: u32,
    /// Error counters since creation, for the daemon's per-core statistics.
    pub stats: Stats,
}

/// What went wrong on the wire, counted (the events say where).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// FPDUs whose MPA CRC did not match (each ends its connection with a Terminate).
    pub crc_errors: u64,
    pub terminates_sent: u64,
    pub terminates_received: u64,
}

impl Rnic {
    pub fn new() -> Rnic {
        Rnic {
            mem: MemTable::new(),
            cqs: Vec::new(),
            qps: Vec::new(),
            events: VecDeque::new(),
            srqs: Vec::new(),
            qp_slots: Slots::default(),
            cq_slots: Slots::default(),
            srq_slots: Slots::default(),
            tx_ready: VecDeque::new(),
            cq_ready: VecDeque::new(),
            next_pd: 1,
            stats: Stats::default(),
        }
    }

    // ---- resources ----

    /// A protection domain for a caller without ids of its own. A PD is only a name that
    /// resources are checked against, so a caller that has ids (the daemon) passes its own
    /// and never calls this.
    pub fn alloc_pd(&mut self) -> PdId {
        let pd = self.next_pd;
        self.next_pd += 1;
        PdId(pd)
    }

    /// Registers `len` bytes at `base` in `pd` with `access`. `base_to` is the tagged offset
    /// of the first byte: its virtual address for a VA-based region, 0 for zero-based.
    /// Refused with [`VerbsError::InvalidAccess`] when `access` asks for Remote Write or
    /// Remote Atomic without Local Write (Verbs section 7.4.2, figure 18).
    ///
    /// # Safety
    /// The memory must stay valid for reads and writes until deregistered. Other processes
    /// may map it too; the engine only ever copies into it or runs atomics on it.
    pub unsafe fn register_mr(
        &mut self,
        pd: PdId,
        base: NonNull<u8>,
        len: usize,
        access: Access,
        base_to: u64,
    ) -> Result<u32, VerbsError> {
        check_region_access(access)?;
        // SAFETY: forwarded from this function's contract.
        Ok(unsafe { self.mem.register(base, len, pd, access, base_to) })
    }

    /// [`Rnic::register_mr`] under an STag the caller chose (iwarp-control allocates STags
    /// in the three-process RNIC). `InvalidStag` when it is 0 or its index is in use,
    /// `InvalidAccess` as for [`Rnic::register_mr`].
    ///
    /// # Safety
    /// As for [`Rnic::register_mr`].
    pub unsafe fn register_mr_at(
        &mut self,
        stag: u32,
        pd: PdId,
        base: NonNull<u8>,
        len: usize,
        access: Access,
        base_to: u64,
    ) -> Result<(), VerbsError> {
        check_region_access(access)?;
        // SAFETY: forwarded from this function's contract.
        let ok = unsafe { self.mem.register_at(stag, base, len, pd, access, base_to) };
        ok.then_some(()).ok_or(VerbsError::InvalidStag)
    }

    /// [`Rnic::alloc_mw`] under a caller-chosen STag.
    pub fn alloc_mw_at(&mut self, stag: u32, pd: PdId) -> Result<(), VerbsError> {
        self.mem
            .alloc_mw_at(stag, pd)
            .then_some(())
            .ok_or(VerbsError::InvalidStag)
    }

    /// [`Rnic::alloc_fastreg_stag`] under a caller-chosen STag.
    pub fn alloc_fastreg_at(&mut self, stag: u32, pd: PdId) -> Result<(), VerbsError> {
        self.mem
            .alloc_fastreg_at(stag, pd)
            .then_some(())
            .ok_or(VerbsError::InvalidStag)
    }

    /// Deregisters an MR (or frees a window or fast-register STag). Refused with
    /// [`VerbsError::StagInUse`] while windows or fast-registered STags name its memory.
    pub fn deregister_mr(&mut self, stag: u32) -> Result<(), VerbsError> {
        self.mem.deregister(stag).map_err(|e| match e {
            crate::mem::DeregError::InvalidStag => VerbsError::InvalidStag,
            crate::mem::DeregError::Bound => VerbsError::StagInUse,
        })
    }

    /// Creates a CQ of `depth` completions under an id the engine chooses.
    pub fn create_cq(&mut self, depth: usize) -> CqId {
        let id = self.cq_slots.fresh();
        self.create_cq_at(id, depth).expect("a fresh id is free");
        id
    }

    /// Creates a CQ under the caller's `id`; [`VerbsError::InvalidCq`] when it is in use.
    pub fn create_cq_at(&mut self, id: CqId, depth: usize) -> Result<(), VerbsError> {
        self.cq_slots
            .insert(&mut self.cqs, id, Cq::new(id, depth))
            .map(drop)
            .ok_or(VerbsError::InvalidCq)?;
        // Room for every CQ in the ready list now, so marking never allocates.
        let n = self.cqs.len();
        self.cq_ready.reserve(n.saturating_sub(self.cq_ready.len()));
        Ok(())
    }

    /// Destroy CQ: refused with [`VerbsError::InvalidCq`] while a QP uses it.
    pub fn destroy_cq(&mut self, id: CqId) -> Result<(), VerbsError> {
        let slot = self.cq_slots.get(id).ok_or(VerbsError::InvalidCq)?;
        if self
            .qps
            .iter()
            .flatten()
            .any(|q| q.send_cq == slot || q.recv_cq == slot)
        {
            return Err(VerbsError::InvalidCq);
        }
        self.cq_slots.remove(&mut self.cqs, id);
        Ok(())
    }

    /// Modify CQ: a new size for `cq`, refused with [`VerbsError::CqTooSmall`] while more
    /// completions wait in it than `depth` holds.
    pub fn resize_cq(&mut self, cq: CqId, depth: usize) -> Result<(), VerbsError> {
        let c = self.cq_by_id(cq).ok_or(VerbsError::InvalidCq)?;
        if c.resize(depth) {
            Ok(())
        } else {
            Err(VerbsError::CqTooSmall)
        }
    }

    /// Creates a shared receive queue in `pd` (Verbs section 6.3).
    /// Creates a shared receive queue in `pd` (Verbs section 6.3) under an id the engine
    /// chooses.
    pub fn create_srq(&mut self, pd: PdId, depth: usize) -> SrqId {
        let id = self.srq_slots.fresh();
        self.create_srq_at(id, pd, depth)
            .expect("a fresh id is free");
        id
    }

    /// Creates a shared receive queue under the caller's `id`; [`VerbsError::InvalidSrq`]
    /// when it is in use.
    pub fn create_srq_at(&mut self, id: SrqId, pd: PdId, depth: usize) -> Result<(), VerbsError> {
        let srq = Srq {
            id,
            pd,
            rq: VecDeque::with_capacity(depth),
            depth,
            limit: None,
        };
        self.srq_slots
            .insert(&mut self.srqs, id, srq)
            .map(drop)
            .ok_or(VerbsError::InvalidSrq)
    }

    /// Destroy S-RQ: refused with [`VerbsError::InvalidSrq`] while a QP takes receives from
    /// it.
    pub fn destroy_srq(&mut self, id: SrqId) -> Result<(), VerbsError> {
        let slot = self.srq_slots.get(id).ok_or(VerbsError::InvalidSrq)?;
        if self.qps.iter().flatten().any(|q| q.srq == Some(slot)) {
            return Err(VerbsError::InvalidSrq);
        }
        self.srq_slots.remove(&mut self.srqs, id);
        Ok(())
    }

    fn srq_by_id(&mut self, id: SrqId) -> Option<&mut Srq> {
        let slot = self.srq_slots.get(id)?;
        self.srqs.get_mut(slot as usize)?.as_mut()
    }

    fn cq_by_id(&mut self, id: CqId) -> Option<&mut Cq> {
        let slot = self.cq_slots.get(id)?;
        self.cqs.get_mut(slot as usize)?.as_mut()
    }

    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        let s = self.srq_by_id(srq).ok_or(VerbsError::InvalidSrq)?;
        if s.rq.len() >= s.depth {
            return Err(VerbsError::QueueFull);
        }
        s.rq.push_back(wr);
        Ok(())
    }

    /// Arms the S-RQ limit: when fewer than `limit` receives remain, `SrqLimitReached` is
    /// raised once (Modify S-RQ, Verbs section 6.3.3).
    pub fn arm_srq_limit(&mut self, srq: SrqId, limit: usize) -> Result<(), VerbsError> {
        let s = self.srq_by_id(srq).ok_or(VerbsError::InvalidSrq)?;
        s.limit = Some(limit);
        Ok(())
    }

    /// Allocates a memory window STag in `pd`, usable once bound with a Bind MW work request.
    pub fn alloc_mw(&mut self, pd: PdId) -> u32 {
        self.mem.alloc_mw(pd)
    }

    /// Reserves an STag for a Fast-Register work request.
    pub fn alloc_fastreg_stag(&mut self, pd: PdId) -> u32 {
        self.mem.alloc_fastreg(pd)
    }

    /// Creates a QP under an id the engine chooses.
    pub fn create_qp(
        &mut self,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        caps: QpCaps,
    ) -> Result<QpId, VerbsError> {
        let id = self.qp_slots.fresh();
        self.create_qp_at(id, pd, send_cq, recv_cq, caps)?;
        Ok(id)
    }

    /// Creates a QP under the caller's `id` (its QP number, which completions carry);
    /// [`VerbsError::InvalidQp`] when it is in use.
    pub fn create_qp_at(
        &mut self,
        id: QpId,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        caps: QpCaps,
    ) -> Result<(), VerbsError> {
        let cq_slot = |cq| self.cq_slots.get(cq).ok_or(VerbsError::InvalidCq);
        let (send_cq, recv_cq) = (cq_slot(send_cq)?, cq_slot(recv_cq)?);
        let srq = match caps.srq {
            Some(srq) => match self.srq_slots.get(srq) {
                Some(slot)
                    if self.srqs[slot as usize]
                        .as_ref()
                        .is_some_and(|s| s.pd == pd) =>
                {
                    Some(slot)
                }
                _ => return Err(VerbsError::InvalidSrq),
            },
            None => None,
        };
        let qp = Qp {
            id,
            pd,
            send_cq,
            recv_cq,
            state: QpState::Idle,
            sq: VecDeque::with_capacity(caps.sq_depth),
            tx_wr: None,
            sq_depth: caps.sq_depth,
            rq: VecDeque::with_capacity(caps.rq_depth),
            rq_depth: caps.rq_depth,
            inflight: VecDeque::with_capacity(caps.sq_depth),
            next_seq: 0,
            conn: None,
            closing: false,
            tx_queued: false,
            srq,
        };
        self.qp_slots
            .insert(&mut self.qps, id, qp)
            .map(drop)
            .ok_or(VerbsError::InvalidQp)?;
        // Room for every QP in the ready list now, so marking never allocates.
        let n = self.qps.len();
        self.tx_ready.reserve(n.saturating_sub(self.tx_ready.len()));
        Ok(())
    }

    /// The slot of QP `id`, the index every call from outside starts from.
    pub(crate) fn qp_slot(&self, id: QpId) -> Result<u32, VerbsError> {
        self.qp_slots.get(id).ok_or(VerbsError::InvalidQp)
    }

    /// Whether Destroy QP would be accepted, without doing it: [`VerbsError::StagInUse`] while
    /// memory windows bound on it are valid (Verbs section 6.1.4). A caller that tears down
    /// the QP's connection first asks this before touching anything.
    pub fn can_destroy_qp(&self, qp: QpId) -> Result<(), VerbsError> {
        self.qp_slot(qp)?;
        if self.mem.windows_bound_to(qp) {
            return Err(VerbsError::StagInUse);
        }
        Ok(())
    }

    /// Destroy QP. Refused as [`Rnic::can_destroy_qp`] says, leaving the QP as it was;
    /// otherwise its outstanding work is flushed first.
    pub fn destroy_qp(&mut self, id: QpId) -> Result<(), VerbsError> {
        self.can_destroy_qp(id)?;
        let qp = self.qp_slot(id)?;
        self.enter_error(qp, None);
        self.qp_slots.remove(&mut self.qps, id);
        Ok(())
    }

    pub(crate) fn cq(&self, cq: u32) -> Option<&Cq> {
        self.cqs.get(cq as usize)?.as_ref()
    }

    pub(crate) fn qp_mut(&mut self, qp: u32) -> Result<&mut Qp, VerbsError> {
        self.qps
            .get_mut(qp as usize)
            .and_then(Option::as_mut)
            .ok_or(VerbsError::InvalidQp)
    }

    /// Completions waiting in a CQ, and whether it ever overflowed.
    pub fn cq_status(&self, cq: CqId) -> Option<(usize, bool)> {
        self.cq(self.cq_slots.get(cq)?)
            .map(|c| (c.len(), c.overflowed()))
    }

    pub fn qp_state(&self, qp: QpId) -> Option<QpState> {
        self.state_of(self.qp_slots.get(qp)?)
    }

    /// QP `qp`'s slot in the table, without reading what it holds (`None` in the slot: a QP
    /// destroyed since its id was handed out).
    pub(crate) fn qp_entry(&self, qp: QpId) -> Option<&Option<Qp>> {
        self.qps.get(self.qp_slots.get(qp)? as usize)
    }

    pub(crate) fn state_of(&self, qp: u32) -> Option<QpState> {
        Some(self.qps.get(qp as usize)?.as_ref()?.state)
    }

    /// Asks the cache for QP `qp`'s state, which the caller is about to hand bytes to or
    /// take FPDUs from (see `iwarp_abi::prefetch`). Reads only the slot table, which is
    /// small and stays cached: the QP's own lines are not read here, or their miss would be
    /// paid now.
    pub fn prefetch_qp(&self, qp: QpId) {
        if let Some(q) = self.qp_entry(qp) {
            iwarp_abi::prefetch::prefetch(q);
        }
    }

    /// Asks the cache for the oldest WR on QP `qp`'s SQ, which its next transmit reads first.
    /// Reads the QP's own lines to find it: call it once those were asked for
    /// ([`Rnic::prefetch_qp`]) a while before.
    pub fn prefetch_sq_head(&self, qp: QpId) {
        let q = self.qp_entry(qp).and_then(Option::as_ref);
        if let Some(wr) = q.and_then(|q| q.sq.front()) {
            iwarp_abi::prefetch::prefetch(wr);
        }
    }

    // ---- ready lists ----

    /// The next QP marked as possibly having something to transmit, or whose state changed
    /// (a post, Modify QP, an error), in marking order; each QP is listed once however often
    /// it was marked. A QP that only received bytes is not listed: its caller transmits for
    /// it after feeding them. A listed QP may turn out to have nothing to send, and one
    /// destroyed since it was marked is listed too (it has no state).
    pub fn next_tx_ready(&mut self) -> Option<QpId> {
        loop {
            let slot = self.tx_ready.take_front()?;
            // A slot freed since it was marked is skipped; one reused since lists its new QP
            // once more than needed, which costs a visit and nothing else.
            if let Ok(q) = self.qp_mut(slot) {
                q.tx_queued = false;
                return Some(q.id);
            }
        }
    }

    pub(crate) fn mark_tx(&mut self, qp: u32) {
        if let Some(Some(q)) = self.qps.get_mut(qp as usize) {
            if !q.tx_queued {
                q.tx_queued = true;
                self.tx_ready.push_back(qp);
            }
        }
    }

    /// The next CQ that received completions since it was last taken from this list (each
    /// listed once). A caller that leaves completions in it marks it again
    /// ([`Rnic::mark_cq`]), so that every CQ holding completions is listed.
    pub fn next_cq_ready(&mut self) -> Option<CqId> {
        loop {
            let slot = self.cq_ready.take_front()?;
            if let Some(Some(c)) = self.cqs.get_mut(slot as usize) {
                c.queued = false;
                return Some(c.id);
            }
        }
    }

    /// Lists `cq` among the CQs with completions (see [`Rnic::next_cq_ready`]).
    pub fn mark_cq(&mut self, cq: CqId) {
        let Some(slot) = self.cq_slots.get(cq) else {
            return;
        };
        if let Some(Some(c)) = self.cqs.get_mut(slot as usize) {
            if !c.queued {
                c.queued = true;
                self.cq_ready.push_back(slot);
            }
        }
    }

    /// Whether any CQ is listed as holding completions.
    pub fn cqs_ready(&self) -> bool {
        !self.cq_ready.is_empty()
    }

    // ---- connection ----

    /// Idle -> RTS with what MPA negotiation agreed (the connection's byte stream now
    /// belongs to this QP).
    pub fn connect(&mut self, qp: QpId, params: ConnParams) -> Result<(), VerbsError> {
        let qp = self.qp_slot(qp)?;
        let q = self.qp_mut(qp)?;
        if q.state != QpState::Idle {
            return Err(VerbsError::InvalidQpState);
        }
        q.conn = Some(Conn::new(params));
        q.state = QpState::Rts;
        self.mark_tx(qp);
        Ok(())
    }

    /// Modify QP to a new state, as the consumer may (Verbs section 6.2): only the
    /// transitions of [`QpState::modify_allowed`]; anything else is an immediate error that
    /// leaves the QP as it was (section 8.3.1). Idle -> RTS needs the LLP stream (section
    /// 6.2.1.2): that is [`Rnic::connect`].
    pub fn modify_qp(&mut self, qp: QpId, to: QpState) -> Result<(), VerbsError> {
        let qp = self.qp_slot(qp)?;
        let from = self.qp_mut(qp)?.state;
        if !from.modify_allowed(to) {
            return Err(VerbsError::InvalidModify);
        }
        self.mark_tx(qp);
        match to {
            // Idle -> Idle and RTS -> RTS change attributes; this call carries none.
            _ if from == to => {}
            QpState::Error => self.enter_error(qp, None),
            QpState::Terminate => self.terminate(
                qp,
                iwarp_wire::terminate::RDMAP_OPERATION_UNSPECIFIED,
                &[],
                0,
            ),
            QpState::Closing => {
                let q = self.qp_mut(qp)?;
                q.state = QpState::Closing;
                q.closing = true;
                self.try_finish_close(qp);
            }
            QpState::Idle => {
                // Error -> Idle: everything was flushed on entering Error.
                let q = self.qp_mut(qp)?;
                q.state = QpState::Idle;
                q.conn = None;
            }
            QpState::Rts => unreachable!("refused above"),
        }
        Ok(())
    }

    /// The RI's own move to Error, for a reason outside Modify QP (the QP is being
    /// destroyed, its rings are corrupt): allowed from every state, Closing and Terminate
    /// included, with every outstanding WR flushed (Verbs section 6.2.4).
    pub fn force_error(&mut self, qp: QpId) -> Result<(), VerbsError> {
        let qp = self.qp_slot(qp)?;
        self.enter_error(qp, None);
        self.mark_tx(qp);
        Ok(())
    }

    /// The TCP connection under the QP is gone (closed by the peer, reset, or lost), or,
    /// with `graceful`, the peer closed its half (FIN) and everything before it was read.
    ///
    /// A graceful close in RTS follows Verbs section 6.2.2.2: with every SQ WR and every
    /// Remote RDMA Read done the QP moves to Closing, and from there to Idle as section
    /// 6.2.5 says (its receives flushed; a message half received can no longer complete,
    /// so then it goes to Error instead); with work outstanding it moves to Terminate
    /// (section 6.2.2.3), sending a Terminate, and then to Error. Either way an affiliated
    /// asynchronous event reports it.
    pub fn connection_lost(&mut self, id: QpId, graceful: bool) {
        let Ok(qp) = self.qp_slot(id) else { return };
        let Ok(q) = self.qp_mut(qp) else { return };
        let state = q.state;
        if graceful && state == QpState::Rts {
            let done = q.sq.is_empty()
                && q.inflight.is_empty()
                && q.conn
                    .as_ref()
                    .is_none_or(|c| c.cur.is_none() && c.orq.is_empty() && c.irq.is_empty());
            self.events
                .push_back(AsyncEvent::ConnectionClosed { qp: id });
            if done {
                let q = self.qp_mut(qp).expect("looked up above");
                q.state = QpState::Closing;
                q.closing = true;
                self.try_finish_close(qp);
                if self.state_of(qp) == Some(QpState::Closing) {
                    self.enter_error(qp, None);
                }
            } else {
                // RFC 5040 section 7.2: the stream ends for a reason local to this RNIC.
                self.terminate(qp, iwarp_wire::terminate::RDMAP_LOCAL_CATASTROPHIC, &[], 0);
            }
            return;
        }
        if graceful && state == QpState::Closing {
            self.try_finish_close(qp);
            if self.state_of(qp) == Some(QpState::Closing) {
                self.enter_error(qp, None);
            }
            return;
        }
        if matches!(state, QpState::Rts | QpState::Closing | QpState::Terminate) {
            if graceful {
                self.events
                    .push_back(AsyncEvent::ConnectionClosed { qp: id });
            }
            self.enter_error(qp, Some(Status::LlpError).filter(|_| !graceful));
        }
    }

    pub(crate) fn try_finish_close(&mut self, qp: u32) {
        let Ok(q) = self.qp_mut(qp) else { return };
        let idle = q.sq.is_empty()
            && q.inflight.is_empty()
            && q.conn.as_ref().is_none_or(|c| {
                c.cur.is_none() && c.orq.is_empty() && c.irq.is_empty() && c.rx_recv.is_none()
            });
        if q.state == QpState::Closing && q.closing && idle {
            // Verbs section 6.2.5: Closing -> Idle once the SQ, the outstanding Reads and any
            // message being received are done; receives still posted are flushed.
            q.closing = false;
            q.state = QpState::Idle;
            q.conn = None;
            self.flush_rq(qp, None);
            self.mark_tx(qp);
        }
    }

    // ---- work requests ----

    /// Post Send (Verbs section 9.3.1.1). Its immediate errors leave the QP as it was
    /// (section 8.3.1): a malformed WR (too many SGEs, inline data where none may go, an
    /// operation not negotiated), a local STag the WR cannot use, a full SQ. An accepted WR
    /// meets the QP's state as figures 7 to 11 say: enqueued in Idle (run once in RTS), RTS
    /// and Terminate (flushed when Error follows), enqueued and flushed with the QP moved to
    /// Error in Closing, flushed at once in Error.
    pub fn post_send(&mut self, qp: QpId, wr: SendWr) -> Result<(), VerbsError> {
        if wr.num_sge as usize > MAX_SGE {
            return Err(VerbsError::TooManySge);
        }
        let qp = self.qp_slot(qp)?;
        let q = self.qp_mut(qp)?;
        let (pd, version) = (q.pd, q.conn.as_ref().map_or(1, |c| c.params.rdmap_version));
        self.check_send_wr(pd, version, &wr)?;
        self.enqueue_send(qp, wr)
    }

    /// Post Send of a WR that cannot run, for a caller that can no longer return an
    /// immediate error: the daemon's fast path, whose application got its answer when it
    /// wrote the WR to its ring. `wr` is what [`Rnic::post_send`] refused, or a stand-in
    /// with the WR's id and operation when the entry could not be decoded. It takes its
    /// place in the SQ like any WR and, in its turn, once every WR before it completed,
    /// completes with `status`; that moves the QP to Error and flushes the WRs behind it
    /// (Verbs sections 8.2.2 rule 2 and 8.3.2, figure 23). So completions leave the SQ in
    /// posting order whatever failed. Refused only with `QueueFull` (post it again later)
    /// or `InvalidQp`.
    pub fn post_send_failed(
        &mut self,
        qp: QpId,
        mut wr: SendWr,
        status: Status,
    ) -> Result<(), VerbsError> {
        wr.refused = Some(status);
        self.enqueue_send(self.qp_slot(qp)?, wr)
    }

    fn enqueue_send(&mut self, qp: u32, wr: SendWr) -> Result<(), VerbsError> {
        let q = self.qp_mut(qp)?;
        if q.state == QpState::Error {
            // Figure 10: posted in Error, a WR is enqueued and flushed. Everything posted
            // before was flushed on entry to Error, so this completion keeps the order.
            let (cq, qpn) = (q.send_cq, q.id);
            self.complete_now(cq, qpn, &wr, Status::WrFlushed);
            return Ok(());
        }
        if q.sq.len() + q.inflight.len() >= q.sq_depth {
            return Err(VerbsError::QueueFull);
        }
        q.sq.push_back(wr);
        self.mark_tx(qp);
        let Ok(q) = self.qp_mut(qp) else {
            return Ok(());
        };
        if q.state == QpState::Closing {
            // Figure 11, PostSQ in Closing: enqueue and flush, reset the stream, "Bad Close"
            // event, Error. The flush completes the WRs before this one first.
            self.enter_error(qp, None);
        }
        Ok(())
    }

    fn check_send_wr(&self, pd: PdId, version: u8, wr: &SendWr) -> Result<(), VerbsError> {
        if wr.is_inline
            && (!matches!(
                wr.op,
                SendOp::Send { .. } | SendOp::Write { .. } | SendOp::SendImm { .. }
            ) || wr.inline_len as usize > crate::types::MAX_INLINE)
        {
            return Err(VerbsError::InvalidInline);
        }
        match wr.op {
            SendOp::SendImm { .. } | SendOp::ReadV2 { .. } if version < 2 => {
                return Err(VerbsError::NotNegotiated);
            }
            // A zero-length Read is a fence (Verbs section 8.2.2.2): it places nothing, so a
            // sink, if it names one, is not checked.
            SendOp::Read { .. } | SendOp::ReadV2 { .. } if wr.length() == 0 && wr.num_sge <= 1 => {}
            SendOp::ReadV2 { .. } => {
                let [sge] = wr.sgl() else {
                    return Err(VerbsError::TooManySge);
                };
                // The sink stays private: local write is enough.
                self.mem
                    .resolve(
                        sge.stag,
                        pd,
                        Access::LOCAL_WRITE,
                        sge.to,
                        sge.len as u64,
                        false,
                    )
                    .map_err(|_| VerbsError::InvalidStag)?;
            }
            SendOp::Read { .. } => {
                let [sge] = wr.sgl() else {
                    return Err(VerbsError::TooManySge);
                };
                // The sink is advertised to the peer, which writes the Read Response into it.
                self.mem
                    .resolve(
                        sge.stag,
                        pd,
                        Access::REMOTE_WRITE,
                        sge.to,
                        sge.len as u64,
                        false,
                    )
                    .map_err(|e| match e {
                        crate::mem::AccessError::Rights => VerbsError::ReadSinkNeedsRemoteWrite,
                        _ => VerbsError::InvalidStag,
                    })?;
            }
            SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. } => {
                let [sge] = wr.sgl() else {
                    return Err(VerbsError::InvalidAtomicSge);
                };
                if sge.len != 8 {
                    return Err(VerbsError::InvalidAtomicSge);
                }
                self.mem
                    .resolve(sge.stag, pd, Access::LOCAL_WRITE, sge.to, 8, true)
                    .map_err(|_| VerbsError::InvalidAtomicSge)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Post Receive (Verbs section 9.3.1.2). Immediate error: too many SGEs, a full RQ.
    /// An accepted WR meets the QP's state as figures 7 to 11 say: enqueued in Idle, RTS and
    /// Terminate, enqueued and flushed in Closing and Error. Local STags are checked when a
    /// message is placed (a completion error then, figure 23).
    pub fn post_recv(&mut self, qp: QpId, wr: RecvWr) -> Result<(), VerbsError> {
        if wr.num_sge as usize > MAX_SGE {
            return Err(VerbsError::TooManySge);
        }
        self.enqueue_recv(self.qp_slot(qp)?, wr)
    }

    /// Post Receive of a WR that cannot be used (it could not be decoded), for a caller that
    /// can no longer return an immediate error (see [`Rnic::post_send_failed`]). It waits
    /// in the RQ like any receive; the message that consumes it completes it with `status`
    /// and ends the stream with a Terminate (figure 23, "Invalid WQE format"). Refused only
    /// with `QueueFull` or `InvalidQp`.
    pub fn post_recv_failed(
        &mut self,
        qp: QpId,
        mut wr: RecvWr,
        status: Status,
    ) -> Result<(), VerbsError> {
        wr.refused = Some(status);
        self.enqueue_recv(self.qp_slot(qp)?, wr)
    }

    /// [`Rnic::post_recv_failed`] for an S-RQ: the QP whose message consumes it completes it.
    pub fn post_srq_recv_failed(
        &mut self,
        srq: SrqId,
        mut wr: RecvWr,
        status: Status,
    ) -> Result<(), VerbsError> {
        wr.refused = Some(status);
        self.post_srq_recv(srq, wr)
    }

    fn enqueue_recv(&mut self, qp: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let q = self.qp_mut(qp)?;
        if q.state == QpState::Error {
            let (cq, qpn) = (q.recv_cq, q.id);
            self.push_wc(
                cq,
                WorkCompletion::new(wr.wr_id, qpn, WcOpcode::Recv, Status::WrFlushed, 0),
            );
            return Ok(());
        }
        if q.rq.len() >= q.rq_depth {
            return Err(VerbsError::QueueFull);
        }
        q.rq.push_back(wr);
        // Figure 11, PostRQ in Closing: enqueue and flush (section 6.2.5: the RQ is flushed
        // during Closing), the QP stays in Closing. Flushed behind the receives posted
        // before it; a receive a message is still filling keeps its place at the head.
        let filling = q.conn.as_ref().is_some_and(|c| c.rx_recv.is_some());
        if q.state == QpState::Closing && !filling {
            self.flush_rq(qp, None);
        }
        Ok(())
    }

    pub fn poll_cq(&mut self, cq: CqId, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        let c = self.cq_by_id(cq).ok_or(VerbsError::InvalidCq)?;
        Ok(c.poll(out))
    }

    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<(), VerbsError> {
        let c = self.cq_by_id(cq).ok_or(VerbsError::InvalidCq)?;
        c.arm(if solicited_only {
            Notify::Solicited
        } else {
            Notify::NextCompletion
        });
        Ok(())
    }

    /// Whether a requested completion notification fired since the last call.
    pub fn take_cq_event(&mut self, cq: CqId) -> bool {
        self.cq_by_id(cq).is_some_and(Cq::take_event)
    }

    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.take_front()
    }

    // ---- completions ----

    pub(crate) fn push_wc(&mut self, cq: u32, wc: WorkCompletion) {
        let Some(c) = self.cqs.get_mut(cq as usize).and_then(Option::as_mut) else {
            return;
        };
        let pushed = c.push(wc);
        if !c.queued {
            c.queued = true;
            self.cq_ready.push_back(cq);
        }
        if !pushed && !c.overflowed_reported() {
            c.set_overflow_reported();
            self.events.push_back(AsyncEvent::CqOverflow { cq: c.id });
            // The completions are lost: every QP using the CQ is in error (Verbs 8.3.3).
            let victims: Vec<u32> = self
                .qps
                .iter()
                .enumerate()
                .filter_map(|(slot, q)| Some((slot as u32, q.as_ref()?)))
                .filter(|(_, q)| q.send_cq == cq || q.recv_cq == cq)
                .map(|(slot, _)| slot)
                .collect();
            for v in victims {
                self.enter_error(v, None);
            }
        }
    }

    fn complete_now(&mut self, cq: u32, qp: QpId, wr: &SendWr, status: Status) {
        self.push_wc(
            cq,
            WorkCompletion {
                wr_id: wr.wr_id,
                qp,
                opcode: wc_opcode(&wr.op),
                status,
                byte_len: 0,
                imm: None,
                invalidated_stag: None,
                solicited: false,
            },
        );
    }

    /// Marks an in-flight SQ WR done and releases completions in SQ order.
    pub(crate) fn finish_wr(&mut self, qp: u32, seq: u64, status: Status, byte_len: u32) {
        let Ok(q) = self.qp_mut(qp) else { return };
        if let Some(i) = q.inflight.iter_mut().find(|i| i.seq == seq) {
            i.done = Some((status, byte_len));
        }
        let (cq, id) = (q.send_cq, q.id);
        // Release completed WRs from the head, in SQ order (no allocation on this path).
        loop {
            let Ok(q) = self.qp_mut(qp) else { return };
            if q.inflight.front().is_none_or(|i| i.done.is_none()) {
                break;
            }
            let Some(i) = q.inflight.take_front() else {
                break;
            };
            let (status, byte_len) = i.done.unwrap_or((Status::WrFlushed, 0));
            if i.signaled || status != Status::Success {
                self.push_wc(
                    cq,
                    WorkCompletion {
                        wr_id: i.wr_id,
                        qp: id,
                        opcode: i.opcode,
                        status,
                        byte_len,
                        imm: None,
                        invalidated_stag: None,
                        solicited: false,
                    },
                );
            }
        }
        if status != Status::Success && status != Status::WrFlushed {
            self.local_error(qp);
        }
        self.try_finish_close(qp);
    }

    /// A local work request failed (its completion carries the error): the stream ends with
    /// a Terminate, "local catastrophic error" (Verbs figure 23 and section 8.3.2), and the
    /// QP enters Error once it is sent, flushing the rest. Without a stream, straight to
    /// Error.
    pub(crate) fn local_error(&mut self, qp: u32) {
        let Ok(q) = self.qp_mut(qp) else { return };
        if q.conn.is_some() && matches!(q.state, QpState::Rts | QpState::Closing) {
            self.terminate(qp, iwarp_wire::terminate::RDMAP_LOCAL_CATASTROPHIC, &[], 0);
        } else {
            self.enter_error(qp, None);
        }
    }

    /// Moves the QP to Error: every outstanding WR completes, the first with `first` if
    /// given (the cause), the rest with the flush status (Verbs section 6.2.4).
    pub(crate) fn enter_error(&mut self, qp: u32, first: Option<Status>) {
        let Ok(q) = self.qp_mut(qp) else { return };
        if q.state == QpState::Error {
            return;
        }
        let was_idle = q.state == QpState::Idle;
        q.state = QpState::Error;
        self.mark_tx(qp);
        let Ok(q) = self.qp_mut(qp) else { return };
        q.closing = false;
        let (cq, id) = (q.send_cq, q.id);
        // The queues are taken whole and given back empty below: flushing allocates nothing,
        // and the QP keeps their capacity.
        let mut inflight = std::mem::take(&mut q.inflight);
        let mut pending = std::mem::take(&mut q.sq);
        // A receive a Send was being placed into is outstanding too, ahead of the RQ.
        let partial = q.conn.take().and_then(|c| c.rx_recv);
        let recv_cq = q.recv_cq;
        let mut first = first;
        for i in inflight.drain(..) {
            // An unsignaled WR that already succeeded stays silent; everything else
            // completes, flushed ones with the flush status whatever their signaling.
            if !i.signaled && matches!(i.done, Some((Status::Success, _))) {
                continue;
            }
            let status = match i.done {
                Some((s, _)) => s,
                None => first.take().unwrap_or(Status::WrFlushed),
            };
            self.push_wc(
                cq,
                WorkCompletion {
                    wr_id: i.wr_id,
                    qp: id,
                    opcode: i.opcode,
                    status,
                    byte_len: i.done.map_or(0, |d| d.1),
                    imm: None,
                    invalidated_stag: None,
                    solicited: false,
                },
            );
        }
        for wr in pending.drain(..) {
            self.complete_now(cq, id, &wr, Status::WrFlushed);
        }
        if let Ok(q) = self.qp_mut(qp) {
            q.inflight = inflight;
            q.sq = pending;
        }
        if let Some(rx) = partial {
            self.push_wc(
                recv_cq,
                WorkCompletion::new(rx.wr.wr_id, id, WcOpcode::Recv, Status::WrFlushed, 0),
            );
        }
        self.flush_rq(qp, None);
        if !was_idle {
            self.events.push_back(AsyncEvent::QpError { qp: id });
        }
    }

    pub(crate) fn flush_rq(&mut self, qp: u32, first: Option<Status>) {
        let Ok(q) = self.qp_mut(qp) else { return };
        let (cq, id) = (q.recv_cq, q.id);
        let mut rq = std::mem::take(&mut q.rq);
        let mut first = first;
        for wr in rq.drain(..) {
            self.push_wc(
                cq,
                WorkCompletion::new(
                    wr.wr_id,
                    id,
                    WcOpcode::Recv,
                    first.take().unwrap_or(Status::WrFlushed),
                    0,
                ),
            );
        }
        if let Ok(q) = self.qp_mut(qp) {
            q.rq = rq;
        }
    }

    /// Stops the stream because of what the peer sent (or a local catastrophe): queue a
    /// Terminate carrying `cause` and the offending headers, enter the Terminate state, and
    /// stop processing input. The Terminate goes out on the next `poll_transmit`, after which
    /// the QP enters Error (RFC 5040 section 7.1; Verbs figure 4).
    pub(crate) fn terminate(&mut self, qp: u32, cause: TermCause, ulpdu: &[u8], header_len: usize) {
        let Ok(q) = self.qp_mut(qp) else { return };
        let Some(conn) = q.conn.as_mut() else { return };
        if conn.terminate.is_some() {
            return;
        }
        let mut t = TerminateRepr::new(cause);
        if header_len > 0 && ulpdu.len() >= header_len {
            let tagged = ulpdu[0] & 0x80 != 0;
            let ddp_len = if tagged { 14 } else { 18 };
            t.ddp_segment_length = Some(ulpdu.len() as u16);
            t.ddp_header = iwarp_wire::terminate::CopiedHeader::new(&ulpdu[..ddp_len]);
            // The Terminated RDMA Header is the Read Request's only (RFC 5040 section 4.8);
            // for the RFC 7306 messages it is left out (RFC 7306 section 8.1).
            let read_request = !tagged
                && matches!(
                    iwarp_wire::rdmap::parse_control(ulpdu[1]),
                    Ok((_, iwarp_wire::rdmap::Opcode::ReadRequest))
                );
            if cause.layer == iwarp_wire::Layer::Rdmap && header_len > ddp_len && read_request {
                t.rdmap_header =
                    iwarp_wire::terminate::CopiedHeader::new(&ulpdu[ddp_len..header_len]);
            }
        }
        conn.terminate = Some(t);
        q.state = QpState::Terminate;
        let id = q.id;
        self.mark_tx(qp);
        self.events
            .push_back(AsyncEvent::TerminateSent { qp: id, cause });
        self.stats.terminates_sent += 1;
    }
}

impl Cq {
    fn overflowed_reported(&self) -> bool {
        self.overflow_reported
    }
    fn set_overflow_reported(&mut self) {
        self.overflow_reported = true;
    }
}

pub(crate) fn wc_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send { .. } => WcOpcode::Send,
        SendOp::Write { .. } | SendOp::WriteImm { .. } => WcOpcode::Write,
        SendOp::Read { .. } => WcOpcode::Read,
        SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        SendOp::CmpSwap { .. } => WcOpcode::CmpSwap,
        SendOp::Immediate { .. } => WcOpcode::Immediate,
        SendOp::LocalInvalidate { .. } => WcOpcode::LocalInv,
        SendOp::SendImm { .. } => WcOpcode::Send,
        SendOp::ReadV2 { .. } => WcOpcode::Read,
        SendOp::BindMw { .. } => WcOpcode::BindMw,
        SendOp::FastRegister { .. } => WcOpcode::FastReg,
    }
}

/// Register MR's rule on rights (Verbs section 7.4.2, figure 18): "The RI MUST NOT allow the
/// Consumer to assign Remote Write to an MR that has not been assigned Local Write"; the
/// atomics write too, so Remote Atomic needs Local Write as well. Local Read is always held.
fn check_region_access(access: Access) -> Result<(), VerbsError> {
    let writes = Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0;
    if access.0 & !Access::ALL.0 != 0
        || (access.0 & writes != 0 && !access.contains(Access::LOCAL_WRITE))
    {
        return Err(VerbsError::InvalidAccess);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Destroyed QPs' and CQs' slots serve the next creates, so a table holds as many slots
    /// as were ever live at once, and every id still finds its own.
    #[test]
    fn freed_slots_serve_the_next_creates() {
        let mut rnic = Rnic::new();
        let pd = rnic.alloc_pd();
        let cq = rnic.create_cq(64);
        let caps = QpCaps {
            sq_depth: 1,
            rq_depth: 1,
            srq: None,
        };
        let mut live: Vec<QpId> = (0..1000)
            .map(|_| rnic.create_qp(pd, cq, cq, caps).unwrap())
            .collect();
        let gone: Vec<QpId> = live.iter().copied().skip(1).step_by(2).collect();
        for &qp in &gone {
            rnic.destroy_qp(qp).unwrap();
        }
        live.retain(|qp| !gone.contains(qp));
        for _ in 0..500 {
            live.push(rnic.create_qp(pd, cq, cq, caps).unwrap());
        }
        assert_eq!(rnic.qps.len(), 1000, "no slot added while one was free");
        assert!(rnic.qps.iter().all(Option::is_some));
        for &qp in &live {
            let slot = rnic.qp_slot(qp).unwrap();
            assert_eq!(rnic.qps[slot as usize].as_ref().map(|q| q.id), Some(qp));
        }
        for &qp in &gone {
            assert!(live.contains(&qp) || rnic.qp_slot(qp).is_err());
        }
        // CQs share the scheme.
        let extra: Vec<CqId> = (0..3).map(|_| rnic.create_cq(4)).collect();
        rnic.destroy_cq(extra[1]).unwrap();
        let again = rnic.create_cq(4);
        assert_eq!(rnic.cqs.len(), 4);
        assert_eq!(rnic.cq_slots.get(again), Some(2));
        assert_eq!(rnic.cq_slots.get(extra[1]), None);
    }
}
