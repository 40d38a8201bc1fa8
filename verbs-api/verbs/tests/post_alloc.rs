//! Posting and polling are the fast path: once the queues have reached their working size,
//! Post Send, Post Receive and Poll CQ (Verbs sections 8.2.2, 8.2.3 and 8.3) allocate
//! nothing. Counted by a global allocator that counts this thread's allocations while asked
//! to.

use iwarp_abi::ring::{init_segment, ring_bytes, Consumer, Producer};
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use iwarp_abi::wqe::{Cqe, RecvWqe, SendWqe};
use iwarp_verbs::{CompletionQueue, MemoryRegion, QueuePair, RecvWr, SendWr, Sg, WrOpcode};
use iwarp_verbs::{CqId, QpId, Stag};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the count is a side effect
// on thread-local cells, which need no allocation (const-initialised, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, that is from the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: as for `dealloc`; the new size is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

fn ring<T: iwarp_abi::ring::Slot>(kind: SegmentKind, cap: usize) -> (Producer<T>, Consumer<T>) {
    let seg = Arc::new(
        Segment::create_anonymous("t-alloc", kind, ring_bytes::<T>(cap), HugePolicy::Off).unwrap(),
    );
    init_segment::<T>(&seg, cap).unwrap()
}

#[test]
fn posting_allocates_nothing_once_the_queues_are_warm() {
    let (sq_p, mut sq) = ring::<SendWqe>(SegmentKind::SendQueue, 16);
    let (rq_p, mut rq) = ring::<RecvWqe>(SegmentKind::RecvQueue, 16);
    let (mut cq_p, cq_c) = ring::<Cqe>(SegmentKind::CompletionQueue, 16);
    let cq = Arc::new(CompletionQueue::from_ring(CqId(3), cq_c));
    let qp = QueuePair::from_rings(QpId(7), sq_p, Some(rq_p), cq.clone(), cq.clone(), 4, 16);
    let mr = MemoryRegion::from_registration(Stag(0x100), 0x1000, 4096);
    let sg: Vec<Sg> = (0..4)
        .map(|i| Sg {
            mr: &mr,
            offset: i * 64,
            len: 64,
        })
        .collect();
    let write = WrOpcode::RdmaWrite {
        rkey: Stag(9),
        remote_addr: 0,
    };
    let mut during = Vec::new();
    for round in 0..64u64 {
        let (send, recv) = (
            SendWr::new(round, write, &sg),
            RecvWr {
                wr_id: round,
                sg_list: &sg,
            },
        );
        let posting = allocations(|| {
            qp.post_send(&send).unwrap();
            qp.post_recv(&recv).unwrap();
        });
        // The daemon's part: take both and complete both.
        for _ in 0..2 {
            let c = if let Some(w) = sq.pop() {
                Cqe {
                    wr_id: w.wr_id,
                    qp_num: 7,
                    opcode: iwarp_verbs::WcOpcode::Write as u8,
                    ..Cqe::default()
                }
            } else {
                let w = rq.pop().unwrap();
                Cqe {
                    wr_id: w.wr_id,
                    qp_num: 7,
                    opcode: iwarp_verbs::WcOpcode::Recv as u8,
                    ..Cqe::default()
                }
            };
            cq_p.push(c).unwrap();
        }
        let mut reaped = 0;
        let polling = allocations(|| {
            while cq.poll_one().unwrap().is_some() {
                reaped += 1;
            }
        });
        assert_eq!(reaped, 2);
        during.push((posting, polling));
    }
    assert_eq!(mr.posted(), 0, "every request retired");
    // The first rounds may size the queues' bookkeeping; after that, nothing.
    assert!(
        during[8..].iter().all(|&n| n == (0, 0)),
        "allocations per post_send + post_recv, per poll of both: {during:?}"
    );
}
