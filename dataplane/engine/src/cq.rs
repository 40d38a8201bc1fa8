//! Completion queues (Verbs section 8.3): bounded, with solicited / next-completion
//! notification and overflow detection.

use crate::fifo::TakeFront;
use crate::types::WorkCompletion;
use std::collections::VecDeque;

/// What a consumer asked to be notified of (Verbs "Request Completion Notification").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    None,
    /// The next completion of any kind.
    NextCompletion,
    /// The next completion of a message that asked for a solicited event, or an error.
    Solicited,
}

#[derive(Debug)]
pub struct Cq {
    pub(crate) id: iwarp_abi::id::CqId,
    entries: VecDeque<WorkCompletion>,
    depth: usize,
    notify: Notify,
    event: bool,
    overflowed: bool,
    pub(crate) overflow_reported: bool,
    /// In the RNIC's completion ready list (see [`crate::Rnic::next_cq_ready`]).
    pub(crate) queued: bool,
}

impl Cq {
    pub(crate) fn new(id: iwarp_abi::id::CqId, depth: usize) -> Cq {
        Cq {
            id,
            entries: VecDeque::with_capacity(depth),
            depth,
            notify: Notify::None,
            event: false,
            overflowed: false,
            overflow_reported: false,
            queued: false,
        }
    }

    /// Adds a completion. Returns false (and remembers the overflow) when the CQ is full:
    /// the completion is lost, which the Verbs spec treats as a CQ error.
    pub(crate) fn push(&mut self, wc: WorkCompletion) -> bool {
        if self.entries.len() >= self.depth {
            self.overflowed = true;
            return false;
        }
        let wakes = match self.notify {
            Notify::None => false,
            Notify::NextCompletion => true,
            Notify::Solicited => wc.solicited || wc.status != crate::types::Status::Success,
        };
        if wakes {
            self.event = true;
            self.notify = Notify::None;
        }
        self.entries.push_back(wc);
        true
    }

    pub(crate) fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        let n = out.len().min(self.entries.len());
        for slot in out.iter_mut().take(n) {
            // n <= len, so take_front is Some.
            if let Some(wc) = self.entries.take_front() {
                *slot = wc;
            }
        }
        n
    }

    /// Modify CQ (Verbs section 5.3.3): a new size, refused when more completions are
    /// waiting than it holds (nothing changes then).
    pub(crate) fn resize(&mut self, depth: usize) -> bool {
        if self.entries.len() > depth {
            return false;
        }
        self.depth = depth;
        true
    }

    pub(crate) fn arm(&mut self, notify: Notify) {
        self.notify = notify;
    }

    /// Takes a pending completion event (the "completion handler" call).
    pub(crate) fn take_event(&mut self) -> bool {
        core::mem::take(&mut self.event)
    }

    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}
