//! Caller ids onto small indexes, found without hashing where the ids are dense.
//!
//! iwarp-control hands out QP, CQ and S-RQ ids counting from 1, so on the fast path an id
//! indexes a vector directly; an id above [`DENSE_IDS`] (a caller that chooses its own)
//! goes to a hash map instead, so any id works and none costs more than a hash lookup.

use rustc_hash::FxHashMap;

/// Ids below this are looked up by indexing. The vector grows only to the largest such id
/// inserted, 4 octets an id: 256 KiB at most per table.
pub const DENSE_IDS: u32 = 1 << 16;

/// A map from ids of type `I` to `u32` indexes (slots, connection numbers).
#[derive(Debug, Clone)]
pub struct IdIndex<I> {
    /// Index + 1 of each id below [`DENSE_IDS`], 0 where the id is absent.
    dense: Vec<u32>,
    sparse: FxHashMap<I, u32>,
}

impl<I> Default for IdIndex<I> {
    fn default() -> IdIndex<I> {
        IdIndex {
            dense: Vec::new(),
            sparse: FxHashMap::default(),
        }
    }
}

impl<I: Copy + Eq + core::hash::Hash + Into<u32>> IdIndex<I> {
    pub fn new() -> IdIndex<I> {
        IdIndex::default()
    }

    /// The index of `id`, if it has one.
    #[inline]
    pub fn get(&self, id: I) -> Option<u32> {
        let n: u32 = id.into();
        if n < DENSE_IDS {
            match self.dense.get(n as usize) {
                Some(&v) if v != 0 => Some(v - 1),
                _ => None,
            }
        } else {
            self.sparse.get(&id).copied()
        }
    }

    pub fn contains(&self, id: I) -> bool {
        self.get(id).is_some()
    }

    /// Gives `id` the index `index` (below `u32::MAX`); returns the index it had.
    pub fn insert(&mut self, id: I, index: u32) -> Option<u32> {
        debug_assert!(index < u32::MAX);
        let n: u32 = id.into();
        if n < DENSE_IDS {
            let n = n as usize;
            if self.dense.len() <= n {
                self.dense.resize(n + 1, 0);
            }
            let old = core::mem::replace(&mut self.dense[n], index + 1);
            old.checked_sub(1)
        } else {
            self.sparse.insert(id, index)
        }
    }

    /// Takes `id` out; returns the index it had.
    pub fn remove(&mut self, id: I) -> Option<u32> {
        let n: u32 = id.into();
        if n < DENSE_IDS {
            let v = self.dense.get_mut(n as usize)?;
            core::mem::take(v).checked_sub(1)
        } else {
            self.sparse.remove(&id)
        }
    }

    /// Forgets every id, keeping the memory.
    pub fn clear(&mut self) {
        self.dense.fill(0);
        self.sparse.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_abi::id::QpId;
    use proptest::prelude::*;

    #[test]
    fn dense_and_sparse_ids_both_map() {
        let mut ix = IdIndex::<QpId>::new();
        assert_eq!(ix.insert(QpId::from(0), 7), None);
        assert_eq!(ix.insert(QpId::from(3), 0), None);
        assert_eq!(ix.insert(QpId::from(u32::MAX), 9), None);
        assert_eq!(ix.insert(QpId::from(DENSE_IDS), 4), None);
        assert_eq!(ix.get(QpId::from(0)), Some(7));
        assert_eq!(ix.get(QpId::from(3)), Some(0));
        assert_eq!(ix.get(QpId::from(2)), None);
        assert_eq!(ix.get(QpId::from(1000)), None);
        assert_eq!(ix.get(QpId::from(u32::MAX)), Some(9));
        assert_eq!(ix.get(QpId::from(DENSE_IDS)), Some(4));
        assert_eq!(ix.insert(QpId::from(3), 5), Some(0));
        assert_eq!(ix.remove(QpId::from(3)), Some(5));
        assert_eq!(ix.remove(QpId::from(3)), None);
        assert_eq!(ix.remove(QpId::from(u32::MAX)), Some(9));
        assert!(!ix.contains(QpId::from(u32::MAX)));
        ix.clear();
        assert_eq!(ix.get(QpId::from(0)), None);
        assert_eq!(ix.get(QpId::from(DENSE_IDS)), None);
    }

    proptest! {
        /// The index answers exactly as a hash map fed the same operations, for ids on
        /// both sides of the dense bound.
        #[test]
        fn agrees_with_a_hash_map(ops in proptest::collection::vec(
            (0u8..3, prop_oneof![0u32..64, DENSE_IDS - 2..DENSE_IDS + 2, any::<u32>()], 0u32..1000),
            0..200,
        )) {
            let mut ix = IdIndex::<QpId>::new();
            let mut reference = std::collections::HashMap::new();
            for (op, id, v) in ops {
                let id = QpId::from(id);
                match op {
                    0 => prop_assert_eq!(ix.insert(id, v), reference.insert(id, v)),
                    1 => prop_assert_eq!(ix.remove(id), reference.remove(&id)),
                    _ => prop_assert_eq!(ix.get(id), reference.get(&id).copied()),
                }
            }
            for (&id, &v) in &reference {
                prop_assert_eq!(ix.get(id), Some(v));
            }
        }
    }
}
