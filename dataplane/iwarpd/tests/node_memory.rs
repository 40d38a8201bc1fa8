//! What an idle connection costs a node: its heap (counted by this test's allocator, per thread), with
//! the daemon's default 1 MiB TCP rings, which live in mappings of their own; and those rings
//! given back once the connection idles, with the stream intact afterwards.

mod common;

use common::{pair_tcp, poll_for, segment_dir, until, write_b_to_a, End, A_IP, B_IP};
use iwarp_engine::QpCaps;
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, TcpSettings};
use iwarpd::port::unix::UnixPort;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::time::{Duration, Instant};

thread_local! {
    /// Heap octets allocated and not yet freed by this thread (tests run on threads of their
    /// own, side by side): the nodes of a test live on its thread.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // A thread being torn down has no counter any more: nothing of ours runs there.
    let _ = LIVE.try_with(|l| l.set(l.get() + delta));
}

fn live() -> isize {
    LIVE.with(Cell::get)
}

struct Counting;

// SAFETY: every call goes to the system allocator unchanged; only a counter is kept beside.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size() as isize);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count(l.size() as isize);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(-(l.size() as isize));
        // SAFETY: `p` came from `alloc` with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new as isize - l.size() as isize);
        // SAFETY: `p` came from `alloc` with layout `l`.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Connections measured (`IWARP_NODE_MEMORY_CONNS` for a larger run by hand).
const N: usize = 200;
/// Setups started at once (see `storm.rs`).
const WAVE: usize = 50;

/// Opens connections `range`, [`WAVE`] at a time, each with a QP of 16-deep queues.
fn open(
    a: &mut End<UnixPort>,
    b: &mut End<UnixPort>,
    range: std::ops::Range<usize>,
) -> Vec<(usize, usize)> {
    let mut all = Vec::new();
    let caps = QpCaps {
        sq_depth: 16,
        rq_depth: 16,
        srq: None,
    };
    for start in range.clone().step_by(WAVE) {
        let mut wave = Vec::new();
        for i in start..(start + WAVE).min(range.end) {
            let qa = a.rnic.create_qp(a.pd, a.cq, a.cq, caps).unwrap();
            let qb = b.rnic.create_qp(b.pd, b.cq, b.cq, caps).unwrap();
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
            a.node.poll(&mut a.rnic);
            b.node.poll(&mut b.rnic);
        }
        all.extend(wave);
    }
    all
}

/// Resident memory of this process, octets.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |k| k << 10)
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
    let n = std::env::var("IWARP_NODE_MEMORY_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(N);
    let (before, rss_before, t) = (live(), rss(), Instant::now());
    let conns = open(&mut a, &mut b, WAVE..WAVE + n);
    let per = (live() - before) / (2 * n) as isize;
    println!(
        "{n} connections opened in {:.1} s; heap per idle connection and its QP (one node): \
         {per} B; resident memory of both nodes {} -> {} KiB",
        t.elapsed().as_secs_f64(),
        rss_before >> 10,
        rss() >> 10
    );
    // Held idle for a while by hand (`IWARP_NODE_MEMORY_HOLD_S`): every one still up.
    if let Some(hold) = std::env::var("IWARP_NODE_MEMORY_HOLD_S")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        poll_for(&mut a, &mut b, Duration::from_secs(hold));
        let up = conns
            .iter()
            .filter(|&&(ca, cb)| {
                a.node.state(ca) == Some(&ConnState::Rts)
                    && b.node.state(cb) == Some(&ConnState::Rts)
            })
            .count();
        println!(
            "held {hold} s: {up} of {n} up; resident memory {} KiB",
            rss() >> 10
        );
        assert_eq!(up, n);
    }
    assert!(per < 16 << 10, "{per} B of heap per connection");
    // Each connection's socket (and each listener's) has its rings mapped.
    assert!(a.node.mapped_sockets() >= WAVE + n);
    assert!(b.node.mapped_sockets() >= WAVE + n);
}

/// Two nodes on Unix ports in `dir` (MACs `02:00:00:00:<net>:0a`/`0b`), one connection
/// between them with the daemon's default TCP settings.
fn default_pair(dir: &Path, net: u8) -> (End<UnixPort>, End<UnixPort>) {
    pair_tcp(
        UnixPort::open(dir, [2, 0, 0, 0, net, 0x0a], 1500).unwrap(),
        UnixPort::open(dir, [2, 0, 0, 0, net, 0x0b], 1500).unwrap(),
        Settings::default(),
        TcpSettings::default(),
    )
}

#[test]
fn an_idle_connection_gives_its_rings_back_and_its_stream_goes_on() {
    let dir = segment_dir("iwarp-nodetrim");
    let (mut a, mut b) = default_pair(dir.path(), 7);
    for round in 0..3u8 {
        // Enough to wrap both rings several times.
        write_b_to_a(&mut a, &mut b, 3 << 20, round);
        let (ta, tb) = (a.node.ring_trims(), b.node.ring_trims());
        // Idle: each node gives the connection's rings back (it looks every second).
        until(&mut a, &mut b, 20, |a, b| {
            a.node.ring_trims() > ta && b.node.ring_trims() > tb
        });
    }
    // Idle on, past several keep-alive intervals (a quarter of the 2 s user timeout): the
    // keep-alives and their answers move no data, so the rings are not given back again,
    // which cost every idle connection a system call per ring each second.
    let trims = (a.node.ring_trims(), b.node.ring_trims());
    let frames = (a.node.counters().rx_frames, b.node.counters().rx_frames);
    poll_for(&mut a, &mut b, Duration::from_millis(2600));
    let heard = (
        a.node.counters().rx_frames - frames.0,
        b.node.counters().rx_frames - frames.1,
    );
    assert!(heard.0 >= 2 && heard.1 >= 2, "keep-alives heard: {heard:?}");
    assert_eq!((a.node.ring_trims(), b.node.ring_trims()), trims);
}

/// A connection that keeps moving data keeps its rings, though they are empty between its
/// Writes, as they often are when the node looks: given back then, every busy connection
/// would fault its pages in again at its next segment, each second.
#[test]
fn a_busy_connection_keeps_its_rings_between_writes() {
    let dir = segment_dir("iwarp-nodebusy");
    let (mut a, mut b) = default_pair(dir.path(), 8);
    let trims = (a.node.ring_trims(), b.node.ring_trims());
    // A Write every 100 ms for three of the nodes' looks, each Write complete and both
    // rings empty long before the next.
    let end = Instant::now() + Duration::from_millis(3200);
    let mut seed = 0u8;
    while Instant::now() < end {
        write_b_to_a(&mut a, &mut b, 4096, seed);
        seed = seed.wrapping_add(1);
        poll_for(&mut a, &mut b, Duration::from_millis(100));
    }
    assert_eq!((a.node.ring_trims(), b.node.ring_trims()), trims);
    // Then idle: given back within two looks.
    until(&mut a, &mut b, 20, |a, b| {
        a.node.ring_trims() > trims.0 && b.node.ring_trims() > trims.1
    });
}
