//! A single-producer single-consumer ring in shared memory.
//!
//! Layout (`#[repr(C)]`, offsets only, no pointers, so every process maps it anywhere):
//!
//! ```text
//! cache line 0: magic, version, capacity (a power of two), slot size
//! cache line 1: head  (next slot the producer writes; written by the producer only)
//! cache line 2: tail  (next slot the consumer reads;  written by the consumer only)
//! then capacity slots of `slot size` octets
//! ```
//!
//! The producer writes a slot, then publishes it with a Release store of `head`; the consumer
//! loads `head` with Acquire before reading the slot, then frees it with a Release store of
//! `tail`, which the producer loads with Acquire before reusing the slot. Each side caches the
//! other's index and reloads it only when the ring looks full (producer) or empty (consumer).
//! A batch publishes once: one store of `head` is the doorbell for all of it.

use crate::sync::{AtomicU64, Ordering};
use core::marker::PhantomData;
use core::mem::size_of;
use core::ptr::NonNull;

pub const RING_MAGIC: u64 = 0x6977_6172_7072_696e; // "iwarprin"
pub const RING_VERSION: u64 = 1;

#[repr(C, align(64))]
struct Line<T>(T);

/// The ring's header, at the start of its memory.
#[repr(C)]
pub struct RingHeader {
    meta: Line<[u64; 4]>,
    head: Line<AtomicU64>,
    tail: Line<AtomicU64>,
}

/// Octets of ring memory for `capacity` slots of `T`.
pub const fn ring_bytes<T>(capacity: usize) -> usize {
    size_of::<RingHeader>() + capacity * size_of::<T>()
}

/// Why a ring could not be attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    BadMagic,
    /// Written by a different ABI version.
    Version(u64),
    /// Capacity not a power of two, or the memory too small.
    Layout,
    /// The slot size in the header is not this `T`'s.
    SlotSize,
}

/// The ring's memory: a base pointer and a length, inside a mapping that outlives the ring.
#[derive(Clone, Copy)]
struct Raw {
    base: NonNull<u8>,
    mask: u64,
}

impl Raw {
    fn header(&self) -> &RingHeader {
        // SAFETY: `init`/`attach` checked that the memory holds a RingHeader at `base`,
        // 64-byte aligned; it lives as long as the mapping the caller keeps alive.
        unsafe { &*(self.base.as_ptr() as *const RingHeader) }
    }

    fn slot<T>(&self, index: u64) -> *mut T {
        let off = size_of::<RingHeader>() + (index & self.mask) as usize * size_of::<T>();
        // SAFETY: index & mask < capacity, so the slot lies inside the ring's memory.
        unsafe { self.base.as_ptr().add(off) as *mut T }
    }
}

/// Writes a fresh ring header into `mem` (which must be 64-byte aligned and at least
/// `ring_bytes::<T>(capacity)` long) and returns its two ends.
///
/// # Safety
/// `mem` must be valid for reads and writes for as long as either end is used (by any
/// process), and only one producer and one consumer may exist.
pub unsafe fn init<T: Copy>(
    mem: NonNull<u8>,
    len: usize,
    capacity: usize,
) -> Result<(Producer<T>, Consumer<T>), RingError> {
    if !capacity.is_power_of_two()
        || len < ring_bytes::<T>(capacity)
        || !(mem.as_ptr() as usize).is_multiple_of(64)
    {
        return Err(RingError::Layout);
    }
    // SAFETY: size and alignment checked above; nothing else uses the memory yet.
    unsafe {
        core::ptr::write(
            mem.as_ptr() as *mut RingHeader,
            RingHeader {
                meta: Line([
                    RING_MAGIC,
                    RING_VERSION,
                    capacity as u64,
                    size_of::<T>() as u64,
                ]),
                head: Line(AtomicU64::new(0)),
                tail: Line(AtomicU64::new(0)),
            },
        );
        attach(mem, len)
    }
}

/// Attaches to a ring another process initialised.
///
/// # Safety
/// As for [`init`]; the memory must hold a ring written by `init`.
pub unsafe fn attach<T: Copy>(
    mem: NonNull<u8>,
    len: usize,
) -> Result<(Producer<T>, Consumer<T>), RingError> {
    if len < size_of::<RingHeader>() || !(mem.as_ptr() as usize).is_multiple_of(64) {
        return Err(RingError::Layout);
    }
    // SAFETY: the header fits (checked) and is aligned.
    let meta = unsafe { &(*(mem.as_ptr() as *const RingHeader)).meta.0 };
    if meta[0] != RING_MAGIC {
        return Err(RingError::BadMagic);
    }
    if meta[1] != RING_VERSION {
        return Err(RingError::Version(meta[1]));
    }
    let capacity = meta[2] as usize;
    if !capacity.is_power_of_two() || len < ring_bytes::<T>(capacity) {
        return Err(RingError::Layout);
    }
    if meta[3] as usize != size_of::<T>() {
        return Err(RingError::SlotSize);
    }
    let raw = Raw {
        base: mem,
        mask: capacity as u64 - 1,
    };
    let head = raw.header().head.0.load(Ordering::Acquire);
    let tail = raw.header().tail.0.load(Ordering::Acquire);
    Ok((
        Producer {
            raw,
            head,
            cached_tail: tail,
            capacity: capacity as u64,
            _t: PhantomData,
        },
        Consumer {
            raw,
            tail,
            cached_head: head,
            _t: PhantomData,
        },
    ))
}

/// The writing end. Not `Clone`: one producer.
pub struct Producer<T> {
    raw: Raw,
    head: u64,
    cached_tail: u64,
    capacity: u64,
    _t: PhantomData<T>,
}

/// The reading end. Not `Clone`: one consumer.
pub struct Consumer<T> {
    raw: Raw,
    tail: u64,
    cached_head: u64,
    _t: PhantomData<T>,
}

// SAFETY: each end is the only writer of its index and of the slots it owns at a time; the
// protocol above (Release/Acquire pairs) makes hand-over between threads or processes sound.
unsafe impl<T: Copy + Send> Send for Producer<T> {}
// SAFETY: as for Producer.
unsafe impl<T: Copy + Send> Send for Consumer<T> {}

/// The ring is full: the item was not written (back-pressure, never loss).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl<T: Copy> Producer<T> {
    fn free(&mut self) -> u64 {
        let mut free = self.capacity - (self.head - self.cached_tail);
        if free == 0 {
            // SYNC POINT: pairs with the consumer's Release store of `tail`.
            self.cached_tail = self.raw.header().tail.0.load(Ordering::Acquire);
            free = self.capacity - (self.head - self.cached_tail);
        }
        free
    }

    /// Writes one item and publishes it.
    pub fn push(&mut self, item: T) -> Result<(), Full> {
        if self.free() == 0 {
            return Err(Full);
        }
        // SAFETY: the slot at `head` is free (head - tail < capacity) and only we write it.
        unsafe { core::ptr::write_volatile(self.raw.slot::<T>(self.head), item) };
        self.head += 1;
        // SYNC POINT: pairs with the consumer's Acquire load of `head`.
        self.raw.header().head.0.store(self.head, Ordering::Release);
        Ok(())
    }

    /// Writes as many items as fit and publishes them with one store (one doorbell).
    /// Returns how many were written.
    pub fn push_batch(&mut self, items: &[T]) -> usize {
        let n = (self.free() as usize).min(items.len());
        for (i, item) in items[..n].iter().enumerate() {
            // SAFETY: as in `push`, for each of the n free slots.
            unsafe { core::ptr::write_volatile(self.raw.slot::<T>(self.head + i as u64), *item) };
        }
        if n > 0 {
            self.head += n as u64;
            // SYNC POINT: pairs with the consumer's Acquire load of `head`.
            self.raw.header().head.0.store(self.head, Ordering::Release);
        }
        n
    }
}

impl<T: Copy> Consumer<T> {
    /// Takes the oldest item, if any.
    pub fn pop(&mut self) -> Option<T> {
        if self.tail == self.cached_head {
            // SYNC POINT: pairs with the producer's Release store of `head`.
            self.cached_head = self.raw.header().head.0.load(Ordering::Acquire);
            if self.tail == self.cached_head {
                return None;
            }
        }
        // SAFETY: tail < head: the producer wrote and published this slot.
        let item = unsafe { core::ptr::read_volatile(self.raw.slot::<T>(self.tail)) };
        self.tail += 1;
        // SYNC POINT: pairs with the producer's Acquire load of `tail`.
        self.raw.header().tail.0.store(self.tail, Ordering::Release);
        Some(item)
    }

    /// Items waiting now.
    pub fn len(&mut self) -> usize {
        // SYNC POINT: pairs with the producer's Release store of `head`.
        self.cached_head = self.raw.header().head.0.load(Ordering::Acquire);
        (self.cached_head - self.tail) as usize
    }

    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct CacheLine([u8; 64]);

    fn mem(bytes: usize) -> NonNull<u8> {
        let lines = Box::leak(vec![CacheLine([0; 64]); bytes.div_ceil(64)].into_boxed_slice());
        NonNull::new(lines.as_mut_ptr() as *mut u8).unwrap()
    }

    #[test]
    fn fifo_full_and_batches() {
        let len = ring_bytes::<u64>(8);
        let m = mem(len);
        // SAFETY: leaked memory, one producer and one consumer.
        let (mut p, mut c) = unsafe { init::<u64>(m, len, 8) }.unwrap();
        for i in 0..8 {
            p.push(i).unwrap();
        }
        assert_eq!(p.push(8), Err(Full));
        assert_eq!(c.pop(), Some(0));
        assert_eq!(p.push_batch(&[100, 101, 102]), 1);
        let got: Vec<u64> = std::iter::from_fn(|| c.pop()).collect();
        assert_eq!(got, vec![1, 2, 3, 4, 5, 6, 7, 100]);
        assert!(c.is_empty());
    }

    #[test]
    fn attach_checks_the_header() {
        let len = ring_bytes::<u64>(4);
        let m = mem(len);
        // SAFETY: as above.
        unsafe {
            assert!(init::<u64>(m, len, 3).is_err());
            init::<u64>(m, len, 4).unwrap();
            assert!(attach::<u32>(m, len).is_err_and(|e| e == RingError::SlotSize));
            *(m.as_ptr() as *mut u64) = 0;
            assert!(attach::<u64>(m, len).is_err_and(|e| e == RingError::BadMagic));
        }
    }

    #[test]
    fn two_threads_in_order() {
        let len = ring_bytes::<u64>(64);
        let m = mem(len);
        // SAFETY: as above.
        let (mut p, mut c) = unsafe { init::<u64>(m, len, 64) }.unwrap();
        let n = 1_000_000u64;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < n {
                if p.push(i).is_ok() {
                    i += 1;
                }
            }
        });
        let mut next = 0;
        while next < n {
            if let Some(v) = c.pop() {
                assert_eq!(v, next);
                next += 1;
            }
        }
        t.join().unwrap();
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    /// Every interleaving of a producer pushing three items through a two-slot ring and a
    /// consumer popping them: nothing lost, nothing duplicated, order kept, no torn slot.
    #[test]
    fn ring_loom() {
        loom::model(|| {
            #[derive(Clone, Copy)]
            #[repr(C, align(64))]
            struct CacheLine([u8; 64]);
            let len = ring_bytes::<u64>(2);
            let lines = Box::leak(vec![CacheLine([0; 64]); len.div_ceil(64)].into_boxed_slice());
            let m = NonNull::new(lines.as_mut_ptr() as *mut u8).unwrap();
            // SAFETY: leaked memory, one producer and one consumer.
            let (mut p, mut c) = unsafe { init::<u64>(m, len, 2) }.unwrap();
            let t = loom::thread::spawn(move || {
                let mut i = 1;
                while i <= 3 {
                    if p.push(i).is_ok() {
                        i += 1;
                    } else {
                        loom::thread::yield_now();
                    }
                }
            });
            let mut got = Vec::new();
            while got.len() < 3 {
                match c.pop() {
                    Some(v) => got.push(v),
                    None => loom::thread::yield_now(),
                }
            }
            t.join().unwrap();
            assert_eq!(got, vec![1, 2, 3]);
        });
    }
}
