//! The shared-memory segments this process creates: their names, and the rings in them that
//! queue pairs, S-RQs and completion queues share with the daemon.

use crate::error::Error;
use iwarp_abi::command::ShmPath;
use iwarp_abi::ring;
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
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

/// A ring's segment and its two ends.
type RingSegment<T> = (Arc<Segment>, ring::Producer<T>, ring::Consumer<T>);

/// A new ring of `depth` `T` slots (rounded up to a power of two) in a segment of this
/// process, of `bytes(slots)` octets (the ring, and for a CQ its notification word after it),
/// initialised: the segment and both ends (keep the one used, drop the other).
pub(crate) fn ring_segment<T: ring::Slot>(
    what: &str,
    kind: SegmentKind,
    depth: u32,
    bytes: impl FnOnce(usize) -> usize,
) -> Result<RingSegment<T>, Error> {
    let slots = ring_slots(depth);
    let seg = Arc::new(Segment::create_sealed(
        &segment_name(what),
        kind,
        bytes(slots),
        HugePolicy::Auto,
    )?);
    let (p, c) = ring::init_segment::<T>(&seg, slots)?;
    Ok((seg, p, c))
}

pub(crate) fn path_of(seg: &Segment) -> Result<ShmPath, Error> {
    let p = seg
        .path()
        .ok_or_else(|| Error::Protocol("segment without a path".into()))?;
    Ok(ShmPath::new(p)?)
}
