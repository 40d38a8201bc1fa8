//! Registering memory the application allocated itself (malloc, the stack, an mmap'd file):
//! the daemon is another process, so the pages are *adopted*. Their contents are copied into
//! a new shared segment, which is then mapped over them at the same address
//! (`MAP_FIXED | MAP_SHARED`), as FreeFlow did; the daemon maps the same segment, so it
//! places into and reads from the application's memory with no copy. The region is
//! VA-based: tagged offsets are the application's addresses.
//!
//! Pages are adopted whole, and a page is in at most one adopted span: a registration inside
//! a span already adopted reuses it, one that overlaps a span only in part is refused. When
//! the last region over a span is gone, the pages become private anonymous memory again
//! with the same contents. Limits (see `docs/dropin.md`): writes by other threads while
//! the pages are copied are lost; adopted pages are not inherited by a child after `fork`
//! (`MADV_DONTFORK`, as `ibv_fork_init` makes registered memory); a file mapping stops
//! writing through to its file while adopted and after; locked pages lose the lock; huge
//! pages are adopted as ordinary pages, and a hugetlbfs mapping is refused.

use crate::context::{segment_name, ProtectionDomain};
use crate::error::Error;
use crate::link::{lock, Release};
use crate::mr::MemoryRegion;
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind, PAGE};
use iwarp_control::app_proto::ClientReply;
use iwarp_control::app_server::Request;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Mutex, Weak};

/// Adopted spans by first page address.
static SPANS: Mutex<BTreeMap<usize, Weak<Span>>> = Mutex::new(BTreeMap::new());

/// Pages of the application, now a mapping of `seg`'s data.
#[derive(Debug)]
struct Span {
    start: usize,
    len: usize,
    seg: Segment,
}

fn io(what: &str) -> Error {
    Error::Io(std::io::Error::new(
        std::io::Error::last_os_error().kind(),
        format!("{what}: {}", std::io::Error::last_os_error()),
    ))
}

impl Span {
    /// Adopts the `len` octets of pages at `start`.
    ///
    /// # Safety
    /// The range must be mapped, readable and writable memory of this process.
    unsafe fn adopt(start: usize, len: usize) -> Result<Span, Error> {
        let seg = Segment::create(
            &segment_name("adopt"),
            SegmentKind::Memory,
            len,
            HugePolicy::Off,
        )?;
        let data_offset = seg.header().data_offset as libc::off_t;
        // SAFETY: the caller vouches for the source range; the segment's data area holds at
        // least `len` octets.
        unsafe { core::ptr::copy_nonoverlapping(start as *const u8, seg.data().as_ptr(), len) };
        // SAFETY: replaces the caller's pages by the segment's data, which now holds their
        // contents; the range stays mapped (never a hole) since MAP_FIXED replaces in one
        // step.
        let p = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                seg.as_fd().as_raw_fd(),
                data_offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io("mapping the adopted pages"));
        }
        // A child would share these pages with the daemon; rdma-core with ibv_fork_init
        // leaves registered memory out of the child, and so does this.
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTFORK) };
        Ok(Span { start, len, seg })
    }
}

impl Drop for Span {
    /// The pages become private anonymous memory again, with their current contents.
    fn drop(&mut self) {
        // Under the registry's lock, so no registration adopts these pages meanwhile (one
        // that finds this span dead waits for its entry to go).
        let mut spans = lock_spans();
        // Read before the pages are replaced: this Span itself may live in them (a heap
        // page), and reads as zeros until the contents are copied back.
        let (start, len, keep) = (self.start, self.len, self.seg.data().as_ptr());
        // SAFETY: the segment's own mapping of the same data outlives this function (it is
        // unmapped when `seg` drops, after), so the contents can be copied back from it once
        // the application's range is private again.
        unsafe {
            let p = libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            if p != libc::MAP_FAILED {
                core::ptr::copy_nonoverlapping(keep, start as *mut u8, len);
            }
        }
        spans.remove(&start);
    }
}

fn lock_spans() -> std::sync::MutexGuard<'static, BTreeMap<usize, Weak<Span>>> {
    SPANS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The adopted span holding `[start, start + len)`, adopting it if no span touches it.
///
/// # Safety
/// As [`Span::adopt`].
unsafe fn span_for(start: usize, len: usize) -> Result<Arc<Span>, Error> {
    let end = start + len;
    loop {
        let mut spans = lock_spans();
        let touching: Vec<Option<Arc<Span>>> = spans
            .range(..end)
            .map(|(at, w)| (*at, w.upgrade()))
            .filter(|(at, s)| match s {
                Some(s) => s.start + s.len > start,
                // A span being given back: its length is unknown here, so wait for it.
                None => *at < end,
            })
            .map(|(_, s)| s)
            .collect();
        let result = match touching.as_slice() {
            [] => {
                // SAFETY: the caller's range.
                Some(unsafe { Span::adopt(start, len) }.map(|s| {
                    let s = Arc::new(s);
                    spans.insert(start, Arc::downgrade(&s));
                    s
                }))
            }
            [Some(s)] if s.start <= start && s.start + s.len >= end => Some(Ok(s.clone())),
            t if t.iter().any(Option::is_none) => None,
            _ => Some(Err(Error::InvalidLength {
                offset: start as u64,
                len: len as u64,
                region_len: 0,
            })),
        };
        // Unlock before the temporary handles go: the last one would give its span back,
        // which takes the lock.
        drop(spans);
        drop(touching);
        match result {
            Some(r) => return r,
            None => std::thread::yield_now(),
        }
    }
}

/// A region over application memory (see the module documentation).
#[derive(Debug)]
pub struct UserMr {
    // Declared first: deregistered before the span may give the pages back.
    mr: MemoryRegion,
    addr: u64,
    _span: Arc<Span>,
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
        let UserMr { mr, addr, _span } = self;
        mr.deregister()
            .map_err(|(mr, e)| (UserMr { mr, addr, _span }, e))
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
        let invalid = || Error::InvalidLength {
            offset: a as u64,
            len: len as u64,
            region_len: 0,
        };
        if len == 0 || addr.is_null() {
            return Err(invalid());
        }
        let start = a & !(PAGE - 1);
        let end = a
            .checked_add(len)
            .ok_or_else(invalid)?
            .next_multiple_of(PAGE);
        // SAFETY: the caller's range, rounded out to whole pages of the same mappings.
        let span = unsafe { span_for(start, end - start) }?;
        let segment = self.context().attach_segment(&span.seg)?;
        let offset = (a - span.start) as u64;
        let ctx = self.context();
        let stag = match lock(ctx.link()).call(&Request::RegMrVa {
            pd: self.pd(),
            access,
            segment,
            offset,
            len: len as u64,
            va: iova,
        })? {
            ClientReply::Id(s) => s,
            other => return Err(Error::Protocol(format!("Register MR answered {other:?}"))),
        };
        let mr = MemoryRegion::from_registration(stag, iova, len as u64)
            .with_release(Release::new(ctx.link(), Request::DeregMr { stag }));
        Ok(UserMr {
            mr,
            addr: a as u64,
            _span: span,
        })
    }
}
