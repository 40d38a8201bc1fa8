//! Memory regions: registered windows of shared buffers, with a run-time count of the posted
//! work requests that use them (the generation check the type system cannot do, since a
//! posted WR outlives the borrow that posted it).

use crate::error::Error;
use crate::link::Release;
use iwarp_abi::id::Stag;
use iwarp_abi::wqe::Sge;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct MrInner {
    pub(crate) lkey: u32,
    pub(crate) len: u64,
    /// Tagged offset of the first octet (the VA for VA-based regions, 0 for zero-based).
    pub(crate) base_to: u64,
    /// Posted work requests naming this region whose completion was not yet polled.
    pub(crate) posted: AtomicU64,
    /// Deregisters the region in control once the last holder (the application's handle or
    /// a posted work request) lets go.
    pub(crate) release: Option<Release>,
}

/// A registered memory region (Verbs section 7.2.3).
///
/// Deregistering consumes the region, so it cannot be used afterwards:
///
/// ```compile_fail
/// let mr = iwarp_verbs::MemoryRegion::from_registration(iwarp_abi::id::Stag(0x100), 0, 64);
/// mr.deregister().unwrap();
/// let _ = mr.stag(); // error: use of moved value
/// ```
#[derive(Debug)]
pub struct MemoryRegion {
    pub(crate) inner: Arc<MrInner>,
}

impl MemoryRegion {
    /// A region whose STag `stag` was allocated by iwarp-control for `len` octets starting at
    /// tagged offset `base_to`.
    pub fn from_registration(stag: Stag, base_to: u64, len: u64) -> MemoryRegion {
        MemoryRegion {
            inner: Arc::new(MrInner {
                lkey: stag.0,
                len,
                base_to,
                posted: AtomicU64::new(0),
                release: None,
            }),
        }
    }

    pub(crate) fn with_release(mut self, r: Release) -> MemoryRegion {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.release = Some(r);
        }
        self
    }

    /// Forgets the release of a region control replaced (re-registration); false when posted
    /// work still holds it.
    pub(crate) fn disarm(&mut self) -> bool {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => {
                if let Some(r) = inner.release.as_mut() {
                    r.disarm();
                }
                true
            }
            None => false,
        }
    }

    pub(crate) fn base_to(&self) -> u64 {
        self.inner.base_to
    }

    /// The STag, used locally (lkey) and given to peers (rkey).
    pub fn stag(&self) -> Stag {
        Stag(self.inner.lkey)
    }

    pub fn len(&self) -> u64 {
        self.inner.len
    }

    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// How many posted work requests use this region now.
    pub fn posted(&self) -> u64 {
        self.inner.posted.load(Ordering::Acquire)
    }

    /// A scatter/gather entry over `len` octets at `offset` of the region, bounds-checked.
    pub fn sge(&self, offset: u64, len: u32) -> Result<Sge, Error> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.inner.len)
        {
            return Err(Error::InvalidLength {
                offset,
                len: len as u64,
                region_len: self.inner.len,
            });
        }
        Ok(Sge {
            stag: self.inner.lkey,
            len,
            to: self.inner.base_to + offset,
        })
    }

    /// Deregister Memory Region (Verbs section 7.2.6), waiting for iwarp-control's answer.
    /// Refused while posted work requests use the region, or while memory windows or
    /// fast-registered STags still point into it (invalidate them first): the region comes
    /// back with the error so the caller can retry.
    pub fn deregister(mut self) -> Result<(), (MemoryRegion, Error)> {
        let (stag, posted) = (self.stag(), self.posted());
        let Some(inner) = Arc::get_mut(&mut self.inner).filter(|_| posted == 0) else {
            return Err((self, Error::MrInUse { stag, posted }));
        };
        match inner.release.as_mut().map(Release::now) {
            Some(Err(e)) => Err((self, e)),
            _ => Ok(()),
        }
    }
}

/// An STag for Fast-Register work requests (Allocate Non-Shared Memory Region STag, Verbs
/// section 9.2.6.1): invalid until a [`crate::WrOpcode::FastRegister`] gives it part of a
/// region, invalid again after a Local Invalidate or a peer's Send with Invalidate.
/// Deallocated when dropped.
#[derive(Debug)]
pub struct FastRegStag {
    stag: Stag,
    _release: Release,
}

impl FastRegStag {
    pub(crate) fn new(stag: Stag, release: Release) -> FastRegStag {
        FastRegStag {
            stag,
            _release: release,
        }
    }

    /// The STag, given to the peer once fast-registered.
    pub fn stag(&self) -> Stag {
        self.stag
    }
}

/// A memory window (Allocate Memory Window, Verbs section 7.2.7): invalid until a
/// [`crate::WrOpcode::BindMw`] binds it to part of a region, invalid again after a Local
/// Invalidate or a peer's Send with Invalidate. Deallocated when dropped.
#[derive(Debug)]
pub struct MemoryWindow {
    stag: Stag,
    _release: Release,
}

impl MemoryWindow {
    pub(crate) fn new(stag: Stag, release: Release) -> MemoryWindow {
        MemoryWindow {
            stag,
            _release: release,
        }
    }

    /// The window's STag, given to the peer once bound.
    pub fn stag(&self) -> Stag {
        self.stag
    }
}
