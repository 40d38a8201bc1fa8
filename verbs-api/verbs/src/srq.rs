//! Shared receive queues (Verbs section 6.3): one ring of receives that several QPs of a PD
//! take from, in posting order. The receives' regions stay in use until their completions
//! (which name the QP that consumed them) are polled.

use crate::bell::BellSlot;
use crate::cq::Outstanding;
use crate::error::Error;
use crate::link::{Release, Shared};
use crate::wr::{sgl, RecvWr};
use iwarp_abi::app::{Reply, Request};
use iwarp_abi::id::SrqId;
use iwarp_abi::ring::Producer;
use iwarp_abi::wake::Waker;
use iwarp_abi::wqe::{RecvWqe, MAX_SGE};
use std::sync::{Arc, Mutex};

/// A shared receive queue; create it with [`crate::ProtectionDomain::create_srq`] and name it
/// in [`crate::QpInitAttr::srq`].
pub struct SharedReceiveQueue {
    /// Destroys the S-RQ in control when dropped (its QPs hold it alive until then).
    release: Option<Release>,
    /// The control connection, for Query and Modify S-RQ.
    link: Shared,
    srq_num: SrqId,
    ring: Mutex<Producer<RecvWqe>>,
    /// Receives it holds at most (the depth asked for; the ring may have more slots).
    depth: usize,
    outstanding: Arc<Outstanding>,
    /// Rings iwarpd after a post when its poll loop sleeps.
    waker: Option<Arc<Waker>>,
    /// Lists the S-RQ for the daemon after a post.
    bell: Option<BellSlot>,
}

impl SharedReceiveQueue {
    pub(crate) fn new(
        srq_num: SrqId,
        ring: Producer<RecvWqe>,
        depth: u32,
        release: Release,
        waker: Option<Arc<Waker>>,
        bell: Option<BellSlot>,
    ) -> Self {
        SharedReceiveQueue {
            link: release.link().clone(),
            release: Some(release),
            srq_num,
            depth: ring.capacity().min(depth as usize),
            ring: Mutex::new(ring),
            outstanding: Arc::new(Outstanding::default()),
            waker,
            bell,
        }
    }

    pub fn srq_num(&self) -> SrqId {
        self.srq_num
    }

    /// Query S-RQ (Verbs section 9.2.4.2): its depth and the limit last armed (0: none).
    pub fn query(&self) -> Result<(u32, u32), Error> {
        let req = Request::QuerySrq { srq: self.srq_num };
        match crate::link::lock(&self.link).call(&req)? {
            Reply::Srq { depth, limit } => Ok((depth, limit)),
            other => Err(Error::Protocol(format!("Query S-RQ answered {other:?}"))),
        }
    }

    /// Modify S-RQ (Verbs section 9.2.4.3): sets and arms the S-RQ limit. When fewer than
    /// `limit` posted receives remain, the context gets one [`crate::Event::SrqLimit`]; arm
    /// again for the next. `limit` may not exceed the S-RQ's depth; 0 disarms.
    pub fn arm_limit(&self, limit: u32) -> Result<(), Error> {
        let req = Request::ModifySrq {
            srq: self.srq_num,
            limit,
        };
        match crate::link::lock(&self.link).call(&req)? {
            Reply::Done => Ok(()),
            other => Err(Error::Protocol(format!("Modify S-RQ answered {other:?}"))),
        }
    }

    pub(crate) fn outstanding(&self) -> &Arc<Outstanding> {
        &self.outstanding
    }

    /// Post Receive to the S-RQ (Verbs section 8.2.4): one entry, one doorbell. Refused with
    /// [`Error::QueueFull`] while the S-RQ holds its depth of receives whose completions were
    /// not reaped (section 8.2.1).
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let (sgl, mrs) = sgl(wr.sg_list, MAX_SGE)?;
        let w = RecvWqe::new(wr.wr_id, &sgl)?;
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if self.outstanding.len() >= self.depth {
            return Err(Error::QueueFull);
        }
        ring.push(w).map_err(|_| Error::QueueFull)?;
        self.outstanding.push(wr.wr_id, mrs);
        drop(ring);
        if let Some(b) = &self.bell {
            b.ring();
        }
        if let Some(w) = &self.waker {
            w.kick();
        }
        Ok(())
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // Destroy first (control, then the daemon, stop reading the ring), then discard the
        // receives still posted (Verbs section 8.2.7), so their regions can be deregistered.
        drop(self.release.take());
        self.outstanding.retire_all();
    }
}
