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

use crate::error::Error;
use crate::segment::Segment;
use crate::sync::{AtomicU64, Ordering};
use core::marker::PhantomData;
use core::mem::size_of;
use core::ptr::NonNull;
use std::sync::Arc;

/// "iwarprin", little-endian.
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"iwarprin");
/// The ring layout's version (part of the ABI; see [`crate::ABI_VERSION`]).
pub const RING_VERSION: u64 = 1;

/// A type that may live in a ring slot shared with another, untrusted, process.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` octets must be a valid value (integers and
/// arrays of integers, `#[repr(C)]`, explicit padding fields): a peer may write anything.
pub unsafe trait Slot: Copy {}

// SAFETY: every bit pattern is a valid integer.
unsafe impl Slot for u64 {}
// SAFETY: as above.
unsafe impl Slot for u32 {}

#[repr(C, align(64))]
struct Line<T>(T);

/// The ring's header, at the start of its memory.
#[repr(C)]
pub struct RingHeader {
    /// magic, version, capacity, slot size.
    meta: Line<[u64; 4]>,
    head: Line<AtomicU64>,
    tail: Line<AtomicU64>,
}

/// Octets of ring memory for `capacity` slots of `T`.
pub const fn ring_bytes<T>(capacity: usize) -> usize {
    size_of::<RingHeader>() + capacity * size_of::<T>()
}

/// The ring's memory: a base pointer inside a mapping that outlives the ring.
#[derive(Clone)]
struct Raw {
    base: NonNull<u8>,
    mask: u64,
    /// Keeps the mapping alive when the ring lives in a [`Segment`].
    _keep: Option<Arc<Segment>>,
    /// Under loom, one tracked cell per slot: loom cannot see plain memory, so each slot
    /// access is mirrored on a `loom::cell::UnsafeCell`, and loom reports any write and read
    /// of one slot that the index protocol does not order (a data race).
    #[cfg(loom)]
    track: Arc<Vec<loom::cell::UnsafeCell<()>>>,
}

impl Raw {
    fn header(&self) -> &RingHeader {
        // SAFETY: `init`/`attach` checked that the memory holds a RingHeader at `base`,
        // 64-byte aligned; it lives as long as the mapping (kept alive by `_keep` or by the
        // caller of the unsafe constructors).
        unsafe { &*(self.base.as_ptr() as *const RingHeader) }
    }

    /// Writes slot `index` (mod capacity).
    ///
    /// # Safety
    /// The slot must be free: the consumer released it (Acquire of `tail` seen) and only the
    /// producer calls this.
    unsafe fn write_slot<T: Slot>(&self, index: u64, item: T) {
        #[cfg(loom)]
        self.track[(index & self.mask) as usize].with_mut(|_| ());
        // SAFETY: in bounds (see `slot`); exclusive per the caller's contract.
        unsafe { write_shared(self.slot::<T>(index), item) }
    }

    /// Reads slot `index` (mod capacity).
    ///
    /// # Safety
    /// The slot must be published (Acquire of `head` seen) and only the consumer calls this.
    unsafe fn read_slot<T: Slot>(&self, index: u64) -> T {
        #[cfg(loom)]
        self.track[(index & self.mask) as usize].with(|_| ());
        // SAFETY: in bounds; any bit pattern is a valid T (`Slot`).
        unsafe { read_shared(self.slot::<T>(index)) }
    }

    fn slot<T>(&self, index: u64) -> *mut T {
        let off = size_of::<RingHeader>() + (index & self.mask) as usize * size_of::<T>();
        // SAFETY: index & mask < capacity, so the slot lies inside the ring's memory whatever
        // value `index` has (a corrupted index from a peer stays in bounds).
        unsafe { self.base.as_ptr().add(off) as *mut T }
    }
}

/// Whether a record is made of whole 8-octet words (every ring record but the test ones).
const fn in_words<T>() -> bool {
    size_of::<T>().is_multiple_of(8) && core::mem::align_of::<T>() >= 8
}

// Slots are read and written with volatile accesses, so the compiler neither re-reads a slot
// the peer may rewrite after we checked it nor drops or merges stores the peer must see. A
// volatile access of a whole record is split by the compiler into one access per field and
// per array element: the 256-octet send WQE, mostly octet arrays, became hundreds of
// one-octet loads and stores, the hottest instructions of the daemon's fast path. Records
// made of 8-octet words go a word at a time instead, the local side with plain accesses.

/// Reads one record from shared memory.
///
/// # Safety
/// `src` is valid for reads of one `T`; every bit pattern is a valid `T` (`Slot`).
#[inline(always)]
unsafe fn read_shared<T: Slot>(src: *const T) -> T {
    if !in_words::<T>() {
        // SAFETY: as the caller promised.
        return unsafe { core::ptr::read_volatile(src) };
    }
    let mut item = core::mem::MaybeUninit::<T>::uninit();
    let (s, d) = (src as *const u64, item.as_mut_ptr() as *mut u64);
    for i in 0..size_of::<T>() / 8 {
        // SAFETY: i < size_of::<T>() / 8: both words lie inside their 8-aligned records.
        unsafe { d.add(i).write(core::ptr::read_volatile(s.add(i))) }
    }
    // SAFETY: every word was written, and any bit pattern is a valid T.
    unsafe { item.assume_init() }
}

/// Writes one record into shared memory.
///
/// # Safety
/// `dst` is valid for writes of one `T`.
#[inline(always)]
unsafe fn write_shared<T: Slot>(dst: *mut T, item: T) {
    if !in_words::<T>() {
        // SAFETY: as the caller promised.
        return unsafe { core::ptr::write_volatile(dst, item) };
    }
    let (s, d) = (&item as *const T as *const u64, dst as *mut u64);
    for i in 0..size_of::<T>() / 8 {
        // SAFETY: as in `read_shared`.
        unsafe { core::ptr::write_volatile(d.add(i), s.add(i).read()) }
    }
}

fn aligned(mem: NonNull<u8>) -> bool {
    (mem.as_ptr() as usize).is_multiple_of(64)
}

/// Writes a fresh ring header into `mem` (which must be 64-byte aligned and at least
/// `ring_bytes::<T>(capacity)` long) and returns its two ends.
///
/// # Safety
/// `mem` must be valid for reads and writes for as long as either end is used (by any
/// process), and only one producer and one consumer may exist.
pub unsafe fn init<T: Slot>(
    mem: NonNull<u8>,
    len: usize,
    capacity: usize,
) -> Result<(Producer<T>, Consumer<T>), Error> {
    // SAFETY: forwarded contract.
    unsafe { init_keep(mem, len, capacity, None) }
}

unsafe fn init_keep<T: Slot>(
    mem: NonNull<u8>,
    len: usize,
    capacity: usize,
    keep: Option<Arc<Segment>>,
) -> Result<(Producer<T>, Consumer<T>), Error> {
    if !capacity.is_power_of_two() || len < ring_bytes::<T>(capacity) || !aligned(mem) {
        return Err(Error::Layout);
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
        attach_keep(mem, len, keep)
    }
}

/// Attaches to a ring another process initialised.
///
/// # Safety
/// As for [`init`]; the memory must hold a ring written by `init`.
pub unsafe fn attach<T: Slot>(
    mem: NonNull<u8>,
    len: usize,
) -> Result<(Producer<T>, Consumer<T>), Error> {
    // SAFETY: forwarded contract.
    unsafe { attach_keep(mem, len, None) }
}

unsafe fn attach_keep<T: Slot>(
    mem: NonNull<u8>,
    len: usize,
    keep: Option<Arc<Segment>>,
) -> Result<(Producer<T>, Consumer<T>), Error> {
    if len < size_of::<RingHeader>() || !aligned(mem) {
        return Err(Error::Layout);
    }
    // SAFETY: the header fits (checked) and is aligned; plain integers.
    let meta = unsafe { core::ptr::read_volatile(mem.as_ptr() as *const [u64; 4]) };
    if meta[0] != RING_MAGIC {
        return Err(Error::BadMagic);
    }
    if meta[1] != RING_VERSION {
        return Err(Error::Version {
            found: meta[1] as u32,
            expected: RING_VERSION as u32,
        });
    }
    let capacity = meta[2];
    if !capacity.is_power_of_two()
        || capacity > (len / size_of::<T>().max(1)) as u64
        || len < ring_bytes::<T>(capacity as usize)
    {
        return Err(Error::Layout);
    }
    if meta[3] != size_of::<T>() as u64 {
        return Err(Error::SlotSize {
            found: meta[3],
            expected: size_of::<T>() as u64,
        });
    }
    let raw = Raw {
        base: mem,
        mask: capacity - 1,
        _keep: keep,
        #[cfg(loom)]
        track: Arc::new(
            (0..capacity)
                .map(|_| loom::cell::UnsafeCell::new(()))
                .collect(),
        ),
    };
    let head = raw.header().head.0.load(Ordering::Acquire);
    let tail = raw.header().tail.0.load(Ordering::Acquire);
    Ok((
        Producer {
            raw: raw.clone(),
            head,
            cached_tail: tail,
            capacity,
            corrupt: false,
            _t: PhantomData,
        },
        Consumer {
            raw,
            tail,
            cached_head: head,
            capacity,
            corrupt: false,
            _t: PhantomData,
        },
    ))
}

/// Initialises a ring of `capacity` slots in the data area of `seg` (its creator does this
/// once) and returns both ends; each keeps the mapping alive. Keep the end you use, drop
/// the other: the peer process attaches the other with [`attach_segment`].
pub fn init_segment<T: Slot>(
    seg: &Arc<Segment>,
    capacity: usize,
) -> Result<(Producer<T>, Consumer<T>), Error> {
    // SAFETY: the data area is page-aligned, `data_len` long and mapped as long as the Arc
    // lives, which each end holds. Single producer / consumer is the caller's protocol; a
    // violation corrupts data (all slot types are `Slot`), never memory safety.
    unsafe { init_keep(seg.data(), seg.data_len(), capacity, Some(seg.clone())) }
}

/// Attaches to the ring in the data area of `seg` (initialised by another process).
pub fn attach_segment<T: Slot>(seg: &Arc<Segment>) -> Result<(Producer<T>, Consumer<T>), Error> {
    // SAFETY: as in `init_segment`; `attach` validates the header.
    unsafe { attach_keep(seg.data(), seg.data_len(), Some(seg.clone())) }
}

/// The writing end. Not `Clone`: one producer.
pub struct Producer<T> {
    raw: Raw,
    head: u64,
    cached_tail: u64,
    capacity: u64,
    corrupt: bool,
    _t: PhantomData<T>,
}

/// The reading end. Not `Clone`: one consumer.
pub struct Consumer<T> {
    raw: Raw,
    tail: u64,
    cached_head: u64,
    capacity: u64,
    corrupt: bool,
    _t: PhantomData<T>,
}

// SAFETY: each end is the only writer of its index and of the slots it owns at a time; the
// protocol above (Release/Acquire pairs) makes hand-over between threads or processes sound.
unsafe impl<T: Slot + Send> Send for Producer<T> {}
// SAFETY: as for Producer.
unsafe impl<T: Slot + Send> Send for Consumer<T> {}

/// The ring is full: the item was not written (back-pressure, never loss).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl<T: Slot> Producer<T> {
    /// Free slots, reloading the consumer's index only when fewer than `want` look free.
    fn free(&mut self, want: u64) -> u64 {
        let used = self.head.wrapping_sub(self.cached_tail);
        if used <= self.capacity && self.capacity - used >= want {
            return self.capacity - used;
        }
        // SYNC POINT: pairs with the consumer's Release store of `tail` in `release`: the
        // slots it freed were read before that store, so we may overwrite them.
        self.cached_tail = self.raw.header().tail.0.load(Ordering::Acquire);
        let used = self.head.wrapping_sub(self.cached_tail);
        if used > self.capacity {
            // The consumer published a tail past our head: a corrupted (or malicious) peer.
            // Refuse to write rather than overwrite unread slots.
            self.corrupt = true;
            return 0;
        }
        self.capacity - used
    }

    /// Writes one item and publishes it (one doorbell).
    pub fn push(&mut self, item: T) -> Result<(), Full> {
        if self.free(1) == 0 {
            return Err(Full);
        }
        // SAFETY: the slot at `head` is free (head - tail < capacity) and only we write it.
        unsafe { self.raw.write_slot(self.head, item) };
        self.head = self.head.wrapping_add(1);
        // SYNC POINT: pairs with the consumer's Acquire load of `head` in `pop`/`pop_batch`/
        // `len`: the slot written above is visible before the new head.
        self.raw.header().head.0.store(self.head, Ordering::Release);
        Ok(())
    }

    /// Writes as many items as fit and publishes them with one store (one doorbell).
    /// Returns how many were written.
    pub fn push_batch(&mut self, items: &[T]) -> usize {
        let n = (self.free(items.len() as u64) as usize).min(items.len());
        for (i, item) in items[..n].iter().enumerate() {
            // SAFETY: as in `push`, for each of the n free slots.
            unsafe { self.raw.write_slot(self.head.wrapping_add(i as u64), *item) };
        }
        if n > 0 {
            self.head = self.head.wrapping_add(n as u64);
            // SYNC POINT: pairs with the consumer's Acquire load of `head`, for all n slots.
            self.raw.header().head.0.store(self.head, Ordering::Release);
        }
        n
    }

    /// Slots free now (reloads the consumer's index).
    pub fn free_slots(&mut self) -> usize {
        self.free(u64::MAX) as usize
    }

    /// Slots free, reloading the consumer's index only when fewer than `want` look free:
    /// the count may be low (the consumer freed more since), never high. The index is a
    /// line the consumer writes on every release; reading it when the room already known
    /// suffices moves that line between cores for nothing.
    pub fn free_for(&mut self, want: usize) -> usize {
        self.free(want as u64) as usize
    }

    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Whether the consumer's index was ever found impossible (a broken peer).
    pub fn is_corrupt(&self) -> bool {
        self.corrupt
    }
}

impl<T: Slot> Consumer<T> {
    /// Published items not yet taken, reloading the producer's index when `reload`.
    fn available(&mut self, reload: bool) -> u64 {
        let mut avail = self.cached_head.wrapping_sub(self.tail);
        if avail == 0 || reload {
            // SYNC POINT: pairs with the producer's Release store of `head` in `push`/
            // `push_batch`: the slots before `head` are fully written.
            self.cached_head = self.raw.header().head.0.load(Ordering::Acquire);
            avail = self.cached_head.wrapping_sub(self.tail);
        }
        if avail > self.capacity {
            // A head more than a ring ahead of our tail: a corrupted (or malicious) peer.
            // Reading would return slots twice or garbage; report nothing and flag it.
            self.corrupt = true;
            self.cached_head = self.tail;
            return 0;
        }
        avail
    }

    fn release(&mut self, n: u64) {
        self.tail = self.tail.wrapping_add(n);
        // SYNC POINT: pairs with the producer's Acquire load of `tail` in `free`/
        // `free_slots`: our reads of the slots happen before it may overwrite them.
        self.raw.header().tail.0.store(self.tail, Ordering::Release);
    }

    /// Takes the oldest item, if any.
    pub fn pop(&mut self) -> Option<T> {
        if self.available(false) == 0 {
            return None;
        }
        // SAFETY: tail < head: the producer wrote and published this slot; any bit pattern
        // is a valid T (`Slot`).
        let item = unsafe { self.raw.read_slot::<T>(self.tail) };
        self.release(1);
        Some(item)
    }

    /// Takes up to `out.len()` items and frees their slots with one store. Returns how many.
    pub fn pop_batch(&mut self, out: &mut [T]) -> usize {
        let mut n = (self.available(false) as usize).min(out.len());
        if n < out.len() {
            n = (self.available(true) as usize).min(out.len());
        }
        for (i, o) in out[..n].iter_mut().enumerate() {
            // SAFETY: as in `pop`, for each of the n published slots.
            *o = unsafe { self.raw.read_slot::<T>(self.tail.wrapping_add(i as u64)) };
        }
        if n > 0 {
            self.release(n as u64);
        }
        n
    }

    /// Asks the cache for what the next [`Consumer::pop`] reads: the producer's index and
    /// the oldest slot. Both are lines the producer wrote on another core, each a transfer
    /// between caches when first read (see [`crate::prefetch`]).
    pub fn prefetch_next(&self) {
        use crate::prefetch::{prefetch, prefetch_addr};
        prefetch(&self.raw.header().head);
        prefetch_addr(self.raw.slot::<T>(self.tail) as usize, size_of::<T>());
    }

    /// Items waiting now.
    pub fn len(&mut self) -> usize {
        self.available(true) as usize
    }

    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Whether the producer's index was ever found impossible (a broken peer).
    pub fn is_corrupt(&self) -> bool {
        self.corrupt
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Plain unit tests; `cargo +nightly miri test -p iwarp-abi --lib ring::tests` runs them
    //! under Miri too (heap memory stands in for the shared mapping).
    use super::*;

    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct CacheLine([u8; 64]);

    /// Ring memory owned by the test (outlives both ends, which the tests drop first).
    struct Mem(Vec<CacheLine>);

    impl Mem {
        fn new(bytes: usize) -> Mem {
            Mem(vec![CacheLine([0; 64]); bytes.div_ceil(64)])
        }
        fn ptr(&mut self) -> NonNull<u8> {
            NonNull::new(self.0.as_mut_ptr() as *mut u8).unwrap()
        }
    }

    #[test]
    fn fifo_full_and_batches() {
        let len = ring_bytes::<u64>(8);
        let mut m = Mem::new(len);
        // SAFETY: `m` outlives the ends; one producer and one consumer.
        let (mut p, mut c) = unsafe { init::<u64>(m.ptr(), len, 8) }.unwrap();
        for i in 0..8 {
            p.push(i).unwrap();
        }
        assert_eq!(p.push(8), Err(Full));
        assert_eq!(p.free_slots(), 0);
        assert_eq!(c.pop(), Some(0));
        assert_eq!(p.push_batch(&[100, 101, 102]), 1);
        let mut buf = [0u64; 5];
        assert_eq!(c.pop_batch(&mut buf), 5);
        assert_eq!(buf, [1, 2, 3, 4, 5]);
        let got: Vec<u64> = std::iter::from_fn(|| c.pop()).collect();
        assert_eq!(got, vec![6, 7, 100]);
        assert!(c.is_empty());
        assert_eq!(c.pop_batch(&mut buf), 0);
        assert_eq!(p.free_slots(), 8);
        // Wrap the indices around the ring many times.
        for round in 0..100u64 {
            assert_eq!(p.push_batch(&[round, round + 1, round + 2]), 3);
            assert_eq!(c.pop_batch(&mut buf[..3]), 3);
            assert_eq!(buf[..3], [round, round + 1, round + 2]);
        }
    }

    /// A consumer's prefetch is a hint and nothing else: asked for before every pop, on an
    /// empty ring and across many wraps, it leaves the items, their order and both indices
    /// as they were.
    #[test]
    fn prefetch_next_changes_nothing() {
        let len = ring_bytes::<u64>(4);
        let mut m = Mem::new(len);
        // SAFETY: `m` outlives the ends; one producer and one consumer.
        let (mut p, mut c) = unsafe { init::<u64>(m.ptr(), len, 4) }.unwrap();
        c.prefetch_next();
        assert_eq!(c.pop(), None);
        for i in 0..50u64 {
            assert_eq!(p.push_batch(&[2 * i, 2 * i + 1]), 2);
            c.prefetch_next();
            assert_eq!(c.pop(), Some(2 * i));
            c.prefetch_next();
            assert_eq!(c.pop(), Some(2 * i + 1));
            c.prefetch_next();
            assert_eq!(c.pop(), None);
            assert_eq!(p.free_slots(), 4);
        }
    }

    /// `free_for` answers from the cached index while it shows enough room and reloads it
    /// only when it does not: the count can lag the consumer, never run ahead of it.
    #[test]
    fn free_for_reloads_only_when_short() {
        let len = ring_bytes::<u64>(8);
        let mut m = Mem::new(len);
        // SAFETY: `m` outlives the ends; one producer and one consumer.
        let (mut p, mut c) = unsafe { init::<u64>(m.ptr(), len, 8) }.unwrap();
        assert_eq!(p.push_batch(&[1, 2, 3, 4, 5, 6]), 6);
        assert_eq!(p.free_for(2), 2);
        let mut buf = [0u64; 4];
        assert_eq!(c.pop_batch(&mut buf), 4);
        assert_eq!(
            p.free_for(2),
            2,
            "two look free: the cached index is not reloaded"
        );
        assert_eq!(p.free_for(3), 6, "fewer than wanted look free: reloaded");
        assert_eq!(p.free_slots(), 6);
        assert_eq!(p.push_batch(&[7, 8, 9, 10, 11, 12]), 6);
        assert_eq!(p.free_for(1), 0, "full, and the consumer took nothing more");
    }

    /// Records of whole words go a word at a time, others in one volatile access: both
    /// arrive octet for octet, every field and every array element.
    #[test]
    fn records_arrive_octet_for_octet() {
        use crate::wqe::{SendOpcode, SendWqe, Sge};
        let len = ring_bytes::<SendWqe>(4);
        let mut m = Mem::new(len);
        // SAFETY: `m` outlives the ends; one producer and one consumer.
        let (mut p, mut c) = unsafe { init::<SendWqe>(m.ptr(), len, 4) }.unwrap();
        let sge = |i: u32| Sge {
            stag: 0x0100_0000 | i,
            len: 0x1000 + i,
            to: 0x0123_4567_89ab_cd00 | u64::from(i),
        };
        let mut w =
            SendWqe::new(u64::MAX - 1, SendOpcode::CmpSwap, &[sge(1), sge(2), sge(3)]).unwrap();
        (w.remote_stag, w.remote_to, w.imm) = (0xdead_beef, 0x0102_0304_0506_0708, 7);
        (w.compare_add, w.swap, w.swap_mask) = (1, 2, 3);
        w.set_inline(&core::array::from_fn::<u8, 61, _>(|i| i as u8 ^ 0xa5))
            .unwrap();
        for round in 0..6u64 {
            w.wr_id = round;
            p.push(w).unwrap();
            assert_eq!(c.pop(), Some(w));
        }
        assert!(!in_words::<u32>() && in_words::<SendWqe>());
        let len = ring_bytes::<u32>(4);
        let mut m = Mem::new(len);
        // SAFETY: as above.
        let (mut p, mut c) = unsafe { init::<u32>(m.ptr(), len, 4) }.unwrap();
        p.push(0x8765_4321).unwrap();
        assert_eq!(c.pop(), Some(0x8765_4321));
    }

    #[test]
    fn attach_checks_the_header() {
        let len = ring_bytes::<u64>(4);
        let mut m = Mem::new(len);
        let p = m.ptr();
        // SAFETY: as above.
        unsafe {
            assert!(matches!(init::<u64>(p, len, 3), Err(Error::Layout)));
            assert!(matches!(init::<u64>(p, len - 1, 4), Err(Error::Layout)));
            init::<u64>(p, len, 4).unwrap();
            assert!(matches!(attach::<u32>(p, len), Err(Error::SlotSize { .. })));
            assert!(matches!(attach::<u64>(p, len - 8), Err(Error::Layout)));
            *(p.as_ptr() as *mut u64).add(1) = 9;
            assert!(matches!(attach::<u64>(p, len), Err(Error::Version { .. })));
            *(p.as_ptr() as *mut u64) = 0;
            assert!(matches!(attach::<u64>(p, len), Err(Error::BadMagic)));
        }
    }

    #[test]
    fn impossible_indices_from_a_broken_peer_are_refused() {
        let len = ring_bytes::<u64>(4);
        let mut m = Mem::new(len);
        // SAFETY: as above.
        let (mut p, mut c) = unsafe { init::<u64>(m.ptr(), len, 4) }.unwrap();
        p.push(1).unwrap();
        // The "peer" publishes a head far beyond anything written.
        p.raw.header().head.0.store(1000, Ordering::Release);
        assert_eq!(c.pop(), None);
        assert!(c.is_corrupt());
        // A tail beyond the head: the producer refuses to overwrite.
        let (mut p2, c2) = unsafe { init::<u64>(m.ptr(), len, 4) }.unwrap();
        for i in 0..4 {
            p2.push(i).unwrap();
        }
        c2.raw.header().tail.0.store(50, Ordering::Release);
        assert_eq!(p2.push(9), Err(Full));
        assert!(p2.is_corrupt());
    }

    #[test]
    fn two_threads_in_order() {
        let len = ring_bytes::<u64>(64);
        let mut m = Mem::new(len);
        // SAFETY: `m` outlives the thread (joined below).
        let (mut p, mut c) = unsafe { init::<u64>(m.ptr(), len, 64) }.unwrap();
        // Miri interprets: keep it short there, the order check is the same.
        let n = if cfg!(miri) { 200 } else { 1_000_000u64 };
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < n {
                if p.push(i).is_ok() {
                    i += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0;
        while next < n {
            if let Some(v) = c.pop() {
                assert_eq!(v, next);
                next += 1;
            } else {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct CacheLine([u8; 64]);

    fn ring(cap: usize) -> (Producer<u64>, Consumer<u64>) {
        let len = ring_bytes::<u64>(cap);
        let lines = Box::leak(vec![CacheLine([0; 64]); len.div_ceil(64)].into_boxed_slice());
        let m = NonNull::new(lines.as_mut_ptr() as *mut u8).unwrap();
        // SAFETY: leaked memory, one producer and one consumer.
        unsafe { init::<u64>(m, len, cap) }.unwrap()
    }

    /// Every interleaving of a producer pushing three items through a two-slot ring and a
    /// consumer popping them: nothing lost, nothing duplicated, order kept, and (through the
    /// tracked slot cells) no slot written while the other side may still read it.
    #[test]
    fn ring_loom_single() {
        loom::model(|| {
            let (mut p, mut c) = ring(2);
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

    /// The same with batches on both sides (one index store per batch), wrapping the ring.
    #[test]
    fn ring_loom_batches() {
        loom::model(|| {
            let (mut p, mut c) = ring(2);
            let t = loom::thread::spawn(move || {
                let items = [1u64, 2, 3, 4];
                let mut sent = 0;
                while sent < items.len() {
                    let n = p.push_batch(&items[sent..]);
                    if n == 0 {
                        loom::thread::yield_now();
                    }
                    sent += n;
                }
            });
            let mut got = Vec::new();
            let mut buf = [0u64; 2];
            while got.len() < 4 {
                let n = c.pop_batch(&mut buf);
                if n == 0 {
                    loom::thread::yield_now();
                }
                got.extend_from_slice(&buf[..n]);
            }
            t.join().unwrap();
            assert_eq!(got, vec![1, 2, 3, 4]);
        });
    }
}
