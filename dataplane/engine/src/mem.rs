//! Memory registration, STags and the access checks every remote access goes through
//! (RFC 5040 section 5.4 / 7, Verbs section 7).
//!
//! An STag is a 24-bit index into the region table and an 8-bit key the consumer owns
//! (Verbs section 7.2.1); re-registration changes the key, so a stale STag fails.

use crate::raw::RawRegion;
use crate::types::Access;
use core::ptr::NonNull;

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
}

#[derive(Debug, Clone, Copy)]
struct Region {
    raw: RawRegion,
    pd: u32,
    access: Access,
    /// The tagged offset of the region's first byte: its virtual address for VA-based
    /// regions, 0 for zero-based ones (Verbs section 7.2.3).
    base_to: u64,
    key: u8,
    valid: bool,
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
        pd: u32,
        access: Access,
        base_to: u64,
    ) -> u32 {
        // SAFETY: forwarded from this function's contract.
        let raw = unsafe { RawRegion::new(base, len) };
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1).max(1);
        let region = Region {
            raw,
            pd,
            access,
            base_to,
            key,
            valid: true,
        };
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
        // Index 0 is never handed out as STag 0 (Chelsio rejects STag 0, DESIGN.md): start
        // indices at 1.
        (((index + 1) as u32) << 8) | key as u32
    }

    fn entry(&self, stag: u32) -> Option<&Region> {
        let index = (stag >> 8) as usize;
        let r = self.regions.get(index.checked_sub(1)?)?.as_ref()?;
        (r.key == (stag & 0xff) as u8).then_some(r)
    }

    pub fn deregister(&mut self, stag: u32) -> bool {
        if self.entry(stag).is_none() {
            return false;
        }
        self.regions[(stag >> 8) as usize - 1] = None;
        true
    }

    /// Invalidates an STag (Local Invalidate or Send with Invalidate). Fails for an unknown
    /// STag or one of another PD.
    pub fn invalidate(&mut self, stag: u32, pd: u32) -> Result<(), AccessError> {
        let index = (stag >> 8) as usize;
        let r = self
            .regions
            .get_mut(index.wrapping_sub(1))
            .and_then(Option::as_mut)
            .filter(|r| r.key == (stag & 0xff) as u8)
            .ok_or(AccessError::InvalidStag)?;
        if r.pd != pd {
            return Err(AccessError::NotAssociated);
        }
        r.valid = false;
        Ok(())
    }

    /// The check every access goes through: STag valid, same PD, right present, range in
    /// bounds (and 8-byte aligned for atomics). Touches no memory.
    pub fn resolve(
        &self,
        stag: u32,
        pd: u32,
        need: Access,
        to: u64,
        len: u64,
        atomic: bool,
    ) -> Result<Resolved, AccessError> {
        let r = self
            .entry(stag)
            .filter(|r| r.valid)
            .ok_or(AccessError::InvalidStag)?;
        if r.pd != pd {
            return Err(AccessError::NotAssociated);
        }
        if !r.access.contains(need) {
            return Err(AccessError::Rights);
        }
        let offset = to.checked_sub(r.base_to).ok_or(AccessError::Bounds)?;
        let end = offset.checked_add(len).ok_or(AccessError::Bounds)?;
        if end > r.raw.len() as u64 {
            return Err(AccessError::Bounds);
        }
        let offset = offset as usize;
        if atomic && !r.raw.aligned8(offset) {
            return Err(AccessError::Misaligned);
        }
        Ok(Resolved { raw: r.raw, offset })
    }
}
