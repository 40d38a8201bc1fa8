//! Registering the application's own memory (`ProtectionDomain::reg_user_mr`) against the
//! real stack: malloc'd, unaligned memory with other live data in the same pages, written
//! and read by the peer through the daemon at its virtual address (VA-based, Verbs section
//! 7.2.3), intact after deregistration; and `fork` after registration.

use iwarp_testkit::Endpoint;
use iwarp_verbs::{
    access, CompletionQueue, ConnSettings, Context, QpInitAttr, QueuePair, SendWr, Sg, WcStatus,
    WrOpcode,
};
use std::path::Path;
use std::time::{Duration, Instant};

fn endpoint(dir: &Path, name: &str, n: u8) -> Endpoint {
    Endpoint::start(dir, name, n, 56, &[])
}

fn connect(ca: &Context, qa: &QueuePair, cb: &Context, qb: &QueuePair, port: u16) {
    cb.listen(port, &ConnSettings::default()).unwrap();
    let remote = format!("10.56.0.2:{port}").parse().unwrap();
    let conn = ca.connect(qa, remote, &ConnSettings::default()).unwrap();
    let req = cb.get_request(Duration::from_secs(20)).unwrap();
    cb.accept_blocking(&req, qb, &ConnSettings::default(), Duration::from_secs(20))
        .unwrap();
    ca.wait_established(conn, Duration::from_secs(20)).unwrap();
}

fn completed(cq: &CompletionQueue, wr_id: u64) {
    let wc = cq.wait(Duration::from_secs(20)).unwrap().unwrap();
    assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success), "{wc:?}");
}

/// A malloc'd block large enough that malloc gives it pages of its own (its mmap threshold),
/// so no other thread of the test writes into the pages adopted.
struct Malloc(*mut u8, usize);

impl Malloc {
    fn new(len: usize) -> Malloc {
        // SAFETY: plain allocation, checked.
        let p = unsafe { libc::malloc(len) }.cast::<u8>();
        assert!(!p.is_null());
        Malloc(p, len)
    }
    fn at(&self, offset: usize) -> *mut u8 {
        assert!(offset <= self.1);
        // SAFETY: within the block.
        unsafe { self.0.add(offset) }
    }
}

/// The `len` octets at `p`, read volatile: the peer's daemon writes them behind the
/// compiler's back.
fn peek(p: *const u8, len: usize) -> Vec<u8> {
    // SAFETY: callers pass ranges of a live Malloc block.
    (0..len)
        .map(|i| unsafe { core::ptr::read_volatile(p.add(i)) })
        .collect()
}

fn poke(p: *mut u8, data: &[u8]) {
    for (i, b) in data.iter().enumerate() {
        // SAFETY: callers pass ranges of a live Malloc block.
        unsafe { core::ptr::write_volatile(p.add(i), *b) };
    }
}

impl Drop for Malloc {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc in `new`.
        unsafe { libc::free(self.0.cast()) };
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn malloced_unaligned_memory_takes_writes_and_reads_at_its_address() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (endpoint(dir.path(), "a", 1), endpoint(dir.path(), "b", 2));
    let (ca, cb) = (
        Context::open(&a.runtime).unwrap(),
        Context::open(&b.runtime).unwrap(),
    );
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (cqa, cqb) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::new(&cqa, 8)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::new(&cqb, 8)).unwrap();
    connect(&ca, &qa, &cb, &qb, 7600);

    // B's memory: 1 MiB from malloc; the region is 10000 octets at an odd offset, with live
    // data before and after it in the same pages.
    let block = Malloc::new(1 << 20);
    let before = pattern(4099, 0x11);
    let after = pattern(5003, 0x22);
    let (at, len) = (4099 + 3, 10_000);
    poke(block.at(0), &before);
    poke(block.at(at), &pattern(len, 0x33));
    poke(block.at(at + len), &after);
    let addr = block.at(at);
    // SAFETY: malloc'd memory of this process; no other thread writes its pages.
    let mr = unsafe {
        pb.reg_user_mr(
            addr,
            len,
            addr as u64,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )
    }
    .unwrap();
    // Adopting the pages kept every octet in them.
    assert_eq!(peek(block.at(0), 4099), before);
    assert_eq!(peek(addr, len), pattern(len, 0x33));
    assert_eq!(peek(block.at(at + len), 5003), after);

    // A writes 6000 octets at B's address + 1000: they land in B's malloc'd memory.
    let src = ca.alloc_buffer(16384).unwrap();
    let ma = pa
        .reg_mr(&src, 0, 16384, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let data = pattern(6000, 0x44);
    src.write(0, &data).unwrap();
    let sg = [Sg {
        mr: &ma,
        offset: 0,
        len: 6000,
    }];
    let write = WrOpcode::RdmaWrite {
        rkey: mr.region().stag(),
        remote_addr: addr as u64 + 1000,
    };
    qa.post_send(&SendWr::new(1, write, &sg)).unwrap();
    completed(&cqa, 1);
    let t = Instant::now();
    while peek(block.at(at + 1000), 6000) != data {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the Write never landed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }

    // A reads B's whole region back, from B's address: what B's memory holds now.
    let rsg = [Sg {
        mr: &ma,
        offset: 0,
        len: len as u32,
    }];
    let read = WrOpcode::RdmaRead {
        rkey: mr.region().stag(),
        remote_addr: addr as u64,
    };
    qa.post_send(&SendWr::new(2, read, &rsg)).unwrap();
    completed(&cqa, 2);
    assert_eq!(src.to_vec(0, len).unwrap(), peek(addr, len));

    // Past the region's end (VA + len) the peer is refused: a Read of it fails.
    let beyond = WrOpcode::RdmaRead {
        rkey: mr.region().stag(),
        remote_addr: addr as u64 + len as u64 - 10,
    };
    let sg = [Sg {
        mr: &ma,
        offset: 0,
        len: 20,
    }];
    qa.post_send(&SendWr::new(3, beyond, &sg)).unwrap();
    let wc = cqa.wait(Duration::from_secs(20)).unwrap().unwrap();
    assert_ne!(wc.status, WcStatus::Success, "{wc:?}");

    // Deregistered: the memory is the process's own again, with all its contents.
    let now = peek(addr, len);
    mr.deregister().map_err(|(_, e)| e).unwrap();
    assert_eq!(peek(block.at(0), 4099), before);
    assert_eq!(peek(addr, len), now);
    assert_eq!(peek(block.at(at + len), 5003), after);
    poke(addr, &[now[0] ^ 0xff]);
    assert_eq!(peek(addr, 1), [now[0] ^ 0xff]);
}

/// Regions over the same pages, nested or overlapping in part (small heap buffers side by
/// side), share the adopted pages; each page goes back when its last region does.
#[test]
fn overlapping_registrations_share_adopted_pages() {
    let dir = tempfile::tempdir().unwrap();
    let a = endpoint(dir.path(), "a", 1);
    let ctx = Context::open(&a.runtime).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let block = Malloc::new(1 << 20);
    poke(block.at(0), &pattern(1 << 20, 0x66));
    // 12 pages into the block, so the regions below start on a page of their own.
    let base = block.at(0) as usize;
    let page = (base + 12 * 4096) & !4095;
    let p = |off: usize| (page + off) as *mut u8;
    // SAFETY (all): malloc'd memory of this process; no other thread writes it.
    let outer =
        unsafe { pd.reg_user_mr(p(100), 3 * 4096, p(100) as u64, access::LOCAL_WRITE) }.unwrap();
    let inner = unsafe { pd.reg_user_mr(p(4096 + 8), 64, p(4096 + 8) as u64, access::LOCAL_WRITE) }
        .unwrap();
    // Pages 0..4 are adopted; this region covers pages 3..5, in part the same.
    let partial =
        unsafe { pd.reg_user_mr(p(3 * 4096 + 10), 8192, p(3 * 4096 + 10) as u64, 0) }.unwrap();
    let stags = [
        outer.region().stag(),
        inner.region().stag(),
        partial.region().stag(),
    ];
    assert!(stags[0] != stags[1] && stags[1] != stags[2] && stags[0] != stags[2]);
    poke(p(3 * 4096 + 20), b"written while shared");
    drop(outer);
    drop(inner);
    // Pages 0..3 are given back, 3..5 still adopted: every octet keeps the value written
    // to it.
    assert_eq!(peek(p(3 * 4096 + 20), 20), b"written while shared");
    drop(partial);
    let mut want = pattern(1 << 20, 0x66);
    let at = page + 3 * 4096 + 20 - base;
    want[at..at + 20].copy_from_slice(b"written while shared");
    assert_eq!(peek(block.at(0), 1 << 20), want);
    // Given back: the same range adopts again.
    let again = unsafe { pd.reg_user_mr(p(3 * 4096 + 10), 8192, p(3 * 4096 + 10) as u64, 0) };
    assert!(again.is_ok(), "{again:?}");
}

/// After `fork`, the registered pages are not in the child (rdma-core's `ibv_fork_init`
/// behaviour: `MADV_DONTFORK`), so the child cannot write into memory the daemon shares.
#[test]
fn a_child_after_fork_does_not_get_registered_pages() {
    let dir = tempfile::tempdir().unwrap();
    let a = endpoint(dir.path(), "a", 1);
    let ctx = Context::open(&a.runtime).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let block = Malloc::new(1 << 20);
    let addr = block.at(5000);
    // SAFETY: malloc'd memory of this process; no other thread writes it.
    let mr = unsafe { pd.reg_user_mr(addr, 100, addr as u64, access::LOCAL_WRITE) }.unwrap();
    let outside = block.at(600_000);
    // SAFETY: the child only touches memory and exits (async-signal-safe).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the child: a read of the parent's unregistered memory, then of the
        // registered page (which faults: it is not mapped here).
        unsafe {
            core::ptr::read_volatile(outside);
            core::ptr::read_volatile(addr);
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "child status {status:#x}"
    );
    drop(mr);
}

/// A small heap allocation: the adopted pages hold the allocator's own data and objects
/// made after registration (here the region's handle itself may land there); all survive
/// deregistration.
#[test]
fn heap_pages_with_the_allocators_data_survive_deregistration() {
    let dir = tempfile::tempdir().unwrap();
    let a = endpoint(dir.path(), "a", 1);
    let ctx = Context::open(&a.runtime).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let small = Malloc::new(200);
    poke(small.at(0), &pattern(200, 0x55));
    // SAFETY: malloc'd memory of this process; no other thread writes these pages while the
    // registration runs (this test's thread owns its own malloc arena).
    let mr = unsafe { pd.reg_user_mr(small.at(0), 200, small.at(0) as u64, access::LOCAL_WRITE) }
        .unwrap();
    // Allocations and frees after registration, in the same heap.
    let later: Vec<Box<[u8; 48]>> = (0..64).map(|i| Box::new([i as u8; 48])).collect();
    mr.deregister().map_err(|(_, e)| e).unwrap();
    assert_eq!(peek(small.at(0), 200), pattern(200, 0x55));
    for (i, b) in later.iter().enumerate() {
        assert_eq!(**b, [i as u8; 48]);
    }
    drop(later);
    drop(small);
}
