//! Memory registration, STags and the access checks every remote access goes through
//! (RFC 5040 section 5.4 / 7, Verbs section 7).
//!
//! An STag is a 24-bit index into the region table and an 8-bit key the consumer owns
//! (Verbs section 7.2.1); re-registration changes the key, so a stale STag fails.

use crate::raw::RawRegion;
use crate::types::Access;
use core::ptr::NonNull;
use iwarp_abi::id::{PdId, QpId};

/// A Fast-Register request: make `stag` name `len` bytes at `offset` of the memory region
/// `source` maps, with `access`, its tagged offsets starting at `base_to`.
#[derive(Debug, Clone, Copy)]
pub struct FastReg {
    pub stag: u32,
    pub source: u32,
    pub offset: u64,
    pub len: u64,
    pub access: Access,
    pub base_to: u64,
}

/// Why an access was refused. The engine maps each to the Terminate of the layer that
/// detected it (DDP for tagged placement, RDMAP for Read Requests and atomics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// No such STag, wrong key, or invalidated.
    InvalidStag,
    /// The STag belongs to another protection domain.
    NotAssociated,
    /// The region lacks the right asked for.
    Rights,
    /// The range falls outside the region.
    Bounds,
    /// An atomic target that is not 8-byte aligned (RFC 7306 section 5.1).
    Misaligned,
    /// A memory region that valid windows are still bound to cannot be invalidated
    /// (Verbs figure 23, "Invalidate MR STag had Bound MW").
    WindowsBound,
    /// The STag is not in the state the operation needs: Bind and Fast-Register take only an
    /// STag in the Invalid state (Verbs sections 7.10.6.1 and 7.3.2.5).
    NotInvalid,
    /// A window cannot be bound to a zero-based region (Verbs figure 19, section 7.10.6.1).
    ZeroBased,
}

/// The rights a peer uses.
const REMOTE_RIGHTS: Access =
    Access(Access::REMOTE_READ.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0);

/// Whether `local` (the rights of a region) allows the remote rights in `remote`: Remote
/// Write, and the atomics that write too, need Local Write (Verbs figures 18 and 20); Local
/// Read is always held here.
fn local_rights_allow(local: Access, remote: Access) -> bool {
    let writes = remote.0 & (Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0) != 0;
    !writes || local.contains(Access::LOCAL_WRITE)
}

/// What an STag names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A memory region, registered with its memory.
    Mr,
    /// A memory window: valid only while bound to part of a region (Verbs section 7.3).
    Mw,
    /// An STag reserved for fast-registration, valid once a Fast-Register WR gives it memory.
    FastReg,
}

#[derive(Debug, Clone, Copy)]
struct Region {
    kind: Kind,
    raw: Option<RawRegion>,
    pd: PdId,
    access: Access,
    /// The tagged offset of the region's first byte: its virtual address for VA-based
    /// regions, 0 for zero-based ones (Verbs section 7.2.3).
    base_to: u64,
    key: u8,
    valid: bool,
    /// For a bound window or a fast-registered STag: the region whose memory it names. That
    /// region cannot be deregistered while this one is valid (Verbs section 7.2.9), so the
    /// memory it points into stays mapped.
    parent: Option<u32>,
    /// For a bound window: the QP that bound it, the only one whose remote accesses and
    /// invalidations may use it (Verbs section 7.10.2).
    qp: Option<QpId>,
}

/// Why [`MemTable::deregister`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeregError {
    /// No such STag (or a stale key).
    InvalidStag,
    /// Valid windows or fast-registered STags still name this region's memory.
    Bound,
}

/// The STag table of one RNIC.
#[derive(Debug, Default)]
pub struct MemTable {
    regions: Vec<Option<Region>>,
    next_key: u8,
}

/// A checked range: the region and the byte offset inside it.
#[derive(Debug, Clone, Copy)]
pub struct Resolved {
    pub raw: RawRegion,
    pub offset: usize,
}

impl MemTable {
    pub fn new() -> MemTable {
        MemTable {
            regions: Vec::new(),
            next_key: 1,
        }
    }

    /// Registers memory and returns its STag.
    ///
    /// # Safety
    /// `base..base+len` must stay valid for reads and writes until [`MemTable::deregister`].
    pub unsafe fn register(
        &mut self,
        base: NonNull<u8>,
        len: usize,
        pd: PdId,
        access: Access,
        base_to: u64,
    ) -> u32 {
        // SAFETY: forwarded from this function's contract.
        let raw = unsafe { RawRegion::new(base, len) };
        self.insert(Self::mapped(raw, pd, access, base_to))
    }

    /// Reserves an STag for a memory window of `pd`; invalid until bound.
    pub fn alloc_mw(&mut self, pd: PdId) -> u32 {
        self.insert(Self::unbound(Kind::Mw, pd))
    }

    /// Reserves an STag for fast-registration in `pd`; invalid until registered.
    pub fn alloc_fastreg(&mut self, pd: PdId) -> u32 {
        self.insert(Self::unbound(Kind::FastReg, pd))
    }

    /// Registers memory under an STag the caller chose (iwarp-control owns STag allocation
    /// in the three-process RNIC). Fails when the STag is 0 or its index is taken.
    ///
    /// # Safety
    /// As for [`MemTable::register`].
    pub unsafe fn register_at(
        &mut self,
        stag: u32,
        base: NonNull<u8>,
        len: usize,
        pd: PdId,
        access: Access,
        base_to: u64,
    ) -> bool {
        // SAFETY: forwarded from this function's contract.
        let raw = unsafe { RawRegion::new(base, len) };
        self.insert_at(stag, Self::mapped(raw, pd, access, base_to))
    }

    /// Reserves a caller-chosen STag for a memory window (see [`MemTable::register_at`]).
    pub fn alloc_mw_at(&mut self, stag: u32, pd: PdId) -> bool {
        self.insert_at(stag, Self::unbound(Kind::Mw, pd))
    }

    /// Reserves a caller-chosen STag for fast-registration.
    pub fn alloc_fastreg_at(&mut self, stag: u32, pd: PdId) -> bool {
        self.insert_at(stag, Self::unbound(Kind::FastReg, pd))
    }

    /// A memory region over `raw` (its key is set on insertion).
    fn mapped(raw: RawRegion, pd: PdId, access: Access, base_to: u64) -> Region {
        Region {
            kind: Kind::Mr,
            raw: Some(raw),
            pd,
            access,
            base_to,
            key: 0,
            valid: true,
            parent: None,
            qp: None,
        }
    }

    fn unbound(kind: Kind, pd: PdId) -> Region {
        Region {
            kind,
            raw: None,
            pd,
            access: Access::default(),
            base_to: 0,
            key: 0,
            valid: false,
            parent: None,
            qp: None,
        }
    }

    fn insert_at(&mut self, stag: u32, mut region: Region) -> bool {
        let Some(index) = ((stag >> 8) as usize).checked_sub(1) else {
            return false;
        };
        if self.regions.get(index).is_some_and(Option::is_some) {
            return false;
        }
        if self.regions.len() <= index {
            self.regions.resize(index + 1, None);
        }
        region.key = stag as u8;
        self.regions[index] = Some(region);
        true
    }

    fn insert(&mut self, mut region: Region) -> u32 {
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1).max(1);
        region.key = key;
        let index = match self.regions.iter().position(Option::is_none) {
            Some(i) => {
                self.regions[i] = Some(region);
                i
            }
            None => {
                self.regions.push(Some(region));
                self.regions.len() - 1
            }
        };
        // Index 0 is never handed out as STag 0 (Chelsio rejects STag 0): start
        // indices at 1.
        (((index + 1) as u32) << 8) | key as u32
    }

    fn entry(&self, stag: u32) -> Option<&Region> {
        let index = (stag >> 8) as usize;
        let r = self.regions.get(index.checked_sub(1)?)?.as_ref()?;
        (r.key == (stag & 0xff) as u8).then_some(r)
    }

    /// Removes an STag. Refused for a region that valid windows or fast-registered STags
    /// still point into (Verbs section 7.2.9: deregistering a region with bound windows is
    /// an immediate error): their memory would otherwise be unmapped under them.
    pub fn deregister(&mut self, stag: u32) -> Result<(), DeregError> {
        if self.entry(stag).is_none() {
            return Err(DeregError::InvalidStag);
        }
        if self
            .regions
            .iter()
            .flatten()
            .any(|r| r.valid && r.parent == Some(stag))
        {
            return Err(DeregError::Bound);
        }
        self.regions[(stag >> 8) as usize - 1] = None;
        Ok(())
    }

    /// Invalidates an STag for QP `qp` of `pd`: a Local Invalidate, or with `remote` a Send
    /// with Invalidate. A valid window must have been bound by `qp`; anything else must be
    /// of `pd` (Verbs section 7.10.4). A peer may invalidate only an STag with a remote
    /// right (section 7.4.2). A memory region that valid windows are bound to stays valid
    /// (figure 23): invalidating it would leave those windows open onto its memory.
    pub fn invalidate(
        &mut self,
        stag: u32,
        pd: PdId,
        qp: QpId,
        remote: bool,
    ) -> Result<(), AccessError> {
        let r = self.entry(stag).ok_or(AccessError::InvalidStag)?;
        let owner_ok = match (r.kind, r.valid) {
            (Kind::Mw, true) => r.qp == Some(qp) && r.pd == pd,
            _ => r.pd == pd,
        };
        if !owner_ok {
            return Err(AccessError::NotAssociated);
        }
        if remote && r.access.0 & REMOTE_RIGHTS.0 == 0 {
            return Err(AccessError::Rights);
        }
        if r.kind != Kind::Mw
            && self
                .regions
                .iter()
                .flatten()
                .any(|w| w.kind == Kind::Mw && w.valid && w.parent == Some(stag))
        {
            return Err(AccessError::WindowsBound);
        }
        let r = self.entry_mut(stag).ok_or(AccessError::InvalidStag)?;
        r.valid = false;
        if r.kind != Kind::Mr {
            // A window or fast-registered STag no longer names any memory; its parent region
            // may be deregistered.
            r.parent = None;
            r.qp = None;
            r.raw = None;
        }
        Ok(())
    }

    /// Whether valid windows bound on QP `qp` remain (Verbs section 6.1.4: such a QP cannot
    /// be destroyed).
    pub fn windows_bound_to(&self, qp: QpId) -> bool {
        self.regions
            .iter()
            .flatten()
            .any(|r| r.kind == Kind::Mw && r.valid && r.qp == Some(qp))
    }

    fn entry_mut(&mut self, stag: u32) -> Option<&mut Region> {
        let index = (stag >> 8) as usize;
        let r = self.regions.get_mut(index.checked_sub(1)?)?.as_mut()?;
        (r.key == (stag & 0xff) as u8).then_some(r)
    }

    /// Binds window `mw` to `len` bytes at tagged offset `to` of region `mr`, on QP `qp` of
    /// `pd` (Verbs section 7.10.6.1): the window is in the Invalid state, the region is a
    /// valid memory region with the Bind right, all three share the PD, the range lies inside
    /// the region, which is VA-based (figure 19), and the rights asked for are remote ones the
    /// region's local rights allow
    /// (figure 20: remote write, and the atomics that write too, need local write). The
    /// window's tagged offsets are the region's (`to` addresses its first byte).
    #[allow(clippy::too_many_arguments)]
    pub fn bind_mw(
        &mut self,
        mw: u32,
        mr: u32,
        pd: PdId,
        qp: QpId,
        to: u64,
        len: u64,
        access: Access,
    ) -> Result<(), AccessError> {
        let region = match self.entry(mr) {
            Some(r) if r.kind == Kind::Mr => *r,
            _ => return Err(AccessError::InvalidStag),
        };
        // Verbs section 7.10.6.1: "The RNIC MUST check and enforce that the Memory Region
        // is not a Zero based TO MR" (figure 19: no window on a zero-based region). A region
        // whose tagged offsets start at 0 is zero-based by definition.
        if region.base_to == 0 {
            return Err(AccessError::ZeroBased);
        }
        let src = self.resolve(mr, pd, Access::BIND, to, len, false)?;
        let remote = Access(access.0 & REMOTE_RIGHTS.0);
        if remote.0 == 0 || !local_rights_allow(region.access, remote) {
            return Err(AccessError::Rights);
        }
        let w = self
            .entry_mut(mw)
            .filter(|w| w.kind == Kind::Mw)
            .ok_or(AccessError::InvalidStag)?;
        if w.pd != pd {
            return Err(AccessError::NotAssociated);
        }
        if w.valid {
            return Err(AccessError::NotInvalid);
        }
        w.raw = Some(src.raw.sub(src.offset, len as usize));
        w.base_to = to;
        w.access = remote;
        w.valid = true;
        w.parent = Some(mr);
        w.qp = Some(qp);
        Ok(())
    }

    /// Fast-registers `stag` (reserved by `alloc_fastreg`) over `len` bytes at `offset` of the
    /// memory region `source` maps.
    pub fn fast_register(&mut self, pd: PdId, r: FastReg) -> Result<(), AccessError> {
        let FastReg {
            stag,
            source,
            offset,
            len,
            access,
            base_to,
        } = r;
        let src = self
            .entry(source)
            .filter(|r| r.kind == Kind::Mr)
            .ok_or(AccessError::InvalidStag)?;
        if src.pd != pd {
            return Err(AccessError::NotAssociated);
        }
        let raw = src.raw.ok_or(AccessError::InvalidStag)?;
        let end = offset.checked_add(len).ok_or(AccessError::Bounds)?;
        if end > raw.len() as u64 {
            return Err(AccessError::Bounds);
        }
        let f = self
            .entry_mut(stag)
            .filter(|f| f.kind == Kind::FastReg)
            .ok_or(AccessError::InvalidStag)?;
        if f.pd != pd {
            return Err(AccessError::NotAssociated);
        }
        // A valid STag is remapped only after it is invalidated (Verbs section 7.3.2.5):
        // otherwise what a peer was given would silently name other memory.
        if f.valid {
            return Err(AccessError::NotInvalid);
        }
        if !local_rights_allow(access, access) {
            return Err(AccessError::Rights);
        }
        f.raw = Some(raw.sub(offset as usize, len as usize));
        f.access = access;
        f.base_to = base_to;
        f.valid = true;
        f.parent = Some(source);
        Ok(())
    }

    /// The check every local access (a work request's SGE) goes through: STag valid, same
    /// PD, right present, range in bounds (and 8-byte aligned for atomics). Windows are for
    /// remote access only (Verbs section 7.4.1: SGEs name memory regions). Touches no memory.
    pub fn resolve(
        &self,
        stag: u32,
        pd: PdId,
        need: Access,
        to: u64,
        len: u64,
        atomic: bool,
    ) -> Result<Resolved, AccessError> {
        let r = self.valid_entry(stag)?;
        if r.kind == Kind::Mw {
            return Err(AccessError::InvalidStag);
        }
        Self::check(r, pd, need, to, len, atomic)
    }

    /// The check every remote access arriving on QP `qp` goes through: as [`Self::resolve`],
    /// and a window only for the QP that bound it (Verbs section 7.10.6.2).
    #[allow(clippy::too_many_arguments)]
    pub fn resolve_remote(
        &self,
        stag: u32,
        pd: PdId,
        qp: QpId,
        need: Access,
        to: u64,
        len: u64,
        atomic: bool,
    ) -> Result<Resolved, AccessError> {
        let r = self.valid_entry(stag)?;
        if r.kind == Kind::Mw && r.qp != Some(qp) {
            return Err(AccessError::NotAssociated);
        }
        Self::check(r, pd, need, to, len, atomic)
    }

    fn valid_entry(&self, stag: u32) -> Result<&Region, AccessError> {
        self.entry(stag)
            .filter(|r| r.valid)
            .ok_or(AccessError::InvalidStag)
    }

    fn check(
        r: &Region,
        pd: PdId,
        need: Access,
        to: u64,
        len: u64,
        atomic: bool,
    ) -> Result<Resolved, AccessError> {
        if r.pd != pd {
            return Err(AccessError::NotAssociated);
        }
        if !r.access.contains(need) {
            return Err(AccessError::Rights);
        }
        let raw = r.raw.ok_or(AccessError::InvalidStag)?;
        let offset = to.checked_sub(r.base_to).ok_or(AccessError::Bounds)?;
        let end = offset.checked_add(len).ok_or(AccessError::Bounds)?;
        if end > raw.len() as u64 {
            return Err(AccessError::Bounds);
        }
        let offset = offset as usize;
        if atomic && !raw.aligned8(offset) {
            return Err(AccessError::Misaligned);
        }
        Ok(Resolved { raw, offset })
    }
}
