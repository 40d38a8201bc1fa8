//! Named shared-memory segments: hugepage-backed when possible, ordinary shared memory
//! otherwise, mapped `MAP_SHARED` by every process that opens the same path.
//!
//! Hugepages come from a mounted hugetlbfs (e.g. `/dev/hugepages`, which `deploy/` and
//! `.ci/run` set up) when it has enough free 2 MiB pages; a file there is a hugepage mapping
//! other processes can open by name, which `hugepage-rs` cannot give. Otherwise the segment
//! lives in `/dev/shm`, and the first such fallback logs one warning saying why.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

const HUGE: usize = 2 << 20;
static WARNED: AtomicBool = AtomicBool::new(false);

/// Whether to use hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePolicy {
    /// Hugepages when free ones exist, else ordinary shared memory (warned once).
    Auto,
    /// Hugepages or an error.
    Required,
    /// Never.
    Off,
}

/// What backs a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    HugePages,
    Shm,
}

/// A mapped segment. The creator removes the file when it drops the segment.
#[derive(Debug)]
pub struct Segment {
    ptr: NonNull<u8>,
    len: usize,
    path: PathBuf,
    owner: bool,
    backing: Backing,
}

// SAFETY: a Segment is an address range of a MAP_SHARED mapping that lives until drop; the
// data in it is shared with other processes anyway and accessed through the ring protocol.
unsafe impl Send for Segment {}

/// The hugetlbfs mount point, if any, from /proc/mounts.
pub fn hugetlbfs_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "hugetlbfs").then(|| PathBuf::from(dir))
    })
}

/// Free 2 MiB hugepages.
pub fn free_hugepages() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn map(path: &Path, len: usize, create: bool) -> io::Result<NonNull<u8>> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path has a NUL"))?;
    let flags = if create {
        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL
    } else {
        libc::O_RDWR
    };
    // SAFETY: `c` is a valid C string; the returned fd is checked and closed below.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o600) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let result = (|| {
        // SAFETY: `fd` is open; ftruncate and mmap report errors through their return values.
        unsafe {
            if create && libc::ftruncate(fd, len as libc::off_t) != 0 {
                return Err(io::Error::last_os_error());
            }
            let p = libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            NonNull::new(p as *mut u8).ok_or_else(|| io::Error::other("mmap returned null"))
        }
    })();
    // SAFETY: fd is ours; the mapping stays valid after close.
    unsafe { libc::close(fd) };
    result
}

impl Segment {
    /// Creates segment `name` of at least `len` octets (rounded up to the page size).
    pub fn create(name: &str, len: usize, policy: HugePolicy) -> io::Result<Segment> {
        if name.contains('/') || name.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "segment name must be a plain file name",
            ));
        }
        let huge_len = len.div_ceil(HUGE).max(1) * HUGE;
        let huge = match (policy, hugetlbfs_mount()) {
            (HugePolicy::Off, _) => None,
            (_, Some(dir)) if free_hugepages() >= huge_len / HUGE => Some(dir),
            (HugePolicy::Required, m) => {
                return Err(io::Error::other(format!(
                    "hugepages required but {} (free 2 MiB pages: {}, needed {})",
                    if m.is_some() {
                        "too few are free"
                    } else {
                        "no hugetlbfs is mounted"
                    },
                    free_hugepages(),
                    huge_len / HUGE
                )))
            }
            (HugePolicy::Auto, m) => {
                if !WARNED.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "no free hugepages ({}; free 2 MiB pages: {}): shared memory falls back to /dev/shm \
                         (ordinary pages, more TLB misses); see deploy/ for hugepage set-up",
                        if m.is_some() { "hugetlbfs mounted" } else { "no hugetlbfs mount" },
                        free_hugepages()
                    );
                }
                None
            }
        };
        if let Some(dir) = huge {
            let path = dir.join(name);
            if let Ok(ptr) = map(&path, huge_len, true) {
                return Ok(Segment {
                    ptr,
                    len: huge_len,
                    path,
                    owner: true,
                    backing: Backing::HugePages,
                });
            }
            let _ = std::fs::remove_file(&path);
            if policy == HugePolicy::Required {
                return Err(io::Error::other(format!(
                    "hugepage mapping in {} failed",
                    dir.display()
                )));
            }
            if !WARNED.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "cannot map hugepages in {}: shared memory falls back to /dev/shm",
                    dir.display()
                );
            }
        }
        let page = 4096;
        let len = len.div_ceil(page).max(1) * page;
        let path = Path::new("/dev/shm").join(name);
        let ptr = map(&path, len, true)?;
        Ok(Segment {
            ptr,
            len,
            path,
            owner: true,
            backing: Backing::Shm,
        })
    }

    /// Maps an existing segment by path (another process created it).
    pub fn open(path: &Path) -> io::Result<Segment> {
        let len = std::fs::metadata(path)?.len() as usize;
        let ptr = map(path, len, false)?;
        let backing = if hugetlbfs_mount().is_some_and(|m| path.starts_with(m)) {
            Backing::HugePages
        } else {
            Backing::Shm
        };
        Ok(Segment {
            ptr,
            len,
            path: path.to_path_buf(),
            owner: false,
            backing,
        })
    }

    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn backing(&self) -> Backing {
        self.backing
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: ptr/len are the mapping made in `map`, unmapped once here.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
        if self.owner {
            if let Err(e) = std::fs::remove_file(&self.path) {
                log::warn!("removing segment {}: {e}", self.path.display());
            }
        }
    }
}
