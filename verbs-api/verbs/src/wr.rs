//! What a work request names: scatter/gather elements over registered regions, checked and
//! turned into the ring's SGEs, and the receive work request posted to a QP or an S-RQ.

use crate::error::Error;
use crate::mr::{MemoryRegion, MrInner};
use iwarp_abi::wqe::Sge;
use std::sync::Arc;

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
pub(crate) fn sgl(sgs: &[Sg<'_>], max_sge: usize) -> Result<(Vec<Sge>, Vec<Arc<MrInner>>), Error> {
    if sgs.len() > max_sge {
        return Err(Error::InvalidSgeCount {
            count: sgs.len(),
            max: max_sge,
        });
    }
    let mut sgl = Vec::with_capacity(sgs.len());
    let mut mrs = Vec::with_capacity(sgs.len());
    for s in sgs {
        sgl.push(s.mr.sge(s.offset, s.len)?);
        mrs.push(s.mr.inner.clone());
    }
    Ok((sgl, mrs))
}
