//! What a work request names: scatter/gather elements over registered regions, checked and
//! turned into the ring's SGEs, and the receive work request posted to a QP or an S-RQ.

use crate::error::Error;
use crate::mr::{MemoryRegion, MrInner};
use arrayvec::ArrayVec;
use iwarp_abi::wqe::{Sge, MAX_SGE};
use std::sync::Arc;

/// A work request's SGEs, as many as a WQE carries: held inline, no allocation per post.
pub(crate) type Sgl = ArrayVec<Sge, MAX_SGE>;
/// The regions a posted work request uses (one per SGE), kept alive until it completes.
pub(crate) type Regions = ArrayVec<Arc<MrInner>, MAX_SGE>;

/// One local scatter/gather element: `len` octets at `offset` of `mr`.
#[derive(Debug, Clone, Copy)]
pub struct Sg<'a> {
    pub mr: &'a MemoryRegion,
    pub offset: u64,
    pub len: u32,
}

/// A receive work request.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sg_list: &'a [Sg<'a>],
}

/// The SGEs of a work request, bounds-checked, and the regions they use.
pub(crate) fn sgl(sgs: &[Sg<'_>], max_sge: usize) -> Result<(Sgl, Regions), Error> {
    if sgs.len() > max_sge.min(MAX_SGE) {
        return Err(Error::InvalidSgeCount {
            count: sgs.len(),
            max: max_sge,
        });
    }
    let mut sgl = Sgl::new();
    let mut mrs = Regions::new();
    for s in sgs {
        sgl.push(s.mr.sge(s.offset, s.len)?);
        mrs.push(s.mr.inner.clone());
    }
    Ok((sgl, mrs))
}
