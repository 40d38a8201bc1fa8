//! Cache prefetch hints, for loops that visit many connections' state in a known order.
//!
//! With thousands of connections, each visit meets its connection's state cold, spread over
//! several separately allocated structures, and pays one memory latency after another as
//! each load depends on the last. Asking for the next visits' lines while this one runs lets
//! those misses overlap it. A hint is only ever a hint: it reads nothing into the program,
//! and a stale or wild address (a structure moved or freed since it was noted) costs a
//! useless fetch, never a fault, so addresses may be kept as plain integers.

const LINE: usize = 64;

/// Asks the cache for the lines of `len` octets from address `addr`; `addr` 0 asks for
/// nothing (a hint not yet known).
#[inline(always)]
pub fn prefetch_addr(addr: usize, len: usize) {
    if addr == 0 {
        return;
    }
    let end = addr.saturating_add(len);
    let mut line = Some(addr & !(LINE - 1));
    while let Some(at) = line.filter(|&at| at < end) {
        fetch(at);
        line = at.checked_add(LINE);
    }
}

/// Asks the cache for the lines that hold `value`.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    prefetch_addr(value as *const T as usize, size_of::<T>());
}

/// The address of `value`, as a hint for [`prefetch_addr`].
#[inline(always)]
pub fn address_of<T>(value: &T) -> usize {
    value as *const T as usize
}

/// Where a map's entry of key `k` and value `v` starts, as a hint for [`prefetch_addr`] of
/// `size_of::<(K, V)>()` octets: at whichever of the two the compiler placed first.
#[inline(always)]
pub fn entry_address<K, V>(k: &K, v: &V) -> usize {
    address_of(k).min(address_of(v))
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fetch(line: usize) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: SSE is part of the x86_64 baseline, so the instruction exists on every CPU
    // this code runs on. PREFETCHT0 only moves a line towards the core: it dereferences
    // nothing the program sees, and an address that is not mapped is dropped without a
    // fault.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn fetch(_line: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_at_any_address_are_harmless() {
        let v = vec![7u64; 1000];
        prefetch(&v[500]);
        prefetch_addr(address_of(&v[0]), v.len() * 8);
        // Unmapped and wrapping addresses: nothing is read, nothing faults.
        prefetch_addr(0, 4096);
        prefetch_addr(64, 4096);
        prefetch_addr(usize::MAX - 100, 4096);
        assert_eq!(v[500], 7);
    }
}
