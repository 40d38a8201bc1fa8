//! The only place the engine touches registered memory through raw pointers.
//!
//! Registered memory may be mapped by other processes at the same time (the application
//! that registered it, other daemons' cores), so it is never turned into a Rust reference
//! for longer than a copy: bytes move with `ptr::copy_nonoverlapping`, and atomics use
//! `AtomicU64::from_ptr` so that they are real atomic instructions on the shared memory
//! (RFC 7306 section 5.3 asks for atomicity against other streams).

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

/// A registered range of memory: base pointer and length.
#[derive(Debug, Clone, Copy)]
pub struct RawRegion {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a RawRegion is only an address range; every access goes through the functions
// below, which the engine calls only after its bounds checks. Whoever registered the memory
// promised (in `Rnic::register_mr`'s contract) that it stays mapped until deregistered.
unsafe impl Send for RawRegion {}

impl RawRegion {
    /// # Safety
    /// `base..base+len` must be valid for reads and writes, and stay so until the region is
    /// deregistered.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> RawRegion {
        RawRegion { base, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The sub-range `offset..offset+len` (a memory window or fast-registered range).
    /// Panics if out of bounds: callers check first.
    pub fn sub(&self, offset: usize, len: usize) -> RawRegion {
        assert!(offset.checked_add(len).is_some_and(|e| e <= self.len));
        RawRegion {
            // SAFETY: offset <= len, so the result stays within (or one past) the region.
            base: unsafe { NonNull::new_unchecked(self.base.as_ptr().add(offset)) },
            len,
        }
    }

    /// Copies `src` into the region at `offset`. Panics if out of bounds (callers check
    /// first; this is a broken invariant, never a wire input).
    pub fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset.checked_add(src.len()).is_some_and(|e| e <= self.len));
        // SAFETY: bounds checked above; the region is valid for writes (constructor
        // contract); `src` is a Rust slice, which cannot overlap memory the engine writes.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(offset), src.len())
        }
    }

    /// Copies from the region at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset.checked_add(dst.len()).is_some_and(|e| e <= self.len));
        // SAFETY: bounds checked above; valid for reads (constructor contract).
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        }
    }

    fn atomic(&self, offset: usize) -> &AtomicU64 {
        assert!(offset.checked_add(8).is_some_and(|e| e <= self.len));
        let p = self.base.as_ptr().wrapping_add(offset);
        assert!((p as usize).is_multiple_of(8));
        // SAFETY: in bounds and 8-byte aligned (checked above); AtomicU64 has the layout of
        // u64; all concurrent accessors of this word in the engine use atomic operations.
        unsafe { AtomicU64::from_ptr(p as *mut u64) }
    }

    /// Whether the address of `offset` is 8-byte aligned (RFC 7306 section 5.1).
    pub fn aligned8(&self, offset: usize) -> bool {
        (self.base.as_ptr() as usize)
            .wrapping_add(offset)
            .is_multiple_of(8)
    }

    /// Masked FetchAdd (RFC 7306 section 5.1.1) in the target memory's byte order (the
    /// host's). Returns the original value.
    pub fn fetch_add(&self, offset: usize, add: u64, add_mask: u64) -> u64 {
        let a = self.atomic(offset);
        let mut old = a.load(Ordering::Acquire);
        loop {
            let new = masked_add(old, add, add_mask);
            match a.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return old,
                Err(v) => old = v,
            }
        }
    }

    /// Masked CmpSwap (RFC 7306 section 5.1.2). Returns the original value.
    pub fn cmp_swap(
        &self,
        offset: usize,
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    ) -> u64 {
        let a = self.atomic(offset);
        let mut old = a.load(Ordering::Acquire);
        loop {
            if old & compare_mask != compare & compare_mask {
                return old;
            }
            let new = (old & !swap_mask) | (swap & swap_mask);
            match a.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return old,
                Err(v) => old = v,
            }
        }
    }

    /// Reads the 64-bit word at `offset` atomically.
    #[cfg(test)]
    pub fn load_u64(&self, offset: usize) -> u64 {
        self.atomic(offset).load(Ordering::Acquire)
    }
}

/// RFC 7306's masked add: independent fields whose most significant bit is marked in the
/// mask; a carry out of a marked bit is discarded. A zero mask is a plain 64-bit add.
pub fn masked_add(value: u64, add: u64, mask: u64) -> u64 {
    let mut out = 0u64;
    let mut carry = 0u64;
    for bit in 0..64 {
        let b = 1u64 << bit;
        let sum = carry + ((value & b) >> bit) + ((add & b) >> bit);
        if sum & 1 != 0 {
            out |= b;
        }
        carry = (sum >> 1) & u64::from(mask & b == 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_add_matches_rfc_pseudocode() {
        assert_eq!(masked_add(5, 7, 0), 12);
        assert_eq!(masked_add(u64::MAX, 1, 0), 0);
        // Two 32-bit fields: the MSB of each marked; the low field's carry is dropped.
        let mask = 0x8000_0000_8000_0000;
        assert_eq!(
            masked_add(0x0000_0001_ffff_ffff, 0x0000_0001_0000_0001, mask),
            0x0000_0002_0000_0000
        );
        // Eight 8-bit fields.
        let mask = 0x8080_8080_8080_8080;
        assert_eq!(
            masked_add(0x01ff_01ff_01ff_01ff, 0x0101_0101_0101_0101, mask),
            0x0200_0200_0200_0200
        );
    }

    #[test]
    fn atomics_on_memory() {
        let mut words = vec![0u64; 4];
        // SAFETY: `words` outlives `r`.
        let r = unsafe { RawRegion::new(NonNull::new(words.as_mut_ptr() as *mut u8).unwrap(), 32) };
        assert_eq!(r.fetch_add(8, 10, 0), 0);
        assert_eq!(r.fetch_add(8, 5, 0), 10);
        assert_eq!(r.load_u64(8), 15);
        assert_eq!(r.cmp_swap(8, 15, u64::MAX, 99, u64::MAX), 15);
        assert_eq!(r.load_u64(8), 99);
        assert_eq!(r.cmp_swap(8, 1, u64::MAX, 7, u64::MAX), 99);
        assert_eq!(r.load_u64(8), 99);
        // Compare mask zero: unconditional swap.
        assert_eq!(r.cmp_swap(8, 0, 0, 7, u64::MAX), 99);
        assert_eq!(r.load_u64(8), 7);
        assert!(!r.aligned8(4));
        drop(words);
    }
}
