//! Queue pairs: the send and receive rings of one connection, written here and read by the
//! daemon. A doorbell is the release store of the ring's producer index; a [`PostBatch`]
//! writes many work requests and rings it once.

use crate::bell::BellSlot;
use crate::cq::{CompletionQueue, QpTracker};
use crate::error::Error;
use crate::link::Release;
use crate::srq::SharedReceiveQueue;
use crate::wr::{sgl, RecvWr, Regions, Sg, Sgl};
use iwarp_abi::id::{QpId, Stag};
use iwarp_abi::ring::Producer;
use iwarp_abi::wake::Waker;
use iwarp_abi::wqe::{send_flags, RecvWqe, SendOpcode, SendWqe, MAX_INLINE, MAX_SGE};
use std::sync::{Arc, Mutex};

/// What a send work request does (Verbs section 8.2.2, RFC 7306 for atomics and Immediate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOpcode {
    Send,
    /// Send with Invalidate of the peer's STag (RFC 5040 section 6.10).
    SendWithInvalidate {
        stag: Stag,
    },
    /// Send with Immediate (RDMAP version 2 draft); `imm` in the low 32 bits.
    SendWithImm {
        imm: u32,
    },
    RdmaWrite {
        rkey: Stag,
        remote_addr: u64,
    },
    /// RDMA Write followed by Immediate Data (RFC 7306 section 6).
    RdmaWriteWithImm {
        rkey: Stag,
        remote_addr: u64,
        imm: u64,
    },
    /// RDMA Read into the local SGE; on iWARP the sink region needs remote write access
    /// (RFC 5040 places a Read Response as a tagged write).
    RdmaRead {
        rkey: Stag,
        remote_addr: u64,
    },
    /// RFC 7306 Fetch and Add; the original value lands in the single 8-octet SGE.
    FetchAdd {
        rkey: Stag,
        remote_addr: u64,
        add: u64,
    },
    /// RFC 7306 Compare and Swap; the original value lands in the single 8-octet SGE.
    CmpSwap {
        rkey: Stag,
        remote_addr: u64,
        compare: u64,
        swap: u64,
    },
    /// Immediate Data alone (RFC 7306 section 6).
    Immediate {
        imm: u64,
    },
    /// Bind Memory Window (Verbs section 7.3.3): window `mw` (the STag of a
    /// [`crate::MemoryWindow`]) covers `len` octets at tagged offset `to` of
    /// region `mr` (its STag; the region needs the bind right) with `access` rights.
    BindMw {
        mw: Stag,
        mr: Stag,
        to: u64,
        len: u64,
        access: u32,
    },
    /// Local Invalidate (Verbs section 7.3.5) of a window or fast-registered STag.
    LocalInvalidate {
        stag: Stag,
    },
    /// Fast-Register (Verbs section 7.3.4): `stag` (a [`crate::FastRegStag`]) names `len`
    /// octets at `offset` of region `mr` (its STag, same PD) with `access` rights, tagged
    /// offsets from 0 at its first octet. Valid until invalidated.
    FastRegister {
        stag: Stag,
        mr: Stag,
        offset: u64,
        len: u64,
        access: u32,
    },
}

/// A send work request.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub sg_list: &'a [Sg<'a>],
    /// Payload copied into the WQE instead of the SGL (at most the QP's `max_inline`).
    pub inline: Option<&'a [u8]>,
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
}

impl<'a> SendWr<'a> {
    pub fn new(wr_id: u64, opcode: WrOpcode, sg_list: &'a [Sg<'a>]) -> SendWr<'a> {
        SendWr {
            wr_id,
            opcode,
            sg_list,
            inline: None,
            signaled: true,
            solicited: false,
            fence: false,
        }
    }
}

/// A queue pair (Verbs section 7.3). Keeps its completion queues alive.
pub struct QueuePair {
    /// Destroys the QP in control when dropped (before its rings are unmapped and its CQs
    /// released).
    release: Option<Release>,
    /// The S-RQ it takes receives from, kept alive (destroyed after the QP).
    srq: Option<Arc<SharedReceiveQueue>>,
    qp_num: QpId,
    sq: Mutex<Producer<SendWqe>>,
    rq: Option<Mutex<Producer<RecvWqe>>>,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    max_sge: usize,
    max_inline: usize,
    /// The SQ and RQ depths the QP was created with: posted work beyond them is refused even
    /// where the rings (a power of two slots) would take more.
    sq_depth: usize,
    rq_depth: usize,
    tracker: Arc<QpTracker>,
    /// Rings iwarpd after a post when its poll loop sleeps.
    waker: Option<Arc<Waker>>,
    /// Lists the QP for the daemon after a post to its SQ, and to its RQ when the RQ has no
    /// slot of its own; given back after the QP is destroyed (fields drop after
    /// `Drop::drop` released it).
    bell: Option<BellSlot>,
    /// Lists the RQ alone after a receive is posted, so that the daemon reads the RQ's ring
    /// only when it was posted to (a line the application writes, met cold).
    rq_bell: Option<BellSlot>,
    /// The storage of the last batch, emptied, for the next one: a batch (and so each Post
    /// Send) allocates only when it outgrows every batch before it.
    spare: Mutex<BatchStorage>,
}

/// What a [`PostBatch`] collects: the encoded WQEs, and each request's id and regions.
#[derive(Default)]
struct BatchStorage {
    wqes: Vec<SendWqe>,
    mrs: Vec<(u64, Regions)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl core::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &self.qp_num)
            .field("send_cq", &self.send_cq.cq_num())
            .field("recv_cq", &self.recv_cq.cq_num())
            .field("srq", &self.srq.as_ref().map(|s| s.srq_num()))
            .finish_non_exhaustive()
    }
}

impl QueuePair {
    /// A QP over the writing ends of its SQ and RQ rings (`rq` is `None` with an S-RQ).
    pub fn from_rings(
        qp_num: QpId,
        sq: Producer<SendWqe>,
        rq: Option<Producer<RecvWqe>>,
        send_cq: Arc<CompletionQueue>,
        recv_cq: Arc<CompletionQueue>,
        max_sge: usize,
        max_inline: usize,
    ) -> QueuePair {
        QueuePair::with_tracker(
            qp_num,
            sq,
            rq,
            send_cq,
            recv_cq,
            max_sge,
            max_inline,
            Arc::new(QpTracker::default()),
        )
    }

    /// A QP whose receives come from `srq` (its outstanding receives are the S-RQ's).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn with_srq(
        qp_num: QpId,
        sq: Producer<SendWqe>,
        send_cq: Arc<CompletionQueue>,
        recv_cq: Arc<CompletionQueue>,
        max_sge: usize,
        max_inline: usize,
        srq: &SharedReceiveQueue,
    ) -> QueuePair {
        let tracker = Arc::new(QpTracker {
            sq: Default::default(),
            rq: srq.outstanding().clone(),
        });
        QueuePair::with_tracker(
            qp_num, sq, None, send_cq, recv_cq, max_sge, max_inline, tracker,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn with_tracker(
        qp_num: QpId,
        sq: Producer<SendWqe>,
        rq: Option<Producer<RecvWqe>>,
        send_cq: Arc<CompletionQueue>,
        recv_cq: Arc<CompletionQueue>,
        max_sge: usize,
        max_inline: usize,
        tracker: Arc<QpTracker>,
    ) -> QueuePair {
        send_cq.attach_qp(qp_num.0, tracker.clone());
        recv_cq.attach_qp(qp_num.0, tracker.clone());
        let (sq_depth, rq_depth) = (sq.capacity(), rq.as_ref().map_or(0, |r| r.capacity()));
        QueuePair {
            release: None,
            srq: None,
            qp_num,
            sq: Mutex::new(sq),
            rq: rq.map(Mutex::new),
            send_cq,
            recv_cq,
            max_sge: max_sge.min(MAX_SGE),
            max_inline: max_inline.min(MAX_INLINE),
            sq_depth,
            rq_depth,
            tracker,
            waker: None,
            bell: None,
            rq_bell: None,
            spare: Mutex::default(),
        }
    }

    /// The depths asked for at Create QP (at most the rings' capacities).
    pub(crate) fn with_depths(mut self, sq_depth: u32, rq_depth: u32) -> QueuePair {
        self.sq_depth = self.sq_depth.min(sq_depth as usize);
        self.rq_depth = self.rq_depth.min(rq_depth as usize);
        self
    }

    pub(crate) fn with_waker(mut self, w: Option<Arc<Waker>>) -> QueuePair {
        self.waker = w;
        self
    }

    pub(crate) fn with_bell(mut self, sq: Option<BellSlot>, rq: Option<BellSlot>) -> QueuePair {
        self.bell = sq;
        self.rq_bell = rq;
        self
    }

    /// After publishing the SQ's head: list the QP for the daemon, then wake it if it sleeps
    /// (the waker's fence orders the listing before its look at the sleep word).
    fn kick(&self) {
        self.kick_with(self.bell.as_ref());
    }

    /// After publishing the RQ's head: as [`QueuePair::kick`], with the RQ's slot when it
    /// has one.
    fn kick_rq(&self) {
        self.kick_with(self.rq_bell.as_ref().or(self.bell.as_ref()));
    }

    fn kick_with(&self, bell: Option<&BellSlot>) {
        if let Some(b) = bell {
            b.ring();
        }
        if let Some(w) = &self.waker {
            w.kick();
        }
    }

    pub(crate) fn holding_srq(mut self, srq: Option<Arc<SharedReceiveQueue>>) -> QueuePair {
        self.srq = srq;
        self
    }

    pub(crate) fn with_release(mut self, r: Release) -> QueuePair {
        self.release = Some(r);
        self
    }

    pub fn qp_num(&self) -> QpId {
        self.qp_num
    }

    pub fn send_cq(&self) -> &Arc<CompletionQueue> {
        &self.send_cq
    }

    pub fn recv_cq(&self) -> &Arc<CompletionQueue> {
        &self.recv_cq
    }

    fn sgl(&self, sgs: &[Sg<'_>]) -> Result<(Sgl, Regions), Error> {
        sgl(sgs, self.max_sge)
    }

    fn encode(&self, wr: &SendWr<'_>) -> Result<(SendWqe, Regions), Error> {
        let (sgl, mrs) = self.sgl(wr.sg_list)?;
        let op = match wr.opcode {
            WrOpcode::Send => SendOpcode::Send,
            WrOpcode::SendWithInvalidate { .. } => SendOpcode::SendInv,
            WrOpcode::SendWithImm { .. } => SendOpcode::SendImm,
            WrOpcode::RdmaWrite { .. } => SendOpcode::Write,
            WrOpcode::RdmaWriteWithImm { .. } => SendOpcode::WriteImm,
            WrOpcode::RdmaRead { .. } => SendOpcode::Read,
            WrOpcode::FetchAdd { .. } => SendOpcode::FetchAdd,
            WrOpcode::CmpSwap { .. } => SendOpcode::CmpSwap,
            WrOpcode::Immediate { .. } => SendOpcode::Immediate,
            WrOpcode::BindMw { .. } => SendOpcode::BindMw,
            WrOpcode::LocalInvalidate { .. } => SendOpcode::LocalInv,
            WrOpcode::FastRegister { .. } => SendOpcode::FastReg,
        };
        let mut w = SendWqe::new(wr.wr_id, op, &sgl)?;
        match wr.opcode {
            WrOpcode::Send => {}
            WrOpcode::SendWithInvalidate { stag } => w.invalidate_stag = stag.0,
            WrOpcode::SendWithImm { imm } => w.imm = imm as u64,
            WrOpcode::Immediate { imm } => w.imm = imm,
            WrOpcode::BindMw {
                mw,
                mr,
                to,
                len,
                access,
            } => {
                w.local_stag = mw.0;
                w.mr_stag = mr.0;
                w.mr_to = to;
                w.mr_len = len;
                w.access = access;
            }
            WrOpcode::LocalInvalidate { stag } => w.local_stag = stag.0,
            WrOpcode::FastRegister {
                stag,
                mr,
                offset,
                len,
                access,
            } => {
                w.local_stag = stag.0;
                w.mr_stag = mr.0;
                w.mr_offset = offset;
                w.mr_len = len;
                w.mr_to = 0;
                w.access = access;
            }
            WrOpcode::RdmaWrite { rkey, remote_addr }
            | WrOpcode::RdmaRead { rkey, remote_addr } => {
                w.remote_stag = rkey.0;
                w.remote_to = remote_addr;
            }
            WrOpcode::RdmaWriteWithImm {
                rkey,
                remote_addr,
                imm,
            } => {
                w.remote_stag = rkey.0;
                w.remote_to = remote_addr;
                w.imm = imm;
            }
            WrOpcode::FetchAdd {
                rkey,
                remote_addr,
                add,
            } => {
                w.remote_stag = rkey.0;
                w.remote_to = remote_addr;
                w.compare_add = add;
            }
            WrOpcode::CmpSwap {
                rkey,
                remote_addr,
                compare,
                swap,
            } => {
                w.remote_stag = rkey.0;
                w.remote_to = remote_addr;
                w.compare_add = compare;
                // RFC 7306 section 4.2: all-ones masks make a plain compare-and-swap.
                w.compare_add_mask = u64::MAX;
                w.swap = swap;
                w.swap_mask = u64::MAX;
            }
        }
        let atomic = matches!(
            wr.opcode,
            WrOpcode::FetchAdd { .. } | WrOpcode::CmpSwap { .. }
        );
        if atomic && (sgl.len() != 1 || sgl[0].len != 8) {
            return Err(Error::InvalidWrOpcode);
        }
        // What the daemon could only refuse after Post Send returned is an immediate error
        // here (Verbs section 9.3.1.1, "Invalid Scatter/Gather list length", "Invalid
        // Modifier"): a Read's Local Address is one contiguous buffer; inline data only for
        // the operations that carry a payload from the SQ in one message.
        if matches!(wr.opcode, WrOpcode::RdmaRead { .. }) && sgl.len() != 1 {
            return Err(Error::InvalidSgeCount {
                count: sgl.len(),
                max: 1,
            });
        }
        let inline_op = matches!(
            wr.opcode,
            WrOpcode::Send
                | WrOpcode::SendWithInvalidate { .. }
                | WrOpcode::SendWithImm { .. }
                | WrOpcode::RdmaWrite { .. }
        );
        if wr.inline.is_some() && !inline_op {
            return Err(Error::InvalidWrOpcode);
        }
        if let Some(data) = wr.inline {
            if data.len() > self.max_inline {
                return Err(Error::InvalidInlineLength {
                    len: data.len(),
                    max: self.max_inline,
                });
            }
            w.set_inline(data)?;
        }
        // SendWqe::new starts signaled; an unsignaled WR that succeeds completes silently
        // (Verbs section 8.1.3.1), which applications count on (perftest advances its
        // completion count by its moderation per completion).
        if wr.signaled {
            w.flags |= send_flags::SIGNALED;
        } else {
            w.flags &= !send_flags::SIGNALED;
        }
        if wr.solicited {
            w.flags |= send_flags::SOLICITED;
        }
        if wr.fence {
            w.flags |= send_flags::FENCE;
        }
        Ok((w, mrs))
    }

    /// Post Send (Verbs section 8.2.2) of one work request: one WQE, one doorbell.
    pub fn post_send(&self, wr: &SendWr<'_>) -> Result<(), Error> {
        let mut b = self.batch();
        b.send(wr)?;
        b.submit()
    }

    /// Post Receive (Verbs section 8.2.3). With an S-RQ, post to the S-RQ instead. Refused
    /// with [`Error::QueueFull`] while the RQ holds its depth of receives whose completions
    /// were not reaped (section 8.2.1).
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let rq = self.rq.as_ref().ok_or(Error::InvalidWrOpcode)?;
        let (sgl, mrs) = self.sgl(wr.sg_list)?;
        let w = RecvWqe::new(wr.wr_id, &sgl)?;
        let mut ring = lock(rq);
        if self.tracker.rq.len() >= self.rq_depth {
            return Err(Error::QueueFull);
        }
        ring.push(w).map_err(|_| Error::QueueFull)?;
        self.tracker.rq.push(wr.wr_id, mrs);
        drop(ring);
        self.kick_rq();
        Ok(())
    }

    /// Destroy QP (Verbs section 6.1.4), waiting for iwarp-control's answer. Refused while
    /// memory windows are bound on the QP (invalidate or deallocate them first): the QP comes
    /// back with the error (boxed: a QP is large), unchanged, so the caller can retry.
    /// Dropping the QP destroys it too, without saying how that went.
    pub fn destroy(mut self) -> Result<(), Box<(QueuePair, Error)>> {
        match self.release.as_mut().map(Release::now) {
            Some(Err(e)) => Err(Box::new((self, e))),
            _ => Ok(()),
        }
    }

    /// Starts a batch of send work requests; [`PostBatch::submit`] rings the doorbell once.
    pub fn batch(&self) -> PostBatch<'_> {
        PostBatch {
            qp: self,
            store: std::mem::take(&mut *lock(&self.spare)),
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // Destroy first (control, then the daemon, stop using the rings), then forget the
        // work still posted, so its regions can be deregistered.
        drop(self.release.take());
        self.send_cq.detach_qp(self.qp_num.0);
        self.recv_cq.detach_qp(self.qp_num.0);
        self.tracker.sq.retire_all();
        // An S-RQ's receives belong to the S-RQ, not to this QP.
        if self.rq.is_some() {
            self.tracker.rq.retire_all();
        }
    }
}

/// Send work requests collected for one doorbell. Dropping it without `submit` posts
/// nothing. A submitted batch is gone:
///
/// ```compile_fail
/// fn twice(qp: &iwarp_verbs::QueuePair) {
///     let b = qp.batch();
///     b.submit().unwrap();
///     b.submit().unwrap(); // error: use of moved value
/// }
/// ```
#[must_use = "a batch posts nothing until submit() rings the doorbell"]
pub struct PostBatch<'q> {
    qp: &'q QueuePair,
    store: BatchStorage,
}

impl Drop for PostBatch<'_> {
    fn drop(&mut self) {
        // Whatever was not posted releases its regions here; the storage goes back.
        self.store.wqes.clear();
        self.store.mrs.clear();
        *lock(&self.qp.spare) = std::mem::take(&mut self.store);
    }
}

impl PostBatch<'_> {
    /// Checks and encodes `wr` into the batch (nothing reaches the ring yet).
    pub fn send(&mut self, wr: &SendWr<'_>) -> Result<&mut Self, Error> {
        let (w, mrs) = self.qp.encode(wr)?;
        self.store.wqes.push(w);
        self.store.mrs.push((wr.wr_id, mrs));
        Ok(self)
    }

    /// Writes every WQE and publishes them with one producer-index store. All or nothing: if
    /// the SQ lacks room for the whole batch, nothing is posted and [`Error::QueueFull`]. Room
    /// is the QP's SQ depth less the work whose completions were not reaped (Verbs section
    /// 8.2.1).
    pub fn submit(mut self) -> Result<(), Error> {
        let mut ring = lock(&self.qp.sq);
        let (n, outstanding) = (self.store.wqes.len(), self.qp.tracker.sq.len());
        if ring.free_for(n) < n || outstanding + n > self.qp.sq_depth {
            return Err(Error::QueueFull);
        }
        // Track before publishing so a completion can never precede its entry.
        for (wr_id, mrs) in self.store.mrs.drain(..) {
            self.qp.tracker.sq.push(wr_id, mrs);
        }
        let n = ring.push_batch(&self.store.wqes);
        debug_assert_eq!(n, self.store.wqes.len());
        drop(ring);
        self.qp.kick();
        Ok(())
    }
}
