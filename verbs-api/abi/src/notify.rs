//! Completion notification (Verbs "Request Completion Notification" with an event channel):
//! a 32-bit word in the CQ's segment, 64-aligned after the ring, that lets an application
//! sleep in the kernel (a futex on shared memory) until the daemon writes a completion,
//! instead of spinning.
//!
//! The application arms (stores [`NEXT`], or [`SOLICITED`] for solicited-only), checks the
//! ring once more, then waits while the word stays armed. The daemon, after publishing
//! completions, loads the word and, when armed for what it wrote, clears it and wakes the
//! waiters. Both sides put a SeqCst fence between their store and their load (the
//! head index for the application, the word for the daemon), so either the application sees
//! the new completion or the daemon sees the armed word: no wake-up is lost. The daemon pays
//! one fence for all the CQs a turn wrote to, a load for each, and a system call only when
//! someone sleeps.

// The futex word must be a plain u32 in shared memory that the kernel reads: the loom facade
// (crate::sync) cannot stand in for it, so this module uses core's atomics and is left out of
// loom builds (lib.rs).
#![allow(clippy::disallowed_types)]

use crate::ring::ring_bytes;
use crate::segment::Segment;
use crate::wqe::Cqe;
use core::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The word's value when armed for the next completion of any kind.
pub const NEXT: u32 = 1;
/// The word's value when armed for the next solicited completion (a received message with
/// the Solicited Event bit) or error completion only (Verbs section 8.3.4).
pub const SOLICITED: u32 = 2;

/// Where the word lives in a CQ segment's data area with `slots` ring slots.
pub const fn offset(slots: usize) -> usize {
    ring_bytes::<Cqe>(slots).div_ceil(64) * 64
}

/// Data-area octets of a CQ segment with `slots` ring slots and its notification word.
pub const fn cq_segment_bytes(slots: usize) -> usize {
    offset(slots) + 64
}

/// The notification word of one CQ, with its segment kept mapped.
pub struct Notify {
    word: *const AtomicU32,
    _seg: Arc<Segment>,
}

// SAFETY: `word` points into a shared mapping that `_seg` keeps alive; it is only accessed
// through atomic operations, which are safe from any thread.
unsafe impl Send for Notify {}
// SAFETY: as above.
unsafe impl Sync for Notify {}

impl Notify {
    /// The word of the CQ segment `seg` whose ring has `slots` slots; `None` when the segment
    /// has no room for it (an application that does not use notification).
    pub fn of_cq_segment(seg: &Arc<Segment>, slots: usize) -> Option<Notify> {
        let at = offset(slots);
        if seg.data_len() < at + 4 {
            return None;
        }
        // SAFETY: `at + 4` lies inside the data area (checked), which is page-aligned, so the
        // address is 4-aligned; the mapping lives as long as `_seg`.
        let word = unsafe { seg.data().as_ptr().add(at) } as *const AtomicU32;
        Some(Notify {
            word,
            _seg: seg.clone(),
        })
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: see `of_cq_segment`.
        unsafe { &*self.word }
    }

    /// Application: ask to be woken by the next completion. Check the ring after this.
    pub fn arm(&self) {
        self.arm_for(false);
    }

    /// Application: ask to be woken by the next completion, or with `solicited_only` by the
    /// next solicited or error completion only. Check the ring after this.
    pub fn arm_for(&self, solicited_only: bool) {
        let v = if solicited_only { SOLICITED } else { NEXT };
        self.word().store(v, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Application: whether the word is still armed (false once the daemon, seeing a new
    /// completion, cleared it).
    pub fn armed(&self) -> bool {
        self.word().load(Ordering::SeqCst) != 0
    }

    /// Application: sleep until woken or `timeout` passes (returns at once if not armed).
    pub fn wait(&self, timeout: Duration) {
        let armed = self.word().load(Ordering::SeqCst);
        if armed == 0 {
            return;
        }
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a 4-aligned word of a shared mapping that stays mapped; the
        // kernel compares it with the armed value and sleeps only while it holds. Shared
        // (not PRIVATE): the waker is another process.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word,
                libc::FUTEX_WAIT,
                armed,
                &ts as *const libc::timespec,
                core::ptr::null::<u32>(),
                0u32,
            );
        }
    }

    /// Daemon: after publishing completions, wake an armed waiter. Returns whether it did.
    pub fn wake_if_armed(&self) -> bool {
        self.wake_if_armed_for(true)
    }

    /// Daemon: after publishing completions, wake a waiter armed for them: any armed one
    /// when `solicited` (one of them was solicited or in error), else only one armed for
    /// the next completion of any kind. A solicited-only arming stays armed past
    /// unsolicited completions. Returns whether it woke.
    pub fn wake_if_armed_for(&self, solicited: bool) -> bool {
        Notify::wake_armed([(self, solicited)]) == 1
    }

    /// Daemon: after publishing completions on several CQs, one fence for them all, then
    /// each word as [`Notify::wake_if_armed_for`] would. A fence drains the store buffer,
    /// and a turn's completion stores miss the cache when there are many CQs: one fence a
    /// turn lets them overlap instead of waiting for each CQ's in turn. Returns how many
    /// it woke.
    pub fn wake_armed<'a>(words: impl IntoIterator<Item = (&'a Notify, bool)>) -> usize {
        fence(Ordering::SeqCst);
        words
            .into_iter()
            .filter(|&(n, solicited)| n.wake_after_fence(solicited))
            .count()
    }

    fn wake_after_fence(&self, solicited: bool) -> bool {
        match self.word().load(Ordering::Relaxed) {
            0 => return false,
            SOLICITED if !solicited => return false,
            _ => {}
        }
        self.word().store(0, Ordering::SeqCst);
        // SAFETY: FUTEX_WAKE on the same word; wakes every waiter.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word,
                libc::FUTEX_WAKE,
                i32::MAX,
                core::ptr::null::<libc::timespec>(),
                core::ptr::null::<u32>(),
                0u32,
            );
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{HugePolicy, SegmentKind};

    fn word() -> Notify {
        let seg = Segment::create_anonymous(
            "notify-test",
            SegmentKind::CompletionQueue,
            cq_segment_bytes(8),
            HugePolicy::Off,
        )
        .unwrap();
        Notify::of_cq_segment(&Arc::new(seg), 8).unwrap()
    }

    /// Verbs section 8.3.4: a solicited-only request is satisfied by a solicited or error
    /// completion only; a request for the next completion by any.
    #[test]
    fn solicited_only_waits_for_a_solicited_completion() {
        let n = word();
        assert!(!n.wake_if_armed_for(true), "not armed: nobody to wake");
        n.arm_for(true);
        assert!(!n.wake_if_armed_for(false), "unsolicited: stays armed");
        assert!(n.armed());
        assert!(n.wake_if_armed_for(true));
        assert!(!n.armed());
        n.arm_for(false);
        assert!(n.wake_if_armed_for(false), "next completion: any kind");
        assert!(!n.armed());
        // Not armed: wait returns at once instead of sleeping out its timeout.
        n.wait(Duration::from_secs(3600));
    }

    /// One fence for several CQs: each word is still judged by its own completions.
    #[test]
    fn a_turns_words_are_woken_each_for_its_own_completions() {
        let (any, solicited_only, idle) = (word(), word(), word());
        any.arm();
        solicited_only.arm_for(true);
        let woke = Notify::wake_armed([(&any, false), (&solicited_only, false), (&idle, true)]);
        assert_eq!(woke, 1, "only the word armed for any completion");
        assert!(!any.armed());
        assert!(
            solicited_only.armed(),
            "unsolicited completions leave it armed"
        );
        assert_eq!(Notify::wake_armed([(&solicited_only, true)]), 1);
        assert!(!solicited_only.armed());
        assert_eq!(Notify::wake_armed([]), 0);
    }
}
