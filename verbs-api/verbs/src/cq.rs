//! Completion queues: a ring of [`Cqe`] written by the daemon, read here without a system
//! call. Polling a completion also releases the memory regions its work request held (and,
//! for a send, those of the unsignaled ones before it on the same SQ).

use crate::error::Error;
use crate::link::Release;
use crate::wr::Regions;
use iwarp_abi::app::{Reply, Request};
use iwarp_abi::id::CqId;
use iwarp_abi::ring::Consumer;
use iwarp_abi::wqe::Cqe;
pub use iwarp_abi::wqe::{CqeOpcode as WcOpcode, CqeStatus as WcStatus};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A work completion (Verbs section 8.3.2). A failed completion is data: see `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    pub qp_num: u32,
    pub imm_data: Option<u64>,
    pub invalidated_stag: Option<u32>,
}

impl WorkCompletion {
    /// A slot for [`CompletionQueue::poll_cq`] to overwrite: what a caller fills its
    /// completion array with before polling.
    pub const BLANK: WorkCompletion = WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        qp_num: 0,
        imm_data: None,
        invalidated_stag: None,
    };

    pub fn is_recv(&self) -> bool {
        matches!(self.opcode, WcOpcode::Recv | WcOpcode::RecvImm)
    }
}

/// The posted-but-not-completed work requests of one work queue, in posting order, with the
/// regions each uses.
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    entries: Mutex<VecDeque<(u64, Regions)>>,
}

impl Outstanding {
    pub(crate) fn push(&self, wr_id: u64, mrs: Regions) {
        for m in &mrs {
            m.posted.fetch_add(1, Ordering::AcqRel);
        }
        lock(&self.entries).push_back((wr_id, mrs));
    }

    /// How many requests are outstanding: the work queue entries they occupy (Verbs section
    /// 8.2.1 frees one only when its completion, or a later one of its queue, is reaped).
    pub(crate) fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Forgets every outstanding request (its QP was destroyed: Verbs section 8.2.7 discards
    /// its work), releasing the regions they held.
    pub(crate) fn retire_all(&self) {
        for (_, mrs) in lock(&self.entries).drain(..) {
            for m in &mrs {
                m.posted.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// An SQ completion for `wr_id`: an SQ completes in posting order (Verbs section 8.2.2
    /// rule 2, which the daemon keeps even for WRs that fail), so the unsignaled entries
    /// before it are complete too (section 8.2.1) and are retired with it.
    fn retire_through(&self, wr_id: u64) {
        let mut q = lock(&self.entries);
        if !q.iter().any(|(w, _)| *w == wr_id) {
            return;
        }
        while let Some((w, mrs)) = q.pop_front() {
            for m in &mrs {
                m.posted.fetch_sub(1, Ordering::AcqRel);
            }
            if w == wr_id {
                break;
            }
        }
    }

    /// A receive completion for `wr_id`: only that entry is retired. Receives are always
    /// signaled, and an S-RQ's complete in whatever order its QPs' messages arrive (section
    /// 8.2.2 rule 2 does not apply to them), so nothing else is known complete.
    fn retire_one(&self, wr_id: u64) {
        let mut q = lock(&self.entries);
        let Some(i) = q.iter().position(|(w, _)| *w == wr_id) else {
            return;
        };
        if let Some((_, mrs)) = q.remove(i) {
            for m in &mrs {
                m.posted.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// The send and receive trackers of one QP, found from a completion's `qp_num`.
#[derive(Debug, Default)]
pub(crate) struct QpTracker {
    pub(crate) sq: Outstanding,
    /// The QP's own receive queue, or the S-RQ's (shared by its QPs).
    pub(crate) rq: Arc<Outstanding>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A completion queue (Verbs section 7.4).
pub struct CompletionQueue {
    /// Destroys the CQ in control when dropped (first, before the ring is unmapped).
    release: Option<Release>,
    cq_num: CqId,
    ring: Mutex<CqRing>,
    qps: Mutex<HashMap<u32, Arc<QpTracker>>>,
}

/// The ring the daemon writes now, and what a resize carried over from the one before.
struct CqRing {
    ring: Consumer<Cqe>,
    /// Completions the previous ring still held when the CQ was resized: they come first.
    carried: VecDeque<Cqe>,
    /// The word the daemon wakes us on (see [`CompletionQueue::wait`]).
    notify: Option<Arc<iwarp_abi::notify::Notify>>,
    depth: u32,
}

impl CqRing {
    fn pop(&mut self) -> Option<Cqe> {
        self.carried.pop_front().or_else(|| self.ring.pop())
    }
}

impl core::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("cq_num", &self.cq_num)
            .finish_non_exhaustive()
    }
}

impl CompletionQueue {
    /// A CQ over the reading end of its ring (created by iwarp-control, attached here).
    pub fn from_ring(cq_num: CqId, ring: Consumer<Cqe>) -> CompletionQueue {
        let depth = ring.capacity() as u32;
        CompletionQueue {
            release: None,
            cq_num,
            ring: Mutex::new(CqRing {
                ring,
                carried: VecDeque::new(),
                notify: None,
                depth,
            }),
            qps: Mutex::new(HashMap::new()),
        }
    }

    /// The notification word and the size asked for at creation.
    pub(crate) fn with_notify(self, n: Option<iwarp_abi::notify::Notify>, depth: u32) -> Self {
        {
            let mut r = lock(&self.ring);
            r.notify = n.map(Arc::new);
            r.depth = depth;
        }
        self
    }

    /// The number of entries the CQ holds (as created or last resized; Query CQ without
    /// asking control).
    pub fn depth(&self) -> u32 {
        lock(&self.ring).depth
    }

    /// Query CQ (Verbs section 9.2.3.2): the size iwarp-control has on record.
    pub fn query(&self) -> Result<u32, Error> {
        let link = self.link()?;
        let reply = crate::link::lock(link).call(&Request::QueryCq { cq: self.cq_num })?;
        match reply {
            Reply::Cq { depth } => Ok(depth),
            other => Err(Error::Protocol(format!("Query CQ answered {other:?}"))),
        }
    }

    /// Modify CQ (Verbs section 9.2.3.3): resizes the CQ to `depth` entries while work is
    /// outstanding. No completion is lost and the order stays: the daemon writes to a new
    /// ring from the moment it agrees, and what the old ring still holds is returned
    /// first. Refused, with nothing changed, when more completions are present than `depth`
    /// holds (poll some first) or `depth` is past the RNIC's `max_cqe`. Polls on other
    /// threads wait while it runs.
    pub fn resize(&self, depth: u32) -> Result<u32, Error> {
        let link = self.link()?;
        let (seg, _, consumer, name) = crate::shm::ring_segment::<Cqe>(
            "cq",
            iwarp_abi::segment::SegmentKind::CompletionQueue,
            depth,
            iwarp_abi::notify::cq_segment_bytes,
        )?;
        let notify = iwarp_abi::notify::Notify::of_cq_segment(&seg, consumer.capacity());
        let ring = crate::shm::path_of(&seg)?;
        // No poll between the daemon's switch and the carry-over below.
        let mut r = lock(&self.ring);
        let reply = crate::link::lock(link).call(&Request::ModifyCq {
            cq: self.cq_num,
            depth,
            ring,
        })?;
        // The daemon has mapped the new ring (or refused it): its name is not needed.
        drop(name);
        let Reply::Cq { depth } = reply else {
            return Err(Error::Protocol(format!("Modify CQ answered {reply:?}")));
        };
        // The daemon writes only the new ring now: what the old one holds is complete.
        while let Some(c) = r.ring.pop() {
            r.carried.push_back(c);
        }
        r.ring = consumer;
        r.depth = depth;
        let old = std::mem::replace(&mut r.notify, notify.map(Arc::new));
        drop(r);
        // A waiter asleep on the old word re-checks and sleeps on the new one.
        if let Some(n) = old {
            n.wake_if_armed();
        }
        Ok(depth)
    }

    fn link(&self) -> Result<&crate::link::Shared, Error> {
        self.release
            .as_ref()
            .map(Release::link)
            .ok_or_else(|| Error::Protocol("a CQ made from a bare ring has no control".into()))
    }

    /// Waits up to `timeout` for a completion, sleeping in the kernel rather than spinning
    /// (Request Completion Notification and its event channel, Verbs section 8.3.4): the
    /// daemon wakes this CQ's waiters when it writes a completion. Returns the first
    /// completion, or `None` at the timeout. Without a notification word (a CQ made by
    /// `from_ring`), it polls with short sleeps.
    pub fn wait(&self, timeout: Duration) -> Result<Option<WorkCompletion>, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(wc) = self.poll_one()? {
                return Ok(Some(wc));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let notify = lock(&self.ring).notify.clone();
            match notify {
                Some(n) => {
                    n.arm();
                    // A completion written before the daemon could see the armed word.
                    if let Some(wc) = self.poll_one()? {
                        return Ok(Some(wc));
                    }
                    n.wait(left);
                }
                None => std::thread::sleep(left.min(Duration::from_micros(50))),
            }
        }
    }

    pub(crate) fn with_release(mut self, r: Release) -> CompletionQueue {
        self.release = Some(r);
        self
    }

    /// The CQ's notification word, for completion channels built on it (the drop-in
    /// libibverbs' `ibv_req_notify_cq`).
    pub fn notifier(&self) -> Option<Arc<iwarp_abi::notify::Notify>> {
        lock(&self.ring).notify.clone()
    }

    pub fn cq_num(&self) -> CqId {
        self.cq_num
    }

    pub(crate) fn attach_qp(&self, qp_num: u32, t: Arc<QpTracker>) {
        lock(&self.qps).insert(qp_num, t);
    }

    pub(crate) fn detach_qp(&self, qp_num: u32) {
        lock(&self.qps).remove(&qp_num);
    }

    /// Poll CQ (Verbs section 8.3): fills `out` with up to `out.len()` completions and returns
    /// how many. Touches only the ring. A completion the daemon wrote with an unknown opcode
    /// or status is an [`Error::Abi`] (the ring is corrupt), never a guessed value.
    pub fn poll_cq(&self, out: &mut [WorkCompletion]) -> Result<usize, Error> {
        let mut ring = lock(&self.ring);
        let mut n = 0;
        while n < out.len() {
            let Some(c) = ring.pop() else { break };
            let wc = WorkCompletion {
                wr_id: c.wr_id,
                status: c.status()?,
                opcode: c.op()?,
                byte_len: c.byte_len,
                qp_num: c.qp_num,
                imm_data: c.imm(),
                invalidated_stag: c.invalidated(),
            };
            if let Some(t) = lock(&self.qps).get(&wc.qp_num) {
                if wc.is_recv() {
                    t.rq.retire_one(wc.wr_id);
                } else {
                    t.sq.retire_through(wc.wr_id);
                }
            }
            out[n] = wc;
            n += 1;
        }
        Ok(n)
    }

    /// Polls one completion, if any.
    pub fn poll_one(&self) -> Result<Option<WorkCompletion>, Error> {
        let mut one = [WorkCompletion::BLANK];
        Ok((self.poll_cq(&mut one)? == 1).then_some(one[0]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryRegion;

    fn regions() -> [MemoryRegion; 3] {
        [1, 2, 3].map(|i| MemoryRegion::from_registration(iwarp_abi::id::Stag(0x100 * i), 0, 64))
    }

    fn posted(mrs: &[MemoryRegion; 3]) -> [u64; 3] {
        [mrs[0].posted(), mrs[1].posted(), mrs[2].posted()]
    }

    /// Verbs section 8.2.2 rule 2 does not hold for an S-RQ: its receives complete in the
    /// order messages arrive on its QPs. A receive's completion releases its own regions only;
    /// the receives posted before it still hold theirs.
    #[test]
    fn a_receive_completion_releases_only_its_own_regions() {
        let mrs = regions();
        let srq = Outstanding::default();
        for (i, m) in mrs.iter().enumerate() {
            srq.push(i as u64 + 1, [m.inner.clone()].into_iter().collect());
        }
        srq.retire_one(2);
        assert_eq!(posted(&mrs), [1, 0, 1]);
        srq.retire_one(3);
        assert_eq!(posted(&mrs), [1, 0, 0]);
        srq.retire_one(7);
        assert_eq!(posted(&mrs), [1, 0, 0], "an unknown id retires nothing");
        srq.retire_one(1);
        assert_eq!(posted(&mrs), [0, 0, 0]);
    }

    /// Section 8.2.1: a completion on an SQ confirms the unsignaled WRs posted before it
    /// (they completed, in order); the WRs after it keep their regions.
    #[test]
    fn a_send_completion_releases_the_unsignaled_ones_before_it() {
        let mrs = regions();
        let sq = Outstanding::default();
        for (i, m) in mrs.iter().enumerate() {
            sq.push(i as u64 + 1, [m.inner.clone()].into_iter().collect());
        }
        sq.retire_through(2);
        assert_eq!(posted(&mrs), [0, 0, 1]);
        sq.retire_through(3);
        assert_eq!(posted(&mrs), [0, 0, 0]);
    }
}
