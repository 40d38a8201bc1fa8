//! What an idle connection costs a node: its heap (counted by this test's allocator), with
//! the daemon's default 1 MiB TCP rings, which live in mappings of their own; and those rings
//! given back once the connection idles, with the stream intact afterwards.

mod common;

use common::{pair_tcp, segment_dir, until, write_b_to_a, End, A_IP, B_IP};
use iwarp_engine::QpCaps;
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, TcpSettings};
use iwarpd::port::unix::UnixPort;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

/// Heap octets allocated and not yet freed, by the whole test process.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call goes to the system allocator unchanged; only a counter is kept beside.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with layout `l`.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Connections measured.
const N: usize = 200;
/// Setups started at once (see `storm.rs`).
const WAVE: usize = 50;

/// Opens connections `range`, [`WAVE`] at a time, each with a QP of 16-deep queues.
fn open(a: &mut End<UnixPort>, b: &mut End<UnixPort>, range: std::ops::Range<usize>) {
    let caps = QpCaps {
        sq_depth: 16,
        rq_depth: 16,
        srq: None,
    };
    for start in range.clone().step_by(WAVE) {
        let mut wave = Vec::new();
        for i in start..(start + WAVE).min(range.end) {
            let qa = a.node.rnic.create_qp(a.pd, a.cq, a.cq, caps).unwrap();
            let qb = b.node.rnic.create_qp(b.pd, b.cq, b.cq, caps).unwrap();
            let port = 20_000 + i as u16;
            let ca = a.node.listen(port, qa, Settings::default()).unwrap();
            let cb = b
                .node
                .connect(A_IP, port, 30_000 + i as u16, qb, Settings::default())
                .unwrap();
            wave.push((ca, cb));
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while !wave.iter().all(|&(ca, cb)| {
            a.node.state(ca) == Some(&ConnState::Rts) && b.node.state(cb) == Some(&ConnState::Rts)
        }) {
            assert!(Instant::now() < deadline, "setups did not finish");
            a.node.poll();
            b.node.poll();
        }
    }
}

#[test]
fn an_idle_connection_costs_the_node_under_16_kib_of_heap_with_1_mib_rings() {
    let dir = segment_dir("iwarp-nodemem");
    let tcp = TcpSettings::default();
    assert_eq!(tcp.rx_buffer, 1 << 20, "the daemon's default rings");
    let mut a = End::with_tcp(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 6, 0x0a], 1500).unwrap(),
        A_IP,
        tcp,
    );
    let mut b = End::with_tcp(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 6, 0x0b], 1500).unwrap(),
        B_IP,
        tcp,
    );
    // The first wave grows the tables (socket set, connection list) past their first sizes.
    open(&mut a, &mut b, 0..WAVE);
    let before = LIVE.load(Ordering::Relaxed);
    open(&mut a, &mut b, WAVE..WAVE + N);
    let per = (LIVE.load(Ordering::Relaxed) - before) / (2 * N) as isize;
    println!("heap per idle connection and its QP (one node): {per} B");
    assert!(per < 16 << 10, "{per} B of heap per connection");
    // Each connection's socket (and each listener's) has its rings mapped.
    assert!(a.node.mapped_sockets() >= WAVE + N);
    assert!(b.node.mapped_sockets() >= WAVE + N);
}

#[test]
fn an_idle_connection_gives_its_rings_back_and_its_stream_goes_on() {
    let dir = segment_dir("iwarp-nodetrim");
    let (mut a, mut b) = pair_tcp(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 7, 0x0a], 1500).unwrap(),
        UnixPort::open(dir.path(), [2, 0, 0, 0, 7, 0x0b], 1500).unwrap(),
        Settings::default(),
        TcpSettings::default(),
    );
    for round in 0..3u8 {
        // Enough to wrap both rings several times.
        write_b_to_a(&mut a, &mut b, 3 << 20, round);
        let (ta, tb) = (a.node.ring_trims(), b.node.ring_trims());
        // Idle: each node gives the connection's rings back (it looks every second).
        until(&mut a, &mut b, 20, |a, b| {
            a.node.ring_trims() > ta && b.node.ring_trims() > tb
        });
    }
}
