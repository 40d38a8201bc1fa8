//! The initiating side's send CQs. perftest gives all of a process's QPs one send CQ, and
//! the harness does the same by default: QPs of one context share a send CQ as far as the
//! RNIC's `max_cqe` allows. Reaping completions then costs what completed, not how many QPs
//! there are; with a CQ per QP, a pass over ten thousand QPs reads ten thousand CQ rings
//! that the daemon writes, and the harness's polling takes the cores the daemons need.
//! `--cq-per-qp` gives each QP its own CQ instead.
//!
//! Whoever polls a shared CQ gets the completions of every QP on it. Those of other QPs are
//! held here, in order, until their own QP polls.

use iwarp_verbs::{CompletionQueue, Context, Error as VerbsError, WorkCompletion};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// Completion slots a CQ keeps beyond its QPs' send queues.
const SLACK: u32 = 16;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The held completions stay consistent even if a poller panicked (each is moved whole).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A send CQ and the completions reaped from it for QPs that have not polled yet.
pub struct SendCq {
    cq: Arc<CompletionQueue>,
    /// Has room for more than one QP: polling sorts completions by QP. A CQ of one QP (its
    /// own, or the first of a context's, which holds one) is polled directly.
    shared: bool,
    held: Mutex<HashMap<u32, VecDeque<WorkCompletion>>>,
}

impl SendCq {
    /// A CQ of its own for a QP whose send queue is `sq_depth` deep.
    pub fn own(ctx: &Context, sq_depth: u32) -> Result<Arc<SendCq>, VerbsError> {
        Ok(Arc::new(SendCq {
            cq: ctx.create_cq(sq_depth.max(1) + SLACK)?,
            shared: false,
            held: Mutex::default(),
        }))
    }

    pub fn cq(&self) -> &Arc<CompletionQueue> {
        &self.cq
    }
}

/// One QP's view of its send CQ: its own completions only.
pub struct SendCompletions {
    cq: Arc<SendCq>,
    qp: u32,
}

impl SendCompletions {
    pub fn new(cq: Arc<SendCq>, qp: u32) -> SendCompletions {
        SendCompletions { cq, qp }
    }

    /// Fills `wcs` with this QP's next completions, in order, and returns how many. Those
    /// held for it come first; only when none are does it poll the CQ, holding what it
    /// reaps for other QPs.
    pub fn poll(&self, wcs: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        if !self.cq.shared {
            return self.cq.cq.poll_cq(wcs);
        }
        // Held across the poll: another thread's poll could otherwise hand this QP a newer
        // completion before an older one it had reaped is held.
        let mut held = lock(&self.cq.held);
        let mut n = 0;
        if let Some(mine) = held.get_mut(&self.qp) {
            while n < wcs.len() {
                let Some(wc) = mine.pop_front() else {
                    break;
                };
                wcs[n] = wc;
                n += 1;
            }
        }
        if n > 0 {
            return Ok(n);
        }
        let got = self.cq.cq.poll_cq(wcs)?;
        // wcs[..n] are this QP's, in order; wcs[n..i] were other QPs' and are held.
        for i in 0..got {
            if wcs[i].qp_num == self.qp {
                wcs.swap(n, i);
                n += 1;
            } else {
                held.entry(wcs[i].qp_num).or_default().push_back(wcs[i]);
            }
        }
        Ok(n)
    }
}

impl Drop for SendCompletions {
    fn drop(&mut self) {
        // A later QP may get this number: nothing held for this one may reach it.
        if self.cq.shared {
            lock(&self.cq.held).remove(&self.qp);
        }
    }
}

/// Hands out the send CQs of one context's QPs: a CQ each, or shared ones. A shared CQ has
/// room for every WR its QPs' send queues hold, so it never overflows; each new one holds
/// twice the QPs of the last (up to `max_cqe`), so a run of one QP makes one small CQ and
/// one of ten thousand a few large ones.
pub struct CqCarver {
    per_qp: bool,
    max_cqe: u32,
    current: Option<Arc<SendCq>>,
    /// Slots of `current` not yet promised to a QP.
    room: u32,
    last_depth: u32,
}

impl CqCarver {
    pub fn new(per_qp: bool, max_cqe: u32) -> CqCarver {
        CqCarver {
            per_qp,
            max_cqe,
            current: None,
            room: 0,
            last_depth: 0,
        }
    }

    /// The send CQ of a QP whose send queue is `sq_depth` deep.
    pub fn take(&mut self, ctx: &Context, sq_depth: u32) -> Result<Arc<SendCq>, VerbsError> {
        if self.per_qp {
            return SendCq::own(ctx, sq_depth);
        }
        let need = sq_depth.max(1);
        match &self.current {
            Some(cq) if self.room >= need => {
                self.room -= need;
                Ok(cq.clone())
            }
            _ => {
                let depth = (2 * self.last_depth)
                    .max(need + SLACK)
                    .min(self.max_cqe.max(need + SLACK));
                let cq = Arc::new(SendCq {
                    cq: ctx.create_cq(depth)?,
                    shared: depth - SLACK >= 2 * need,
                    held: Mutex::default(),
                });
                self.current = Some(cq.clone());
                self.room = depth - SLACK - need;
                self.last_depth = depth;
                Ok(cq)
            }
        }
    }
}
