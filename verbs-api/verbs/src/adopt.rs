//! Registering memory the application allocated itself (malloc, the stack, an mmap'd file):
//! the daemon is another process, so the pages are *adopted*. Their contents are copied into
//! a shared segment, which is then mapped over them at the same address
//! (`MAP_FIXED | MAP_SHARED`), as FreeFlow did; the daemon maps the same segment, so it
//! places into and reads from the application's memory with no copy. The region is
//! VA-based: tagged offsets are the application's addresses.
//!
//! Segments are *arenas* anchored at a mapping of the process (the `/proc/self/maps` entry
//! holding the first registered octet): a sparse segment as long as that mapping plus room
//! for it to grow, with memory behind the adopted pages only, where the page at address `a` is at offset `a - base`. Registrations in
//! one arena therefore share a segment however they overlap (small heap buffers next to each
//! other, a buffer inside a structure registered twice), and each page is adopted once and
//! counted; when its count drops to zero it becomes private anonymous memory again with its
//! contents. Limits (see `docs/dropin.md`): writes by other threads to a page while it is
//! copied are lost; adopted pages are not inherited by a child after `fork`
//! (`MADV_DONTFORK`, as `ibv_fork_init` makes registered memory); a file mapping stops
//! writing through to its file while adopted and after; locked pages lose the lock; huge
//! pages are adopted as ordinary pages, and a hugetlbfs mapping is refused.

use crate::context::ProtectionDomain;
use crate::error::Error;
use crate::link::{lock, Release};
use crate::mr::MemoryRegion;
use crate::shm::segment_name;
use iwarp_abi::app::{Reply, Request};
use iwarp_abi::id::Stag;
use iwarp_abi::segment::{Segment, SegmentKind, PAGE};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

/// Room an arena leaves for its mapping to grow (a heap extended by `brk` after the first
/// registration stays in the same arena).
const GROWTH: usize = 64 << 20;

/// One arena: the window `[base, base + len)` of the process's addresses and the segment
/// behind it, with how many regions use each adopted page.
#[derive(Debug)]
struct Arena {
    /// The control session (context) the segment is attached to: control removes an
    /// application's segment files when its session ends, so an arena serves one session.
    owner: usize,
    base: usize,
    len: usize,
    seg: Segment,
    /// Adopted pages (their addresses) and the number of regions over each.
    pages: BTreeMap<usize, u32>,
}

/// Every arena. Registration holds this lock throughout, so two registrations never adopt
/// the same page; the pages a region holds are given back under it too.
static ARENAS: Mutex<Vec<Arc<Mutex<Arena>>>> = Mutex::new(Vec::new());

fn lock_arenas() -> std::sync::MutexGuard<'static, Vec<Arc<Mutex<Arena>>>> {
    ARENAS.lock().unwrap_or_else(|p| p.into_inner())
}

fn io(what: &str) -> Error {
    let e = std::io::Error::last_os_error();
    Error::Io(std::io::Error::new(e.kind(), format!("{what}: {e}")))
}

fn invalid(a: usize, len: usize) -> Error {
    Error::InvalidLength {
        offset: a as u64,
        len: len as u64,
        region_len: 0,
    }
}

/// The `[start, end)` of the mapping of this process holding `a`, whether it is a hugetlbfs
/// mapping, and whether it is the heap.
fn mapping_of(a: usize) -> Option<(usize, usize, bool, bool)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let (range, rest) = l.split_once(' ')?;
        let (s, e) = range.split_once('-')?;
        let (s, e) = (
            usize::from_str_radix(s, 16).ok()?,
            usize::from_str_radix(e, 16).ok()?,
        );
        (s <= a && a < e).then(|| {
            (
                s,
                e,
                rest.contains("/anon_hugepage") || rest.contains("hugetlb"),
                rest.ends_with("[heap]"),
            )
        })
    })
}

impl Arena {
    fn new(owner: usize, base: usize, len: usize) -> Result<Arena, Error> {
        // Sealed, as everything the daemon maps: the application cannot shrink it under the
        // daemon. Sparse: a page has memory only while adopted (`take` allocates it before
        // the daemon can reach it, `give_back` punches it out), so the window of a large
        // mapping and the heap's growth room cost nothing until registered.
        let seg = Segment::create_sealed_sparse(&segment_name("adopt"), SegmentKind::Memory, len)?;
        Ok(Arena {
            owner,
            base,
            len,
            seg,
            pages: BTreeMap::new(),
        })
    }

    /// The segment's descriptor, which an arena keeps for as long as it lives: every
    /// adoption maps its pages again (`MAP_FIXED`) and allocates them through it. -1 (which
    /// every call refuses with `EBADF`) cannot happen, as no arena gives its descriptor up.
    fn raw_fd(&self) -> std::os::fd::RawFd {
        self.seg.fd().map_or(-1, |f| f.as_raw_fd())
    }

    fn contains(&self, start: usize, end: usize) -> bool {
        self.base <= start && end <= self.base + self.len
    }

    /// The segment's copy of the page at address `a`.
    fn copy_of(&self, a: usize) -> *mut u8 {
        // SAFETY: `a` lies in the window (callers check), so the offset is inside the
        // segment's data area.
        unsafe { self.seg.data().as_ptr().add(a - self.base) }
    }

    /// Adopts the pages of `[start, end)` not adopted yet (copy, then map over), and counts
    /// one more region over each.
    ///
    /// # Safety
    /// The range must be mapped, readable and writable memory of this process.
    unsafe fn take(&mut self, start: usize, end: usize) -> Result<(), Error> {
        let data_offset = self.seg.header().data_offset as usize;
        let mut a = start;
        while a < end {
            if self.pages.contains_key(&a) {
                a += PAGE;
                continue;
            }
            // A run of pages not adopted yet, mapped in one call.
            let mut run = a;
            while run < end && !self.pages.contains_key(&run) {
                run += PAGE;
            }
            let n = run - a;
            // Memory for the segment's copy first: no memory to back it fails the registration
            // here, not the daemon with a SIGBUS later.
            if let Err(e) = self.seg.allocate(a - self.base, n) {
                self.give_back(start, a);
                return Err(e.into());
            }
            // SAFETY: the caller vouches for the source pages; the segment's copy of them lies
            // inside its data area.
            unsafe { core::ptr::copy_nonoverlapping(a as *const u8, self.copy_of(a), n) };
            // SAFETY: replaces the run by the segment's pages holding the same contents, in
            // one step (the range never becomes a hole).
            let p = unsafe {
                libc::mmap(
                    a as *mut libc::c_void,
                    n,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    self.raw_fd(),
                    (data_offset + (a - self.base)) as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                // Pages adopted earlier in this call stay adopted, uncounted: give them back.
                let err = io("mapping the adopted pages");
                self.give_back(start, a);
                return Err(err);
            }
            // A child would share these pages with the daemon; rdma-core with ibv_fork_init
            // leaves registered memory out of the child, and so does this.
            // SAFETY: advice on our own mapping.
            unsafe { libc::madvise(a as *mut libc::c_void, n, libc::MADV_DONTFORK) };
            for pg in (a..run).step_by(PAGE) {
                self.pages.insert(pg, 0);
            }
            a = run;
        }
        for pg in (start..end).step_by(PAGE) {
            *self.pages.entry(pg).or_insert(0) += 1;
        }
        Ok(())
    }

    /// Gives back the adopted pages of `[start, end)` no region uses any more.
    fn give_back(&mut self, start: usize, end: usize) {
        // Runs of pages to give back, each with its copy in the segment, worked out before
        // any page is replaced: a page may hold the allocator's data or this arena's own
        // bookkeeping.
        let mut runs: Vec<(usize, usize, *const u8, libc::off_t)> = Vec::new();
        let free: Vec<usize> = self
            .pages
            .range(start..end)
            .filter(|(_, n)| **n == 0)
            .map(|(a, _)| *a)
            .collect();
        let data_offset = self.seg.header().data_offset as usize;
        for a in free {
            self.pages.remove(&a);
            match runs.last_mut() {
                Some((s, n, _, _)) if *s + *n == a => *n += PAGE,
                _ => runs.push((
                    a,
                    PAGE,
                    self.copy_of(a),
                    (data_offset + (a - self.base)) as libc::off_t,
                )),
            }
        }
        let fd = self.raw_fd();
        for (a, n, keep, at) in runs {
            // SAFETY: the new pages are filled elsewhere, then moved over the shared ones in
            // one step (mremap), so the range never reads as zeros; the segment's own mapping
            // of the pages, the source, outlives this (it is unmapped with the arena).
            unsafe {
                let tmp = libc::mmap(
                    core::ptr::null_mut(),
                    n,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if tmp == libc::MAP_FAILED {
                    // Leave the pages shared: the contents stay, only the memory is not freed.
                    continue;
                }
                core::ptr::copy_nonoverlapping(keep, tmp.cast::<u8>(), n);
                let moved = libc::mremap(
                    tmp,
                    n,
                    n,
                    libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                    a as *mut libc::c_void,
                );
                if moved == libc::MAP_FAILED {
                    libc::munmap(tmp, n);
                    continue;
                }
                // The segment's copy is not needed any more: free its memory.
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    at,
                    n as libc::off_t,
                );
            }
        }
    }

    /// One region fewer over the pages of `[start, end)`.
    fn release(&mut self, start: usize, end: usize) {
        for pg in (start..end).step_by(PAGE) {
            if let Some(n) = self.pages.get_mut(&pg) {
                *n = n.saturating_sub(1);
            }
        }
        self.give_back(start, end);
    }
}

fn lock_arena(a: &Mutex<Arena>) -> std::sync::MutexGuard<'_, Arena> {
    a.lock().unwrap_or_else(|p| p.into_inner())
}

/// The arena of session `owner` whose window holds `[start, end)`, made when none of its
/// windows touches it. Refused when another session's arena has any of these pages adopted
/// (one mapping cannot serve two segments).
fn arena_for(
    arenas: &mut Vec<Arc<Mutex<Arena>>>,
    owner: usize,
    start: usize,
    end: usize,
) -> Result<Arc<Mutex<Arena>>, Error> {
    let refused = || invalid(start, end - start);
    let mut found = None;
    let (mut lo, mut hi) = (0, usize::MAX);
    for a in arenas.iter() {
        let ar = lock_arena(a);
        let touches = ar.base < end && start < ar.base + ar.len;
        if ar.owner != owner {
            if touches && ar.pages.range(start..end).next().is_some() {
                return Err(refused());
            }
            continue;
        }
        if touches {
            if !ar.contains(start, end) {
                return Err(refused());
            }
            found = Some(a.clone());
        } else if ar.base + ar.len <= start {
            lo = lo.max(ar.base + ar.len);
        } else {
            hi = hi.min(ar.base);
        }
    }
    if let Some(a) = found {
        return Ok(a);
    }
    let (vs, ve, huge, heap) = mapping_of(start).ok_or_else(refused)?;
    if huge {
        // A hugetlbfs mapping cannot be replaced page by page.
        return Err(refused());
    }
    // The window: the mapping (and room for the heap to grow), between this session's
    // neighbouring windows.
    let grow = if heap { GROWTH } else { 0 };
    let base = vs.max(lo);
    let limit = ve.max(end).saturating_add(grow).min(hi);
    if base > start || limit < end {
        return Err(refused());
    }
    let arena = Arc::new(Mutex::new(Arena::new(owner, base, limit - base)?));
    arenas.push(arena.clone());
    Ok(arena)
}

/// A region over application memory (see the module documentation).
#[derive(Debug)]
pub struct UserMr {
    // Declared first: deregistered before the pages may be given back.
    mr: MemoryRegion,
    addr: u64,
    pages: Pages,
}

/// The adopted pages one region holds; given back (counted down) when dropped.
#[derive(Debug)]
struct Pages {
    arena: Arc<Mutex<Arena>>,
    start: usize,
    end: usize,
}

impl Drop for Pages {
    fn drop(&mut self) {
        let _all = lock_arenas();
        lock_arena(&self.arena).release(self.start, self.end);
    }
}

impl UserMr {
    pub fn region(&self) -> &MemoryRegion {
        &self.mr
    }

    /// The application address of the region's first octet.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Deregisters now (see [`MemoryRegion::deregister`]); refused, with the region given
    /// back, while posted work uses it.
    pub fn deregister(self) -> Result<(), (UserMr, Error)> {
        let UserMr { mr, addr, pages } = self;
        mr.deregister()
            .map_err(|(mr, e)| (UserMr { mr, addr, pages }, e))
    }
}

impl ProtectionDomain {
    /// Register Memory Region (Verbs section 7.2.3) over `len` octets of this process's
    /// memory at `addr`, VA-based: the region's first octet has tagged offset `iova` (for
    /// `ibv_reg_mr`, `addr` itself). The pages holding it are adopted (module documentation).
    ///
    /// # Safety
    /// `addr..addr + len` must be mapped, readable and writable memory of this process, and
    /// no other thread may write to its pages while this call runs.
    pub unsafe fn reg_user_mr(
        &self,
        addr: *mut u8,
        len: usize,
        iova: u64,
        access: u32,
    ) -> Result<UserMr, Error> {
        let a = addr as usize;
        if len == 0 || addr.is_null() {
            return Err(invalid(a, len));
        }
        let start = a & !(PAGE - 1);
        let end = a
            .checked_add(len)
            .ok_or_else(|| invalid(a, len))?
            .next_multiple_of(PAGE);
        let ctx = self.context();
        // The session: its control connection, shared by every clone of the context.
        let owner = Arc::as_ptr(ctx.link()) as usize;
        let (arena, segment, offset) = {
            let mut all = lock_arenas();
            let arena = arena_for(&mut all, owner, start, end)?;
            let mut ar = lock_arena(&arena);
            // SAFETY: the caller's range, rounded out to whole pages of the same mappings.
            unsafe { ar.take(start, end) }?;
            let at = ctx.attach_segment(&ar.seg);
            let offset = (a - ar.base) as u64;
            drop(ar);
            (arena, at, offset)
        };
        let pages = Pages { arena, start, end };
        let segment = segment?;
        let stag = match lock(ctx.link()).call(&Request::RegMrVa {
            pd: self.pd(),
            access,
            segment,
            offset,
            len: len as u64,
            va: iova,
        })? {
            Reply::Id(s) => Stag(s),
            other => return Err(Error::Protocol(format!("Register MR answered {other:?}"))),
        };
        let mr = MemoryRegion::from_registration(stag, iova, len as u64)
            .with_release(Release::new(ctx.link(), Request::DeregMr { stag }));
        Ok(UserMr {
            mr,
            addr: a as u64,
            pages,
        })
    }
}
