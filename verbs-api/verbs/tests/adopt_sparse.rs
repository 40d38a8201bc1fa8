//! What adopting application memory costs (`ProtectionDomain::reg_user_mr`): an arena's
//! segment spans the whole mapping of the registered octets (and the heap's growth room), but
//! only the pages adopted have memory behind them. Its own test binary, so that no other
//! test's arenas are among this process's descriptors.

use iwarp_testkit::{self as testkit, Proc};
use iwarp_verbs::{access, Context};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

const PAGE: u64 = 4096;

/// (file size, octets allocated) of every adoption arena of this process, from its
/// descriptors (`/memfd:iwarp-app-<pid>-adopt-<n>`).
fn arenas() -> Vec<(u64, u64)> {
    let tag = format!("iwarp-app-{}-adopt-", std::process::id());
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let p: PathBuf = e.ok()?.path();
            let target = std::fs::read_link(&p).ok()?;
            target.to_string_lossy().contains(&tag).then(|| {
                let m = std::fs::metadata(&p).unwrap();
                (m.len(), m.blocks() * 512)
            })
        })
        .collect()
}

#[test]
fn an_arena_costs_only_the_pages_registered() {
    let dir = tempfile::tempdir().unwrap();
    let daemon: Proc = testkit::start_daemon(dir.path(), "a", 1, 57, &[]);
    let runtime = dir.path().join("a");
    let _control = testkit::start_control(&runtime);
    let ctx = Context::open(&runtime).unwrap();
    let pd = ctx.alloc_pd().unwrap();

    // A 64 MiB mapping of its own; 100 octets in its middle, across no page boundary.
    let len = 64 << 20;
    // SAFETY: a fresh private anonymous mapping, checked.
    let map = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    let at = map.cast::<u8>().wrapping_add(len / 2 + 10);
    // SAFETY: inside the mapping.
    unsafe { at.write_bytes(0x5a, 100) };
    // SAFETY: this process's memory; no other thread writes its pages.
    let mr = unsafe { pd.reg_user_mr(at, 100, at as u64, access::LOCAL_WRITE) }.unwrap();
    let a = arenas();
    assert_eq!(a.len(), 1, "{a:?}");
    let (size, allocated) = a[0];
    assert!(size >= len as u64, "the arena spans the mapping: {a:?}");
    // The header page and the one adopted page.
    assert_eq!(allocated, 2 * PAGE, "{a:?}");
    // SAFETY: as above; the contents survived adoption.
    assert!((0..100).all(|i| unsafe { at.add(i).read_volatile() } == 0x5a));

    // A small allocation (a test thread's malloc arena is a mapping of its own, the main
    // thread's the heap with 64 MiB of growth room): its window is free as well.
    // SAFETY: plain allocation, checked.
    let small = unsafe { libc::malloc(200) }.cast::<u8>();
    assert!(!small.is_null());
    // SAFETY: malloc'd memory of this process (this thread's arena of the allocator).
    let heap = unsafe { pd.reg_user_mr(small, 200, small as u64, access::LOCAL_WRITE) }.unwrap();
    let a = arenas();
    assert_eq!(a.len(), 2, "{a:?}");
    let h = a
        .iter()
        .find(|x| **x != (size, allocated))
        .copied()
        .unwrap();
    assert!(
        h.0 > 3 * PAGE,
        "the arena spans the allocator's mapping: {a:?}"
    );
    // At most two pages when the 200 octets cross a page boundary.
    assert!(h.1 <= 3 * PAGE, "{a:?}");

    // Deregistered pages give their memory back; the header stays.
    mr.deregister().map_err(|(_, e)| e).unwrap();
    heap.deregister().map_err(|(_, e)| e).unwrap();
    assert!(arenas().iter().all(|x| x.1 == PAGE), "{:?}", arenas());
    // SAFETY: freed once, after its registration ended; the mapping likewise.
    unsafe {
        libc::free(small.cast());
        libc::munmap(map, len);
    }
    drop(daemon);
}
