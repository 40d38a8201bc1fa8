//! Engine-only throughput: two RNIC engines on one thread, FPDUs moved through memory,
//! CRC32c on. Reports 64-byte Sends per second, 64 KiB RDMA Write bandwidth, and heap
//! allocations per message on the steady path (counted by a wrapping global allocator).
//!
//!     cargo run --release -p iwarp-engine --example engine-pair [-- SECONDS [sends|writes]]

use iwarp_engine::{Access, ConnParams, QpCaps, RecvWr, Rnic, SendOp, SendWr, Sge, WorkCompletion};
use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MSS: usize = 1460;
const DEPTH: usize = 512;

struct End {
    rnic: Rnic,
    qp: iwarp_engine::QpId,
    cq: iwarp_engine::CqId,
    stag: u32,
    base: u64,
}

fn end(len: usize) -> End {
    let mut rnic = Rnic::new();
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(DEPTH * 2);
    let qp = rnic
        .create_qp(
            pd,
            cq,
            cq,
            QpCaps {
                sq_depth: DEPTH,
                rq_depth: DEPTH,
                srq: None,
            },
        )
        .unwrap();
    rnic.connect(qp, ConnParams::new(true, 16, 16, MSS))
        .unwrap();
    let mem = Box::leak(vec![0u64; len / 8].into_boxed_slice());
    let ptr = NonNull::new(mem.as_mut_ptr() as *mut u8).unwrap();
    // SAFETY: leaked: valid for the whole run.
    let stag = unsafe { rnic.register_mr(pd, ptr, len, Access::ALL, ptr.as_ptr() as u64) }
        .expect("valid rights");
    End {
        rnic,
        qp,
        cq,
        stag,
        base: ptr.as_ptr() as u64,
    }
}

/// Moves every FPDU A has into B (and B's into A). Returns FPDUs moved.
fn pump(a: &mut End, b: &mut End, wire: &mut [u8]) -> u64 {
    let mut n = 0;
    loop {
        let mut moved = false;
        while let Some(len) = a.rnic.poll_transmit(a.qp, wire) {
            b.rnic.handle_stream(b.qp, &wire[..len]);
            moved = true;
            n += 1;
        }
        while let Some(len) = b.rnic.poll_transmit(b.qp, wire) {
            a.rnic.handle_stream(a.qp, &wire[..len]);
            moved = true;
            n += 1;
        }
        if !moved {
            return n;
        }
    }
}

fn drain(e: &mut End, wcs: &mut [WorkCompletion]) -> u64 {
    let mut total = 0;
    loop {
        let n = e.rnic.poll_cq(e.cq, wcs).unwrap();
        if n == 0 {
            return total;
        }
        assert!(wcs[..n]
            .iter()
            .all(|w| w.status == iwarp_engine::Status::Success));
        total += n as u64;
    }
}

fn sends(secs: f64) -> (f64, f64) {
    let mut a = end(1 << 16);
    let mut b = end(1 << 16);
    let mut wire = vec![0u8; 2048];
    let mut wcs = vec![WorkCompletion::default(); 256];
    let batch = 256;
    let run = |a: &mut End, b: &mut End, wire: &mut [u8], wcs: &mut [WorkCompletion]| {
        for i in 0..batch {
            let sge = Sge {
                stag: b.stag,
                to: b.base + 64 * i,
                len: 64,
            };
            b.rnic.post_recv(b.qp, RecvWr::new(i, &[sge])).unwrap();
            let sge = Sge {
                stag: a.stag,
                to: a.base + 64 * i,
                len: 64,
            };
            let mut wr = SendWr::new(
                i,
                SendOp::Send {
                    solicited: false,
                    invalidate: None,
                },
                &[sge],
            );
            wr.signaled = i == batch - 1;
            a.rnic.post_send(a.qp, wr).unwrap();
        }
        pump(a, b, wire);
        drain(a, wcs);
        assert_eq!(drain(b, wcs), batch);
    };
    for _ in 0..50 {
        run(&mut a, &mut b, &mut wire, &mut wcs);
    }
    let allocs0 = ALLOCS.load(Ordering::Relaxed);
    let start = Instant::now();
    let mut msgs = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        run(&mut a, &mut b, &mut wire, &mut wcs);
        msgs += batch;
    }
    let dt = start.elapsed().as_secs_f64();
    let allocs = ALLOCS.load(Ordering::Relaxed) - allocs0;
    (msgs as f64 / dt, allocs as f64 / msgs as f64)
}

fn writes(secs: f64) -> (f64, f64) {
    const LEN: usize = 64 << 10;
    let mut a = end(LEN * 8);
    let mut b = end(LEN * 8);
    let mut wire = vec![0u8; 2048];
    let mut wcs = vec![WorkCompletion::default(); 256];
    let batch = 8u64;
    let run = |a: &mut End, b: &mut End, wire: &mut [u8], wcs: &mut [WorkCompletion]| {
        for i in 0..batch {
            let sge = Sge {
                stag: a.stag,
                to: a.base + i * LEN as u64,
                len: LEN as u32,
            };
            let op = SendOp::Write {
                remote_stag: b.stag,
                remote_to: b.base + i * LEN as u64,
            };
            a.rnic.post_send(a.qp, SendWr::new(i, op, &[sge])).unwrap();
        }
        pump(a, b, wire);
        assert_eq!(drain(a, wcs), batch);
    };
    for _ in 0..20 {
        run(&mut a, &mut b, &mut wire, &mut wcs);
    }
    let allocs0 = ALLOCS.load(Ordering::Relaxed);
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut msgs = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        run(&mut a, &mut b, &mut wire, &mut wcs);
        bytes += batch * LEN as u64;
        msgs += batch;
    }
    let dt = start.elapsed().as_secs_f64();
    let allocs = ALLOCS.load(Ordering::Relaxed) - allocs0;
    (bytes as f64 / dt, allocs as f64 / msgs as f64)
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    // Optional second argument: `sends` or `writes` to run only that test (for profiling).
    let only = std::env::args().nth(2).unwrap_or_default();
    println!("engine pair, one thread, CRC32c on, MSS {MSS}, {secs} s per test");
    if only != "writes" {
        let (rate, allocs) = sends(secs);
        println!(
            "64 B Send        {:>8.2} M msg/s   allocations per message {:.3}",
            rate / 1e6,
            allocs
        );
    }
    if only != "sends" {
        let (bw, allocs) = writes(secs);
        println!(
            "64 KiB Write     {:>8.2} GB/s      allocations per message {:.3}",
            bw / 1e9,
            allocs
        );
    }
}
