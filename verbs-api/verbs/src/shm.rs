//! The shared-memory segments this process creates: their names, and the rings in them that
//! queue pairs, S-RQs and completion queues share with the daemon.

use crate::error::Error;
use iwarp_abi::command::ShmPath;
use iwarp_abi::ring;
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind, HUGEPAGE};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Segment names of this process count up from here.
static SEQ: AtomicU32 = AtomicU32::new(0);

pub(crate) fn segment_name(what: &str) -> String {
    format!(
        "iwarp-app-{}-{what}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Ring slots for a queue of `depth` entries: rings index with a mask, so a power of two.
fn ring_slots(depth: u32) -> usize {
    (depth.max(1) as usize).next_power_of_two()
}

/// A ring's segment, its two ends, and the descriptor its path names.
type RingSegment<T> = (Arc<Segment>, ring::Producer<T>, ring::Consumer<T>, OwnedFd);

/// A new ring of `depth` `T` slots (rounded up to a power of two) in a segment of this
/// process, of `bytes(slots)` octets (the ring, and for a CQ its notification word after it),
/// initialised: the segment and both ends (keep the one used, drop the other).
///
/// The segment's descriptor comes back on its own: its `/proc/<pid>/fd/<fd>` path is what
/// the request creating the queue names, so keep it until that request is answered (the
/// daemon has mapped the ring by then), then close it. A process holding ten thousand QPs
/// then holds no descriptor for their rings, only the mappings.
pub(crate) fn ring_segment<T: ring::Slot>(
    what: &str,
    kind: SegmentKind,
    depth: u32,
    bytes: impl FnOnce(usize) -> usize,
) -> Result<RingSegment<T>, Error> {
    let slots = ring_slots(depth);
    let len = bytes(slots);
    // A hugepage only for a ring that fills half of one: a queue of a few KiB on its own
    // 2 MiB page wastes almost all of it, and a few hundred such queues would empty the
    // pool that large rings and registered memory need.
    let policy = if len >= HUGEPAGE / 2 {
        HugePolicy::Auto
    } else {
        HugePolicy::Off
    };
    let mut seg = Segment::create_sealed(&segment_name(what), kind, len, policy)?;
    let name = seg
        .take_fd()
        .ok_or_else(|| Error::Protocol("a new segment without a descriptor".into()))?;
    let seg = Arc::new(seg);
    let (p, c) = ring::init_segment::<T>(&seg, slots)?;
    Ok((seg, p, c, name))
}

pub(crate) fn path_of(seg: &Segment) -> Result<ShmPath, Error> {
    let p = seg
        .path()
        .ok_or_else(|| Error::Protocol("segment without a path".into()))?;
    Ok(ShmPath::new(p)?)
}
