//! This process's doorbell bitmap ([`iwarp_abi::doorbell`]): one per context, made with its
//! first QP or S-RQ, and the slot each of those rings after a post so that the daemon visits
//! its rings. Without one (it could not be made, or its slots ran out) the daemon scans
//! those rings every turn.

use crate::error::Error;
use crate::shm::{path_of, segment_name};
use iwarp_abi::command::ShmPath;
use iwarp_abi::doorbell::{bell_bytes, BellRef, Ringer, BELL_SLOTS};
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The bitmap and which of its slots are handed out.
pub(crate) struct Bell {
    ringer: Ringer,
    path: ShmPath,
    /// Slots given back by destroyed QPs and S-RQs (the daemon forgot them first: destroy
    /// waits for its answer).
    free: Mutex<Vec<u32>>,
    /// Slots never handed out start here.
    next: AtomicU32,
}

impl Bell {
    pub(crate) fn create() -> Result<Arc<Bell>, Error> {
        // A few pages: no hugepage for them. Its descriptor stays open with the context:
        // each new QP's or S-RQ's ring names the bitmap by `/proc/<pid>/fd/<fd>`, and the
        // daemon maps it when the first such ring reaches it. One per context, whatever the
        // number of QPs.
        let seg = Arc::new(Segment::create_sealed(
            &segment_name("bell"),
            SegmentKind::Doorbell,
            bell_bytes(BELL_SLOTS),
            HugePolicy::Off,
        )?);
        Ok(Arc::new(Bell {
            ringer: Ringer::init_segment(&seg)?,
            path: path_of(&seg)?,
            free: Mutex::new(Vec::new()),
            next: AtomicU32::new(0),
        }))
    }

    /// A slot of its own for a new QP or S-RQ, while any is left.
    pub(crate) fn claim(self: &Arc<Bell>) -> Option<BellSlot> {
        let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let slot = reused.or_else(|| {
            let s = self.next.fetch_add(1, Ordering::Relaxed);
            (s < self.ringer.slots()).then_some(s)
        })?;
        Some(BellSlot {
            bell: self.clone(),
            slot,
        })
    }
}

/// One QP's or S-RQ's slot; given back when dropped.
pub(crate) struct BellSlot {
    bell: Arc<Bell>,
    slot: u32,
}

impl BellSlot {
    /// Names this slot in the trailer of `seg`, whose ring is `ring_len` octets; false when
    /// the segment has no room for it.
    pub(crate) fn mark(&self, seg: &Segment, ring_len: usize) -> bool {
        let r = BellRef {
            slot: self.slot,
            path: self.bell.path,
        };
        r.write(seg, ring_len)
    }

    /// After publishing a ring head: lists the slot for the daemon (no allocation, no system
    /// call).
    pub(crate) fn ring(&self) {
        self.bell.ringer.ring(self.slot);
    }
}

impl Drop for BellSlot {
    fn drop(&mut self) {
        self.bell
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.slot);
    }
}
