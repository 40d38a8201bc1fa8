//! Which of an application's rings have work, so that a daemon turn visits those rings and
//! not every ring it serves: per application one segment
//! ([`crate::segment::SegmentKind::Doorbell`]) holding a bitmap of rung slots and a summary
//! bitmap of its non-zero words. Each QP's SQ, its RQ and each S-RQ has a slot (an RQ without
//! one is read with its SQ); its ring segment names the doorbell segment and the slot in a
//! trailer after the ring ([`BellRef`]), which the daemon reads when it attaches the ring.
//!
//! A post publishes its ring's head, then sets its slot's bit with an AcqRel `fetch_or`, and
//! when the bit was clear, the word's bit in the summary the same way. The daemon swaps each
//! non-zero summary word with 0, then each word it names, and reads the rings of the bits it
//! took. Every access is a read-modify-write, so each continues the release sequences
//! before it: a swap that takes a post's bit acquires that post's ring head, and a post
//! whose bit was already set was taken by a swap that had not run yet, which then acquires
//! it. A summary bit set after the daemon's swap is seen at its next turn. No lock, no
//! queue to overflow, and any bit pattern is valid: a hostile application can at most make
//! the daemon visit its own rings, at most once a turn each.

use crate::command::{ShmPath, SHM_PATH_LEN};
use crate::error::Error;
use crate::segment::Segment;
use crate::sync::{AtomicU64, Ordering};
use core::ptr::NonNull;
use std::sync::Arc;

/// Slots of the doorbell segment the application library creates: rings one application
/// can have rung (two a QP, its SQ and its RQ; one an S-RQ), 16,384 QPs in all; a QP beyond
/// is read every turn, and an RQ beyond with its SQ.
pub const BELL_SLOTS: usize = 32_768;

const fn line(n: usize) -> usize {
    n.div_ceil(64) * 64
}

/// Bitmap words for `slots` slots.
const fn words(slots: usize) -> usize {
    slots.div_ceil(64)
}

/// Where the bitmap starts: after the summary words (one bit per bitmap word).
const fn bitmap_at(slots: usize) -> usize {
    line(words(words(slots)) * 8)
}

/// Data-area octets of a doorbell segment of `slots` slots (a power of two).
pub const fn bell_bytes(slots: usize) -> usize {
    bitmap_at(slots) + line(words(slots) * 8)
}

/// The most slots (a power of two, at most [`BELL_SLOTS`]) whose bitmaps fit `len` octets.
fn slots_in(len: usize) -> Option<usize> {
    let mut slots = BELL_SLOTS;
    while bell_bytes(slots) > len {
        slots /= 2;
        if slots == 0 {
            return None;
        }
    }
    Some(slots)
}

/// The two bitmaps of a doorbell segment.
struct Words {
    base: NonNull<u8>,
    slots: usize,
    _keep: Option<Arc<Segment>>,
}

impl Words {
    fn at(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: every caller passes an offset of a word inside `bell_bytes(slots)`, which
        // `init`/`attach` checked fits the memory; 8-aligned (the base is 64-aligned); the
        // memory lives as long as `_keep` or the caller of the unsafe constructors promised.
        unsafe { &*(self.base.as_ptr().add(offset) as *const AtomicU64) }
    }

    /// Summary word `i` (`i < words(words(slots))`).
    fn summary(&self, i: usize) -> &AtomicU64 {
        self.at(i * 8)
    }

    /// Bitmap word `w` (`w < words(slots)`).
    fn word(&self, w: usize) -> &AtomicU64 {
        self.at(bitmap_at(self.slots) + w * 8)
    }
}

// SAFETY: the words are only accessed atomically; the mapping is kept alive by `_keep` (or by
// the caller of the unsafe constructors).
unsafe impl Send for Words {}
// SAFETY: as above.
unsafe impl Sync for Words {}

/// The application's end: rings a slot after a post, from any thread.
pub struct Ringer {
    words: Words,
}

/// The daemon's end: takes the rung slots.
pub struct Drainer {
    words: Words,
}

/// Writes fresh (clear) bitmaps of `slots` slots (a power of two) into `mem`, which must be
/// 64-aligned and at least [`bell_bytes`]`(slots)` long, and returns both ends.
///
/// # Safety
/// `mem` must be valid for reads and writes for as long as either end is used, by any
/// process.
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
    let aligned = (mem.as_ptr() as usize).is_multiple_of(64);
    if !slots.is_power_of_two() || slots > BELL_SLOTS || len < bell_bytes(slots) || !aligned {
        return Err(Error::Layout);
    }
    for at in (0..bell_bytes(slots)).step_by(8) {
        // SAFETY: inside `len` (checked above), 8-aligned; nobody else uses the memory yet.
        unsafe { core::ptr::write(mem.as_ptr().add(at) as *mut AtomicU64, AtomicU64::new(0)) };
    }
    let words = |keep| Words {
        base: mem,
        slots,
        _keep: keep,
    };
    Ok((
        Ringer {
            words: words(keep.clone()),
        },
        Drainer { words: words(keep) },
    ))
}

impl Ringer {
    /// Initialises the doorbell bitmaps in the data area of `seg`, as many slots as fit (at
    /// most [`BELL_SLOTS`]), and returns the application's end.
    pub fn init_segment(seg: &Arc<Segment>) -> Result<Ringer, Error> {
        let slots = slots_in(seg.data_len()).ok_or(Error::Layout)?;
        // SAFETY: the data area is page-aligned, `data_len` long and mapped as long as the
        // Arc lives, which the end holds; the daemon attaches the other end.
        unsafe { init_keep(seg.data(), seg.data_len(), slots, Some(seg.clone())) }.map(|e| e.0)
    }

    /// How many slots the bitmap has.
    pub fn slots(&self) -> u32 {
        self.words.slots as u32
    }

    /// After publishing the head of slot `slot`'s ring: marks the slot for the daemon. A slot
    /// out of range is ignored (its rings are read every turn). Two `fetch_or`s at most.
    pub fn ring(&self, slot: u32) {
        let slot = slot as usize;
        if slot >= self.words.slots {
            return;
        }
        let (w, bit) = (slot / 64, 1u64 << (slot % 64));
        // SYNC POINT: the Release half publishes the ring head stored before this to the
        // daemon's swap (Acquire) that takes the bit; see the module docs.
        if self.words.word(w).fetch_or(bit, Ordering::AcqRel) & bit == 0 {
            // SYNC POINT: as above, for the daemon's swap of the summary word.
            self.words
                .summary(w / 64)
                .fetch_or(1 << (w % 64), Ordering::AcqRel);
        }
    }
}

impl Drainer {
    /// Attaches to the doorbell bitmaps in the data area of `seg` (an application
    /// initialised them; the size says how many slots).
    pub fn attach_segment(seg: &Arc<Segment>) -> Result<Drainer, Error> {
        let slots = slots_in(seg.data_len()).ok_or(Error::Layout)?;
        Ok(Drainer {
            words: Words {
                base: seg.data(),
                slots,
                _keep: Some(seg.clone()),
            },
        })
    }

    /// How many slots the bitmap has.
    pub fn slots(&self) -> u32 {
        self.words.slots as u32
    }

    /// Takes every rung slot and hands each to `f` once, which may then read its ring. One
    /// load per summary word when nothing was rung.
    pub fn drain(&mut self, mut f: impl FnMut(u32)) {
        let words = words(self.words.slots);
        for i in 0..words.div_ceil(64) {
            let summary = self.words.summary(i);
            // A load first: the line stays shared while nothing is rung.
            if summary.load(Ordering::Relaxed) == 0 {
                continue;
            }
            // SYNC POINT: the Acquire half pairs with the Release of `Ringer::ring`'s
            // summary `fetch_or` (and of every later read-modify-write of the word).
            let mut s = summary.swap(0, Ordering::AcqRel);
            while s != 0 {
                let w = i * 64 + s.trailing_zeros() as usize;
                s &= s - 1;
                if w >= words {
                    continue;
                }
                // SYNC POINT: as above, for the slot bits of `Ringer::ring`.
                let mut bits = self.words.word(w).swap(0, Ordering::AcqRel);
                while bits != 0 {
                    f((w * 64) as u32 + bits.trailing_zeros());
                    bits &= bits - 1;
                }
            }
        }
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

    fn drained(d: &mut Drainer) -> Vec<u32> {
        let mut v = Vec::new();
        d.drain(|s| v.push(s));
        v
    }

    #[test]
    fn a_slot_is_listed_once_until_taken() {
        let (mut m, len) = mem(BELL_SLOTS);
        let (r, mut d) = ends(&mut m, len, BELL_SLOTS);
        let last = BELL_SLOTS as u32 - 1;
        for s in [5, 70, 5, 5, last, 70, 4_096] {
            r.ring(s);
        }
        assert_eq!(drained(&mut d), vec![5, 70, 4_096, last]);
        assert_eq!(drained(&mut d), vec![], "nothing rung since");
        r.ring(70);
        assert_eq!(drained(&mut d), vec![70], "taken, then rung again");
        r.ring(last + 1);
        r.ring(u32::MAX);
        assert_eq!(drained(&mut d), vec![], "out of range ignored");
    }

    /// Whatever a hostile application writes into its bitmaps, the daemon takes each of its
    /// slots at most once a drain, none out of range, and the next post is seen.
    #[test]
    fn garbage_bitmaps_list_each_slot_at_most_once() {
        let (mut m, len) = mem(128);
        let (r, mut d) = ends(&mut m, len, 128);
        for line in m.iter_mut() {
            line.0 = [0xff; 64];
        }
        assert_eq!(drained(&mut d), (0..128).collect::<Vec<u32>>());
        assert_eq!(drained(&mut d), vec![]);
        r.ring(3);
        assert_eq!(drained(&mut d), vec![3]);
    }

    #[test]
    fn attach_finds_the_slots_from_the_size() {
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
        assert_eq!(drained(&mut d), vec![9]);
        let (mut m, len) = mem(64);
        let p = NonNull::new(m.as_mut_ptr() as *mut u8).unwrap();
        // SAFETY: as in `ends`; both calls fail before touching the memory.
        unsafe {
            assert!(init(p, len, 100).is_err(), "not a power of two");
            assert!(init(p, len - 8, 64).is_err(), "too short");
        }
    }

    #[test]
    fn a_bell_ref_round_trips_and_garbage_reads_as_none() {
        let ring_len = crate::ring::ring_bytes::<u64>(8);
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

    /// Two posting threads on slots in different words, the daemon draining on another:
    /// every post is seen.
    #[test]
    fn threads_lose_no_post() {
        let (mut m, len) = mem(BELL_SLOTS);
        let (r, mut d) = ends(&mut m, len, BELL_SLOTS);
        let heads: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let r = Arc::new(r);
        let n = if cfg!(miri) { 50 } else { 100_000u64 };
        let slot = |i: usize| i as u32 * 5_000;
        let posters: Vec<_> = (0..2)
            .map(|i| {
                let (r, heads) = (r.clone(), heads.clone());
                std::thread::spawn(move || {
                    for k in 1..=n {
                        heads[i].store(k, Ordering::Release);
                        r.ring(slot(i));
                    }
                })
            })
            .collect();
        let mut seen = [0u64; 2];
        let look = |d: &mut Drainer, seen: &mut [u64; 2]| {
            d.drain(|s| {
                let i = (s / 5_000) as usize;
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
    use crate::ring;

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
    /// left unseen.
    #[test]
    fn doorbell_loom_no_post_left_unseen() {
        loom::model(|| {
            let len = bell_bytes(64);
            // SAFETY: leaked memory.
            let (r, mut d) = unsafe { init(leak(len), len, 64) }.unwrap();
            let rlen = ring::ring_bytes::<u64>(2);
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
                d.drain(|_| listed = true);
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
