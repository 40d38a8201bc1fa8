//! A ring in a shared segment between two real processes: the test binary runs itself as
//! the producer, the parent consumes a million entries and checks their order.

use iwarp_abi::ring::{self, ring_bytes};
use iwarp_abi::segment::{HugePolicy, Segment};
use std::process::Command;

const N: u64 = 1_000_000;
const CAP: usize = 1024;

#[test]
fn ring_between_two_processes() {
    if let Ok(path) = std::env::var("IWARP_RING_CHILD") {
        // The child: attach and produce.
        let seg = Segment::open(std::path::Path::new(&path)).unwrap();
        // SAFETY: the parent initialised a ring of u64 in this segment and only consumes.
        let (mut p, _) = unsafe { ring::attach::<u64>(seg.ptr(), seg.len()) }.unwrap();
        let mut i = 0;
        while i < N {
            if p.push(i * 3 + 1).is_ok() {
                i += 1;
            }
        }
        return;
    }
    let name = format!("iwarp-ring-test-{}", std::process::id());
    let seg = Segment::create(&name, ring_bytes::<u64>(CAP), HugePolicy::Auto).unwrap();
    // SAFETY: a fresh segment; the child produces, we consume.
    let (_, mut c) = unsafe { ring::init::<u64>(seg.ptr(), seg.len(), CAP) }.unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "ring_between_two_processes", "--nocapture"])
        .env("IWARP_RING_CHILD", seg.path())
        .spawn()
        .unwrap();
    let mut next = 0;
    while next < N {
        if let Some(v) = c.pop() {
            assert_eq!(v, next * 3 + 1);
            next += 1;
        } else {
            std::hint::spin_loop();
        }
    }
    assert!(child.wait().unwrap().success());
    let path = seg.path().to_path_buf();
    println!(
        "1M entries across processes through {:?} ({:?})",
        path,
        seg.backing()
    );
    drop(seg);
    assert!(!path.exists(), "the creator removes the segment");
}

#[test]
fn hugepages_required_says_why() {
    if iwarp_abi::segment::hugetlbfs_mount().is_some() && iwarp_abi::segment::free_hugepages() >= 1
    {
        let s = Segment::create(
            &format!("iwarp-huge-{}", std::process::id()),
            1 << 20,
            HugePolicy::Required,
        )
        .unwrap();
        assert_eq!(s.backing(), iwarp_abi::segment::Backing::HugePages);
    } else {
        let e = Segment::create("iwarp-huge-x", 1 << 20, HugePolicy::Required).unwrap_err();
        assert!(e.to_string().contains("hugepages required"), "{e}");
    }
    let s = Segment::create(
        &format!("iwarp-off-{}", std::process::id()),
        100,
        HugePolicy::Off,
    )
    .unwrap();
    assert_eq!(s.backing(), iwarp_abi::segment::Backing::Shm);
    assert_eq!(s.len(), 4096);
}
