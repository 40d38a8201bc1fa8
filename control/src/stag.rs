//! STag allocation.
//!
//! An STag is 32 bits: a 24-bit index the RNIC chooses and an 8-bit key (RFC 5040 section
//! 2.1; Verbs section 7.2 "STag Index" and "STag Key"). The index selects the table entry; the
//! key makes an old STag for a reused or re-registered index invalid, so a peer holding a stale
//! STag is refused instead of reaching new memory. Every allocation and every re-key of an
//! index therefore moves its key on, and the key an index had when freed is remembered.
//!
//! Index 0 is never handed out: STag 0 is the reserved "no STag" value of the Verbs spec, and
//! Chelsio hardware refuses a tagged segment carrying it.

use crate::error::{Error, Resource};

/// The largest index: 24 bits.
pub const MAX_INDEX: u32 = (1 << 24) - 1;

pub use iwarp_abi::id::Stag;

/// What an STag names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StagKind {
    /// A memory region (Register Memory Region, Verbs section 7.2.3).
    Mr,
    /// A memory window (Allocate Memory Window, section 7.2.7).
    Mw,
    /// An STag reserved for Fast-Register work requests (section 7.2.8).
    FastReg,
}

impl StagKind {
    fn slot(self) -> usize {
        match self {
            StagKind::Mr => 0,
            StagKind::Mw => 1,
            StagKind::FastReg => 2,
        }
    }
}

/// What the table remembers of an allocated STag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagEntry {
    pub kind: StagKind,
    pub pd: u32,
    /// The application (control's connection id) that owns it.
    pub app: u32,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    /// The key the index has now (or had when freed).
    key: u8,
    entry: Option<StagEntry>,
}

/// The STag table of one RNIC.
#[derive(Debug)]
pub struct StagTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Allocated STags by kind ([`StagKind::slot`]).
    live: [u32; 3],
    limit: u32,
}

impl StagTable {
    /// A table that hands out at most `limit` STags at a time (capped at 2^24 - 1).
    pub fn new(limit: u32) -> StagTable {
        StagTable {
            // Slot 0 is the reserved index; it never enters the free list.
            slots: vec![Slot {
                key: 0,
                entry: None,
            }],
            free: Vec::new(),
            live: [0; 3],
            limit: limit.min(MAX_INDEX),
        }
    }

    /// How many STags are allocated now.
    pub fn live(&self) -> u32 {
        self.live.iter().sum()
    }

    /// How many STags of `kind` are allocated now.
    pub fn live_of(&self, kind: StagKind) -> u32 {
        self.live[kind.slot()]
    }

    /// Allocates an STag for `entry`. A reused index gets a key different from the one it had.
    pub fn alloc(&mut self, entry: StagEntry) -> Result<Stag, Error> {
        if self.live() >= self.limit {
            return Err(Error::InsufficientResources {
                what: match entry.kind {
                    StagKind::Mw => Resource::Mw,
                    _ => Resource::Mr,
                },
                limit: self.limit,
            });
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    key: 0,
                    entry: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.key = slot.key.wrapping_add(1);
        slot.entry = Some(entry);
        self.live[entry.kind.slot()] += 1;
        Ok(Stag::new(index, slot.key))
    }

    /// The entry `stag` names, if its index is allocated and its key is current.
    pub fn get(&self, stag: Stag) -> Result<&StagEntry, Error> {
        match self.slots.get(stag.index() as usize) {
            Some(Slot {
                key,
                entry: Some(e),
            }) if stag.index() != 0 && *key == stag.key() => Ok(e),
            _ => Err(Error::InvalidStag { stag: stag.0 }),
        }
    }

    /// Checks that `stag` is current, of `kind`, owned by `app`: what every verb naming an
    /// STag does first. Another application's STag is reported as invalid, never as found.
    pub fn check(&self, stag: Stag, kind: StagKind, app: u32) -> Result<StagEntry, Error> {
        let e = *self.get(stag)?;
        if e.kind != kind || e.app != app {
            return Err(Error::InvalidStag { stag: stag.0 });
        }
        Ok(e)
    }

    /// Gives the index a new key (re-registration, invalidation): the old STag stops working.
    pub fn rekey(&mut self, stag: Stag) -> Result<Stag, Error> {
        self.get(stag)?;
        let slot = &mut self.slots[stag.index() as usize];
        slot.key = slot.key.wrapping_add(1);
        Ok(Stag::new(stag.index(), slot.key))
    }

    /// Frees `stag`; its index may be reused, under another key.
    pub fn free(&mut self, stag: Stag) -> Result<StagEntry, Error> {
        let e = *self.get(stag)?;
        self.slots[stag.index() as usize].entry = None;
        self.free.push(stag.index());
        self.live[e.kind.slot()] -= 1;
        Ok(e)
    }

    /// Every STag owned by `app`, for cleanup when the application goes away.
    pub fn owned_by(&self, app: u32) -> Vec<(Stag, StagEntry)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s.entry {
                Some(e) if e.app == app => Some((Stag::new(i as u32, s.key), e)),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mr(app: u32, pd: u32) -> StagEntry {
        StagEntry {
            kind: StagKind::Mr,
            pd,
            app,
        }
    }

    #[test]
    fn index_and_key_split_as_rfc5040_says() {
        let s = Stag::new(0x123456, 0x78);
        assert_eq!(s.0, 0x1234_5678);
        assert_eq!((s.index(), s.key()), (0x123456, 0x78));
    }

    #[test]
    fn stag_zero_is_never_handed_out_and_never_valid() {
        let mut t = StagTable::new(10);
        for _ in 0..10 {
            let s = t.alloc(mr(1, 1)).unwrap();
            assert_ne!(s.index(), 0);
            assert_ne!(s.0, 0);
        }
        assert!(t.get(Stag(0)).is_err());
        assert!(t.get(Stag::new(0, 1)).is_err());
    }

    #[test]
    fn a_reused_index_gets_a_new_key_and_the_old_stag_is_refused() {
        let mut t = StagTable::new(4);
        let a = t.alloc(mr(1, 1)).unwrap();
        t.free(a).unwrap();
        let b = t.alloc(mr(1, 1)).unwrap();
        assert_eq!(a.index(), b.index());
        assert_ne!(a.key(), b.key());
        assert_eq!(t.get(a), Err(Error::InvalidStag { stag: a.0 }));
        assert!(t.get(b).is_ok());
        // Double free is an error, not a corruption of the free list.
        t.free(b).unwrap();
        assert!(t.free(b).is_err());
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn rekey_invalidates_the_old_stag_and_keeps_the_entry() {
        let mut t = StagTable::new(4);
        let a = t.alloc(mr(7, 3)).unwrap();
        let b = t.rekey(a).unwrap();
        assert_eq!(a.index(), b.index());
        assert!(t.get(a).is_err());
        assert_eq!(t.get(b).unwrap().pd, 3);
        // 255 more re-keys wrap the key around without reusing the current one in between.
        let mut cur = b;
        for _ in 0..255 {
            let n = t.rekey(cur).unwrap();
            assert_ne!(n, cur);
            cur = n;
        }
        assert_eq!(t.live(), 1);
    }

    #[test]
    fn limit_kind_and_owner_are_enforced() {
        let mut t = StagTable::new(2);
        let a = t.alloc(mr(1, 1)).unwrap();
        let w = t
            .alloc(StagEntry {
                kind: StagKind::Mw,
                pd: 1,
                app: 1,
            })
            .unwrap();
        assert!(matches!(
            t.alloc(mr(1, 1)),
            Err(Error::InsufficientResources { limit: 2, .. })
        ));
        assert!(t.check(a, StagKind::Mr, 1).is_ok());
        assert!(t.check(a, StagKind::Mw, 1).is_err(), "an MR is not an MW");
        assert!(t.check(a, StagKind::Mr, 2).is_err(), "another app's STag");
        assert!(t.check(w, StagKind::Mw, 1).is_ok());
        assert_eq!(t.owned_by(1).len(), 2);
        assert!(t.owned_by(2).is_empty());
    }
}
