//! Which of an application's rings have work, so that a daemon turn visits those rings and
//! not every ring it serves: per application one segment ([`crate::segment::SegmentKind::Doorbell`]) with a
//! queue of rung slots (a [`ring`] of `u32`), a bitmap of "queued" flags, one per slot, and
//! an overflow word. Each QP (its SQ and RQ together) and each S-RQ has a slot; its ring
//! segment names the doorbell segment and the slot in a trailer after the ring
//! ([`BellRef`]), which the daemon reads when it attaches the ring.
//!
//! A post publishes its ring's head, then sets its slot's flag with an AcqRel `fetch_or`;
//! only the post that found the flag clear pushes the slot, so a slot is queued at most once
//! until the daemon takes it, and an honest application's queue (as long as the bitmap)
//! never fills. The daemon pops a slot, clears its flag with an AcqRel `fetch_and`, then
//! reads the ring. Every access to a flag word is a read-modify-write, so in the word's order
//! either the clear follows the post's set and acquires it (the post's head is visible), or it
//! precedes it and the post finds the flag clear and queues the slot again: no post is left
//! unseen. A push that finds the queue full sets the overflow word instead; the daemon then
//! scans every ring of that application, as it does while the queue's indices are
//! impossible (a broken or hostile application), and takes at most a queue's worth of slots
//! per turn, so no application can make it lose work or spend unbounded time.

use crate::command::{ShmPath, SHM_PATH_LEN};
use crate::error::Error;
use crate::ring::{self, ring_bytes, Consumer, Producer};
use crate::segment::Segment;
use crate::sync::{AtomicU64, Ordering};
use core::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Slots of the doorbell segment the application library creates: rings (QPs and S-RQs)
/// one application can have rung; any beyond are scanned every turn.
pub const BELL_SLOTS: usize = 16_384;

const fn line(n: usize) -> usize {
    n.div_ceil(64) * 64
}

/// Where the flag bitmap starts in a doorbell segment's data area of `slots` slots.
const fn bitmap_at(slots: usize) -> usize {
    line(ring_bytes::<u32>(slots))
}

/// Where the overflow word lives (a line of its own).
const fn overflow_at(slots: usize) -> usize {
    bitmap_at(slots) + line(slots.div_ceil(64) * 8)
}

/// Data-area octets of a doorbell segment of `slots` slots (a power of two).
pub const fn bell_bytes(slots: usize) -> usize {
    overflow_at(slots) + 64
}

/// The flag words and the overflow word of a doorbell queue.
struct Words {
    base: NonNull<u8>,
    slots: u32,
    _keep: Option<Arc<Segment>>,
}

impl Words {
    /// The word holding `slot`'s flag, and the flag's bit in it; `slot < self.slots`.
    fn flag(&self, slot: u32) -> (&AtomicU64, u64) {
        let at = bitmap_at(self.slots as usize) + (slot as usize / 64) * 8;
        // SAFETY: slot < slots, so the word lies inside the bitmap, which `init`/`attach`
        // checked fits the memory; 8-aligned (the base is 64-aligned); the memory lives as
        // long as `_keep` or the caller of the unsafe constructors promised.
        let w = unsafe { &*(self.base.as_ptr().add(at) as *const AtomicU64) };
        (w, 1 << (slot % 64))
    }

    fn overflow(&self) -> &AtomicU64 {
        // SAFETY: as in `flag`: inside the checked length, 64-aligned.
        unsafe { &*(self.base.as_ptr().add(overflow_at(self.slots as usize)) as *const AtomicU64) }
    }
}

// SAFETY: the words are only accessed atomically; the mapping is kept alive by `_keep` (or by
// the caller of the unsafe constructors).
unsafe impl Send for Words {}
// SAFETY: as above.
unsafe impl Sync for Words {}

/// The application's end: rings a slot after a post.
pub struct Ringer {
    words: Words,
    /// The posting threads of one application share the queue's single producer.
    queue: Mutex<Producer<u32>>,
}

/// The daemon's end: takes the rung slots.
pub struct Drainer {
    words: Words,
    queue: Consumer<u32>,
}

/// Writes a fresh doorbell queue of `slots` slots (a power of two) into `mem`, which must be
/// 64-aligned and at least [`bell_bytes`]`(slots)` long, and returns both ends.
///
/// # Safety
/// `mem` must be valid for reads and writes for as long as either end is used, by any
/// process; one [`Ringer`] and one [`Drainer`] may exist.
pub unsafe fn init(mem: NonNull<u8>, len: usize, slots: usize) -> Result<(Ringer, Drainer), Error> {
    // SAFETY: forwarded contract.
    unsafe { init_keep(mem, len, slots, None) }
}

unsafe fn init_keep(
    mem: NonNull<u8>,
    len: usize,
    slots: usize,
    keep: Option<Arc<Segment>>,
) -> Result<(Ringer, Drainer), Error> {
    if !slots.is_power_of_two() || slots > u32::MAX as usize || len < bell_bytes(slots) {
        return Err(Error::Layout);
    }
    // SAFETY: forwarded contract; the ring checks its own part.
    let (producer, consumer) = unsafe { ring::init::<u32>(mem, len, slots)? };
    for at in (bitmap_at(slots)..overflow_at(slots))
        .step_by(8)
        .chain([overflow_at(slots)])
    {
        // SAFETY: inside `len` (checked above), 8-aligned; nobody else uses the memory yet.
        unsafe { core::ptr::write(mem.as_ptr().add(at) as *mut AtomicU64, AtomicU64::new(0)) };
    }
    let words = |keep| Words {
        base: mem,
        slots: slots as u32,
        _keep: keep,
    };
    Ok((
        Ringer {
            words: words(keep.clone()),
            queue: Mutex::new(producer),
        },
        Drainer {
            words: words(keep),
            queue: consumer,
        },
    ))
}

impl Ringer {
    /// Initialises the doorbell queue in the data area of `seg`, as many slots as fit (at
    /// most [`BELL_SLOTS`]), and returns the application's end.
    pub fn init_segment(seg: &Arc<Segment>) -> Result<Ringer, Error> {
        let mut slots = BELL_SLOTS;
        while slots > 1 && bell_bytes(slots) > seg.data_len() {
            slots /= 2;
        }
        // SAFETY: the data area is page-aligned, `data_len` long and mapped as long as the
        // Arc lives, which each end holds; the daemon attaches the other end.
        unsafe { init_keep(seg.data(), seg.data_len(), slots, Some(seg.clone())) }.map(|e| e.0)
    }

    /// How many slots the queue has.
    pub fn slots(&self) -> u32 {
        self.words.slots
    }

    /// After publishing the head of slot `slot`'s ring: lists the slot for the daemon unless
    /// it is listed already. A slot out of range is ignored (its rings are scanned).
    pub fn ring(&self, slot: u32) {
        if slot >= self.words.slots {
            return;
        }
        let (word, bit) = self.words.flag(slot);
        // SYNC POINT: the Release half publishes the ring head stored before this to the
        // daemon's clearing `fetch_and` (Acquire) that reads this value or a later one; the
        // Acquire half orders this after the daemon's last clear, whose value it reads.
        if word.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            return;
        }
        let pushed = self
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(slot)
            .is_ok();
        if !pushed {
            // SYNC POINT: pairs with the daemon's Acquire swap of the word: its full scan
            // then sees this ring's head.
            self.words.overflow().store(1, Ordering::Release);
        }
    }
}

/// What a [`Drainer::drain`] found besides the slots it handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every rung slot was in the queue.
    Listed,
    /// Scan every ring of this application: its queue overflowed, or its indices are
    /// impossible (a broken application). Clear each slot's flag ([`Drainer::take`]) before
    /// reading its ring.
    ScanAll,
}

impl Drainer {
    /// Attaches to the doorbell queue in the data area of `seg` (an application initialised
    /// it).
    pub fn attach_segment(seg: &Arc<Segment>) -> Result<Drainer, Error> {
        let (mem, len) = (seg.data(), seg.data_len());
        // SAFETY: the data area is page-aligned, `len` long and mapped as long as the Arc
        // lives, which the end holds; the ring checks its header against `len`.
        let (_, queue) = unsafe { ring::attach::<u32>(mem, len)? };
        let slots = queue.capacity();
        if bell_bytes(slots) > len {
            return Err(Error::Layout);
        }
        // A ring's header can be read with its segment dropped while the end lives: keep it.
        let words = Words {
            base: mem,
            slots: slots as u32,
            _keep: Some(seg.clone()),
        };
        Ok(Drainer { words, queue })
    }

    /// How many slots the queue has.
    pub fn slots(&self) -> u32 {
        self.words.slots
    }

    /// Hands each rung slot to `f` (a slot at most once per call, its flag cleared first, so
    /// `f` may read its ring), at most a queue's worth; slots out of range are dropped.
    pub fn drain(&mut self, mut f: impl FnMut(u32)) -> Drained {
        let mut buf = [0u32; 64];
        let mut left = self.words.slots as usize;
        while left > 0 {
            let n = self.queue.pop_batch(&mut buf[..left.min(64)]);
            if n == 0 {
                break;
            }
            left -= n;
            for &slot in &buf[..n] {
                if slot < self.words.slots {
                    self.take(slot);
                    f(slot);
                }
            }
        }
        let overflow = self.words.overflow();
        // A load first: the word's line stays shared while nothing overflows.
        // SYNC POINT: the swap's Acquire pairs with the Release store of `Ringer::ring`.
        let overflowed =
            overflow.load(Ordering::Relaxed) != 0 && overflow.swap(0, Ordering::AcqRel) != 0;
        if overflowed || self.queue.is_corrupt() {
            Drained::ScanAll
        } else {
            Drained::Listed
        }
    }

    /// Clears `slot`'s flag: a post after this lists it again. Read its ring after this.
    pub fn take(&self, slot: u32) {
        if slot >= self.words.slots {
            return;
        }
        let (word, bit) = self.words.flag(slot);
        // SYNC POINT: the Acquire half pairs with the Release half of the `fetch_or` in
        // `Ringer::ring` (or of any later access: all are read-modify-writes, so they
        // continue its release sequence): the ring's head stored before it is visible.
        word.fetch_and(!bit, Ordering::AcqRel);
    }
}

/// "iwarpbel", little-endian: a ring segment's trailer names a doorbell.
const BELL_REF_MAGIC: u64 = u64::from_le_bytes(*b"iwarpbel");

/// Octets of a [`BellRef`] in a ring segment.
pub const BELL_REF_BYTES: usize = 16 + SHM_PATH_LEN;

/// Where a ring segment's [`BellRef`] lives: after its ring of `ring_len` octets, 64-aligned.
pub const fn bell_ref_at(ring_len: usize) -> usize {
    line(ring_len)
}

/// Data-area octets of a ring segment of `ring_len` octets of ring with its [`BellRef`].
pub const fn with_bell_ref(ring_len: usize) -> usize {
    bell_ref_at(ring_len) + BELL_REF_BYTES
}

/// The doorbell segment and slot a ring segment's posts ring, in the trailer after its ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BellRef {
    pub slot: u32,
    pub path: ShmPath,
}

impl BellRef {
    /// Writes the trailer of a ring segment whose ring is `ring_len` octets; false when the
    /// segment has no room for it.
    pub fn write(&self, seg: &Segment, ring_len: usize) -> bool {
        let path = self.path.as_bytes();
        let mut b = [0u8; BELL_REF_BYTES];
        b[..8].copy_from_slice(&BELL_REF_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&self.slot.to_le_bytes());
        b[12..16].copy_from_slice(&(path.len() as u32).to_le_bytes());
        b[16..16 + path.len()].copy_from_slice(path);
        seg.write_at(bell_ref_at(ring_len), &b)
    }

    /// The trailer of a ring segment whose ring is `ring_len` octets: `None` when it has
    /// none, or one that does not decode (the application wrote anything there).
    pub fn read(seg: &Segment, ring_len: usize) -> Option<BellRef> {
        let mut b = [0u8; BELL_REF_BYTES];
        if !seg.read_at(bell_ref_at(ring_len), &mut b) {
            return None;
        }
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if b[..8] != BELL_REF_MAGIC.to_le_bytes() {
            return None;
        }
        let len = word(12) as usize;
        let path = ShmPath::from_bytes(b.get(16..16usize.checked_add(len)?)?)?;
        Some(BellRef {
            slot: word(8),
            path,
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Plain unit tests; `cargo +nightly miri test -p iwarp-abi --lib doorbell::tests` runs
    //! them under Miri too (heap memory stands in for the shared mapping).
    use super::*;
    use crate::segment::{HugePolicy::Off, SegmentKind};

    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct CacheLine([u8; 64]);

    fn mem(slots: usize) -> (Vec<CacheLine>, usize) {
        let len = bell_bytes(slots);
        (vec![CacheLine([0; 64]); len.div_ceil(64)], len)
    }

    fn ends(m: &mut [CacheLine], len: usize, slots: usize) -> (Ringer, Drainer) {
        let p = NonNull::new(m.as_mut_ptr() as *mut u8).unwrap();
        // SAFETY: the memory outlives both ends (the tests drop them first).
        unsafe { init(p, len, slots) }.unwrap()
    }

    fn drained(d: &mut Drainer) -> (Vec<u32>, Drained) {
        let mut v = Vec::new();
        let r = d.drain(|s| v.push(s));
        (v, r)
    }

    #[test]
    fn a_slot_is_listed_once_until_taken() {
        let (mut m, len) = mem(128);
        let (r, mut d) = ends(&mut m, len, 128);
        for s in [5, 70, 5, 5, 127, 70] {
            r.ring(s);
        }
        assert_eq!(drained(&mut d), (vec![5, 70, 127], Drained::Listed));
        assert_eq!(
            drained(&mut d),
            (vec![], Drained::Listed),
            "nothing rung since"
        );
        r.ring(70);
        assert_eq!(
            drained(&mut d),
            (vec![70], Drained::Listed),
            "taken, then rung again"
        );
        r.ring(128);
        r.ring(u32::MAX);
        assert_eq!(
            drained(&mut d),
            (vec![], Drained::Listed),
            "out of range ignored"
        );
    }

    /// No application can make the daemon lose a post: a slot whose push found the queue full
    /// comes back as a full scan.
    #[test]
    fn an_overflowing_queue_asks_for_a_full_scan() {
        let (mut m, len) = mem(4);
        let (r, mut d) = ends(&mut m, len, 4);
        // A hostile application fills the queue with pushes of its own.
        {
            let mut q = r.queue.lock().unwrap();
            while q.push(3).is_ok() {}
        }
        r.ring(1);
        let (v, scan) = drained(&mut d);
        assert_eq!((v, scan), (vec![3, 3, 3, 3], Drained::ScanAll));
        assert_eq!(drained(&mut d), (vec![], Drained::Listed), "asked once");
        // The scan clears the flag of slot 1 before reading its ring: the next post lists it.
        d.take(1);
        r.ring(1);
        assert_eq!(drained(&mut d), (vec![1], Drained::Listed));
    }

    #[test]
    fn impossible_indices_ask_for_a_scan_every_turn() {
        let (mut m, len) = mem(4);
        let (r, mut d) = ends(&mut m, len, 4);
        r.ring(0);
        // The application publishes a head far past anything written.
        // SAFETY: the head is the second line of the ring's header, inside `m`.
        unsafe { &*((m.as_ptr() as *const u8).add(64) as *const AtomicU64) }
            .store(1_000, Ordering::Release);
        assert_eq!(drained(&mut d).1, Drained::ScanAll);
        assert_eq!(drained(&mut d).1, Drained::ScanAll);
        drop(r);
    }

    #[test]
    fn attach_checks_the_layout() {
        let seg = Arc::new(
            Segment::create_anonymous("bell-test", SegmentKind::Doorbell, bell_bytes(64), Off)
                .unwrap(),
        );
        let r = Ringer::init_segment(&seg).unwrap();
        let slots = r.slots() as usize;
        assert!(
            slots >= 64 && bell_bytes(slots) <= seg.data_len(),
            "as many as fit"
        );
        assert!(slots == BELL_SLOTS || bell_bytes(slots * 2) > seg.data_len());
        let mut d = Drainer::attach_segment(&seg).unwrap();
        assert_eq!(d.slots(), r.slots());
        r.ring(9);
        assert_eq!(drained(&mut d), (vec![9], Drained::Listed));
        let small = Arc::new(
            Segment::create_anonymous("bell-test", SegmentKind::Doorbell, 64, Off).unwrap(),
        );
        assert!(Drainer::attach_segment(&small).is_err(), "no queue in it");
    }

    #[test]
    fn a_bell_ref_round_trips_and_garbage_reads_as_none() {
        let ring_len = ring_bytes::<u64>(8);
        let seg = Segment::create_anonymous(
            "bell-test",
            SegmentKind::SendQueue,
            with_bell_ref(ring_len),
            Off,
        )
        .unwrap();
        assert_eq!(BellRef::read(&seg, ring_len), None, "zeroes: no trailer");
        let r = BellRef {
            slot: 77,
            path: ShmPath::new(std::path::Path::new("/proc/1/fd/9")).unwrap(),
        };
        assert!(r.write(&seg, ring_len));
        assert_eq!(BellRef::read(&seg, ring_len), Some(r));
        // A length past the trailer, or a NUL inside the path.
        assert!(seg.write_at(bell_ref_at(ring_len) + 12, &500u32.to_le_bytes()));
        assert_eq!(BellRef::read(&seg, ring_len), None);
        assert!(seg.write_at(bell_ref_at(ring_len) + 12, &3u32.to_le_bytes()));
        assert!(seg.write_at(bell_ref_at(ring_len) + 16, &[b'/', 0, b'x']));
        assert_eq!(BellRef::read(&seg, ring_len), None);
        assert!(!r.write(&seg, seg.data_len()), "no room");
    }

    /// Two posting threads on slots that share a flag word, the daemon draining on another:
    /// every post is seen.
    #[test]
    fn threads_lose_no_post() {
        let (mut m, len) = mem(64);
        let (r, mut d) = ends(&mut m, len, 64);
        let heads: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let r = Arc::new(r);
        let n = if cfg!(miri) { 50 } else { 100_000u64 };
        let posters: Vec<_> = (0..2)
            .map(|i| {
                let (r, heads) = (r.clone(), heads.clone());
                std::thread::spawn(move || {
                    for k in 1..=n {
                        heads[i].store(k, Ordering::Release);
                        r.ring(i as u32 * 7);
                    }
                })
            })
            .collect();
        let mut seen = [0u64; 2];
        let look = |d: &mut Drainer, seen: &mut [u64; 2]| {
            d.drain(|s| {
                let i = (s / 7) as usize;
                seen[i] = heads[i].load(Ordering::Acquire);
            });
        };
        while seen != [n, n] && posters.iter().any(|p| !p.is_finished()) {
            look(&mut d, &mut seen);
        }
        for p in posters {
            p.join().unwrap();
        }
        look(&mut d, &mut seen);
        assert_eq!(seen, [n, n], "a post was never listed");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct CacheLine([u8; 64]);

    fn leak(len: usize) -> NonNull<u8> {
        let lines = Box::leak(vec![CacheLine([0; 64]); len.div_ceil(64)].into_boxed_slice());
        NonNull::new(lines.as_mut_ptr() as *mut u8).unwrap()
    }

    /// Every interleaving of an application posting two entries to one ring, ringing its
    /// slot after each, and the daemon draining and reading concurrently: after the
    /// application is done, one more drain lists what the daemon has not seen, so no post is
    /// left unseen; and the slot is never queued twice at once (the queue of one slot would
    /// overflow).
    #[test]
    fn doorbell_loom_no_post_left_unseen() {
        loom::model(|| {
            let len = bell_bytes(1);
            // SAFETY: leaked memory; one ringer, one drainer.
            let (r, mut d) = unsafe { init(leak(len), len, 1) }.unwrap();
            let rlen = ring_bytes::<u64>(2);
            // SAFETY: as above; the ring stands for a QP's SQ.
            let (mut p, mut c) = unsafe { ring::init::<u64>(leak(rlen), rlen, 2) }.unwrap();
            let t = loom::thread::spawn(move || {
                for i in 1..=2u64 {
                    p.push(i).unwrap();
                    r.ring(0);
                }
            });
            let mut got = Vec::new();
            let mut look = |d: &mut Drainer| {
                let mut listed = false;
                let scan = d.drain(|_| listed = true);
                assert_eq!(scan, Drained::Listed, "an honest queue overflowed");
                if listed {
                    while let Some(v) = c.pop() {
                        got.push(v);
                    }
                }
            };
            look(&mut d);
            t.join().unwrap();
            look(&mut d);
            assert_eq!(got, vec![1, 2]);
        });
    }
}
