//! Named shared-memory segments: hugepage-backed when possible, ordinary shared memory
//! otherwise, mapped `MAP_SHARED` by every process that opens the same path or receives the
//! same file descriptor.
//!
//! Backing, in order of preference under [`HugePolicy::Auto`]:
//! 1. a file on a mounted hugetlbfs (found in `/proc/mounts`, e.g. `/dev/hugepages`, which
//!    `deploy/` and `.ci/run` set up) when `/sys/kernel/mm/hugepages/hugepages-2048kB`
//!    reports enough free pages: other processes open it by name, which `hugepage-rs` cannot
//!    offer;
//! 2. a file in `/dev/shm`; the first such fallback in a process logs one warning saying why.
//!
//! Anonymous segments ([`Segment::create_anonymous`]) use `memfd_create` (with
//! `MFD_HUGETLB` when pages are free) and travel only as file descriptors
//! ([`crate::fdpass`]).
//!
//! Sealed segments ([`Segment::create_sealed`]) are what an application gives the daemon to
//! map: a memfd whose pages are allocated up front and whose size is sealed
//! (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`, memfd_create(2)), named to other processes
//! by `/proc/<pid>/fd/<fd>`. A file another process can truncate would make every access of
//! the mapping past the new end a SIGBUS in the daemon; [`Segment::open_sealed`] maps only
//! files that carry the shrink seal, so nothing the application does afterwards can take the
//! mapped pages away. The memory goes back to the system when the creator and every mapper
//! have let go, so a crashed application leaves no file behind.
//! [`Segment::create_sealed_sparse`] seals the size the same way but allocates only the
//! pages its creator asks for ([`Segment::allocate`]) before handing them over: the seals
//! are about the file's size, and a hole inside it reads as zeros rather than faulting, so
//! an arena as long as an address-space window costs only the pages in use.
//!
//! Every segment starts with a [`SegmentHeader`] (magic, ABI version, kind, size, creator
//! pid); the user's data starts at [`DATA_OFFSET`], page-aligned. A named segment is created
//! under a temporary name and renamed into place once its header is written, so an opener
//! never sees a half-initialised header. The creator removes the file when it drops the
//! segment unless told otherwise ([`Segment::set_remove_on_drop`]).

use crate::error::Error;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

/// The size of a hugepage this module uses (the x86-64 and arm64 default).
pub const HUGEPAGE: usize = 2 << 20;
/// The size of an ordinary page.
pub const PAGE: usize = 4096;
/// Where the user's data starts in every segment (after the header, page-aligned).
pub const DATA_OFFSET: usize = PAGE;
/// "iwarpseg", little-endian.
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"iwarpseg");
/// Where segments live when no hugepages are used.
pub const SHM_DIR: &str = "/dev/shm";
/// Sealed segments are named by their creator's descriptor under this directory.
const PROC_DIR: &str = "/proc";
/// The seals of a segment made by [`Segment::create_sealed`]: its size can neither shrink
/// nor grow, and no seal can be added or removed.
pub const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

static WARNED: AtomicBool = AtomicBool::new(false);

/// How much of a sealed segment has memory behind it from its creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Allocation {
    /// Every page.
    Whole,
    /// The header page only ([`Segment::create_sealed_sparse`]).
    Sparse,
}

/// Whether to use hugepages (the `shm.hugepages` configuration key).
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

/// What a segment holds. Values are ABI.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// iwarpd's segment: command ring, upcall ring, heartbeat ([`crate::daemon_shm`]).
    Daemon = 1,
    /// A ring of [`crate::wqe::SendWqe`].
    SendQueue = 2,
    /// A ring of [`crate::wqe::RecvWqe`] (RQ).
    RecvQueue = 3,
    /// A ring of [`crate::wqe::RecvWqe`] shared by QPs (S-RQ).
    SharedRecvQueue = 4,
    /// A ring of [`crate::wqe::Cqe`].
    CompletionQueue = 5,
    /// Application memory for registration.
    Memory = 6,
    /// A ring of [`crate::wqe::AsyncEvent`].
    Events = 7,
    /// Anything else (tests, tools).
    Other = 8,
    /// The word that says whether the daemon sleeps ([`crate::wake`]).
    Wake = 9,
    /// An application's queue of rung rings ([`crate::doorbell`]).
    Doorbell = 10,
}

impl TryFrom<u32> for SegmentKind {
    type Error = Error;
    fn try_from(v: u32) -> Result<SegmentKind, Error> {
        use SegmentKind::*;
        [
            Daemon,
            SendQueue,
            RecvQueue,
            SharedRecvQueue,
            CompletionQueue,
            Memory,
            Events,
            Other,
            Wake,
            Doorbell,
        ]
        .into_iter()
        .find(|k| *k as u32 == v)
        .ok_or(Error::Kind {
            found: v,
            expected: 0,
        })
    }
}

/// The first 64 octets of every segment.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub magic: u64,
    pub abi_version: u32,
    /// A [`SegmentKind`] value.
    pub kind: u32,
    /// Octets of the whole mapping, header included.
    pub size: u64,
    pub creator_pid: u32,
    pub _pad: u32,
    pub data_offset: u64,
    pub _reserved: [u64; 3],
}
const _: () = assert!(core::mem::size_of::<SegmentHeader>() == 64);

/// A mapped segment.
#[derive(Debug)]
pub struct Segment {
    ptr: NonNull<u8>,
    len: usize,
    /// `None` once given up ([`Segment::take_fd`]): the mapping does not need it.
    fd: Option<OwnedFd>,
    /// (device, inode) of the backing file, read when it was mapped.
    file_id: (u64, u64),
    /// None for anonymous (memfd) segments; `/proc/<pid>/fd/<fd>` for sealed ones.
    path: Option<PathBuf>,
    /// Whether `path` is a file of its own (removable), not a name of an open descriptor.
    named: bool,
    remove_on_drop: bool,
    backing: Backing,
    kind: SegmentKind,
}

// SAFETY: a Segment is an address range of a MAP_SHARED mapping that lives until drop plus an
// fd; the data in it is shared with other processes anyway and accessed through the ring
// protocol or by copies, so moving or sharing the handle between threads adds nothing.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` hands out only the base pointer and metadata.
unsafe impl Sync for Segment {}

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

fn warn_fallback(why: &str) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "no usable hugepages ({why}; free 2 MiB pages: {}): shared memory falls back to \
             ordinary pages in {SHM_DIR} (more TLB misses); see deploy/ for hugepage set-up",
            free_hugepages()
        );
    }
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.contains('/') || name.contains('\0') || name.len() > 64 {
        return Err(Error::InvalidName);
    }
    Ok(())
}

fn cpath(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::InvalidName)
}

/// Maps `len` octets of `fd` shared, read-write.
fn map_fd(fd: BorrowedFd<'_>, len: usize) -> Result<NonNull<u8>, Error> {
    // SAFETY: mmap of an open fd; the result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error().into());
    }
    NonNull::new(p as *mut u8).ok_or_else(|| io::Error::other("mmap returned null").into())
}

fn truncate(fd: BorrowedFd<'_>, len: usize) -> Result<(), Error> {
    // SAFETY: ftruncate on an open fd, result checked.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error().into());
    }
    Ok(())
}

/// Allocates every page of `len` octets at `offset` now, so that a full tmpfs or an empty
/// hugepage pool is an error here rather than a SIGBUS at the first touch of a page.
fn allocate(fd: BorrowedFd<'_>, offset: usize, len: usize) -> Result<(), Error> {
    // SAFETY: fallocate on an open fd, result checked.
    if unsafe { libc::fallocate(fd.as_raw_fd(), 0, offset as libc::off_t, len as libc::off_t) } != 0
    {
        return Err(io::Error::last_os_error().into());
    }
    Ok(())
}

/// The seals of `fd` (0 for a file that cannot carry seals).
pub fn seals(fd: BorrowedFd<'_>) -> Result<libc::c_int, Error> {
    // SAFETY: F_GET_SEALS on an open fd takes no argument; result checked.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if r >= 0 {
        return Ok(r);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) {
        return Ok(0);
    }
    Err(e.into())
}

fn add_seals(fd: BorrowedFd<'_>, seals: libc::c_int) -> Result<(), Error> {
    // SAFETY: F_ADD_SEALS on an open fd with an int argument; result checked.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error().into());
    }
    Ok(())
}

/// Opens `path` read-write only if it is a regular file: opening is done on an `O_PATH`
/// descriptor first, so a path that names a device or a FIFO is refused without the side
/// effects an open of those can have.
fn open_regular(path: &Path) -> Result<OwnedFd, Error> {
    let c = cpath(path)?;
    // SAFETY: `c` is a valid C string; the fd is checked and then owned.
    let raw = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error().into());
    }
    // SAFETY: fresh descriptor we own.
    let probe = unsafe { OwnedFd::from_raw_fd(raw) };
    if fstat(probe.as_fd())?.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Error::NotSealed);
    }
    // Reopening through /proc/self/fd opens exactly the file probed, whatever `path` names
    // by now.
    open_file(
        Path::new(&format!("/proc/self/fd/{}", probe.as_raw_fd())),
        false,
    )
}

fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat, Error> {
    // SAFETY: `st` is written by fstat before being read; result checked.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(st)
    }
}

fn id_of(st: &libc::stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

fn open_file(path: &Path, create: bool) -> Result<OwnedFd, Error> {
    let c = cpath(path)?;
    let flags = libc::O_RDWR
        | libc::O_CLOEXEC
        | if create {
            libc::O_CREAT | libc::O_EXCL
        } else {
            0
        };
    // SAFETY: `c` is a valid C string; the fd is checked and then owned.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600) };
    if fd < 0 {
        return Err(io::Error::last_os_error().into());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sizes: (total mapping, backing) for `data_len` user octets.
fn sizes(data_len: usize, huge: bool) -> usize {
    let unit = if huge { HUGEPAGE } else { PAGE };
    (DATA_OFFSET + data_len).div_ceil(unit).max(1) * unit
}

impl Segment {
    /// Creates segment `name` (a plain file name) with room for at least `data_len` octets of
    /// data, in the hugetlbfs mount or [`SHM_DIR`] as `policy` allows. Returns the mapped,
    /// header-initialised segment, which removes its file on drop.
    pub fn create(
        name: &str,
        kind: SegmentKind,
        data_len: usize,
        policy: HugePolicy,
    ) -> Result<Segment, Error> {
        check_name(name)?;
        // One name, one segment, whichever backing holds it: openers search both places.
        if let Some(p) = Self::find(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("segment {} exists", p.display()),
            )
            .into());
        }
        Self::huge_or_small(
            policy,
            data_len,
            |need| match hugetlbfs_mount() {
                Some(dir) if free_hugepages() >= need => Ok(dir),
                Some(_) => Err("too few free pages"),
                None => Err("no hugetlbfs mounted"),
            },
            "hugetlbfs",
            |dir| match dir {
                Some(dir) => Self::create_at(&dir, name, kind, data_len, true),
                None => Self::create_at(Path::new(SHM_DIR), name, kind, data_len, false),
            },
        )
    }

    /// Creates segment `name` in directory `dir` (ordinary pages unless `dir` is a hugetlbfs
    /// mount, which the caller then says with `huge`).
    pub fn create_at(
        dir: &Path,
        name: &str,
        kind: SegmentKind,
        data_len: usize,
        huge: bool,
    ) -> Result<Segment, Error> {
        check_name(name)?;
        let len = sizes(data_len, huge);
        let path = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let fd = open_file(&tmp, true)?;
        let made = (|| {
            truncate(fd.as_fd(), len)?;
            let file_id = id_of(&fstat(fd.as_fd())?);
            let ptr = map_fd(fd.as_fd(), len)?;
            let seg = Segment {
                ptr,
                len,
                fd: Some(fd),
                file_id,
                path: Some(path.clone()),
                named: true,
                remove_on_drop: false,
                backing: if huge {
                    Backing::HugePages
                } else {
                    Backing::Shm
                },
                kind,
            };
            seg.write_header();
            // Publish under the real name only now; O_EXCL semantics via link(2), which fails
            // if the name exists, unlike rename(2).
            std::fs::hard_link(&tmp, &path)?;
            Ok::<Segment, Error>(seg)
        })();
        let _ = std::fs::remove_file(&tmp);
        let mut seg = made?;
        seg.remove_on_drop = true;
        Ok(seg)
    }

    /// Creates an anonymous segment (`memfd_create`), to be passed by file descriptor.
    pub fn create_anonymous(
        name: &str,
        kind: SegmentKind,
        data_len: usize,
        policy: HugePolicy,
    ) -> Result<Segment, Error> {
        check_name(name)?;
        let c = CString::new(name).map_err(|_| Error::InvalidName)?;
        Self::huge_or_small(
            policy,
            data_len,
            Self::hugetlb_memfd_room,
            "hugetlb memfd",
            |h| Self::memfd(&c, kind, data_len, h.is_some(), None),
        )
    }

    /// Creates a sealed segment (see the module docs) with room for at least `data_len`
    /// octets: hugepages as `policy` allows, every page allocated before this returns. Its
    /// [`Segment::path`] is `/proc/<pid>/fd/<fd>`, valid while this handle lives.
    pub fn create_sealed(
        name: &str,
        kind: SegmentKind,
        data_len: usize,
        policy: HugePolicy,
    ) -> Result<Segment, Error> {
        check_name(name)?;
        let c = CString::new(name).map_err(|_| Error::InvalidName)?;
        let seal = Some(Allocation::Whole);
        Self::huge_or_small(
            policy,
            data_len,
            Self::hugetlb_memfd_room,
            "sealed hugetlb memfd",
            |h| Self::memfd(&c, kind, data_len, h.is_some(), seal),
        )
    }

    /// Creates a sealed segment of ordinary pages, as [`Segment::create_sealed`], of which
    /// only the header page is allocated: the creator backs each range with
    /// [`Segment::allocate`] before another process may touch it. Its size is sealed all
    /// the same, so no mapper can be cut short; the holes cost no memory.
    pub fn create_sealed_sparse(
        name: &str,
        kind: SegmentKind,
        data_len: usize,
    ) -> Result<Segment, Error> {
        check_name(name)?;
        let c = CString::new(name).map_err(|_| Error::InvalidName)?;
        Self::memfd(&c, kind, data_len, false, Some(Allocation::Sparse))
    }

    /// Allocates the pages of `len` octets at `offset` of the data area now: no memory for
    /// them (a full tmpfs, a memory cgroup at its limit) is this error, not a SIGBUS in
    /// whichever process touches them first.
    pub fn allocate(&self, offset: usize, len: usize) -> Result<(), Error> {
        let end = offset.checked_add(len).filter(|e| *e <= self.data_len());
        if end.is_none() {
            return Err(Error::Layout);
        }
        let fd = self.fd.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "allocating in a segment whose descriptor was given up",
            )
        })?;
        allocate(fd.as_fd(), DATA_OFFSET + offset, len).map_err(|e| match e {
            Error::Io(io) => Error::Io(io::Error::new(
                io.kind(),
                format!("allocating {len} octets of shared memory: {io}"),
            )),
            e => e,
        })
    }

    /// The hugepage-or-fallback choice of every creator: `make(Some(place))` when `policy`
    /// allows hugepages and `room` (given the number of hugepages needed) finds a place for
    /// them, else `make(None)` (ordinary pages), also after `make(Some)` fails under
    /// [`HugePolicy::Auto`]. The first fallback in a process logs why.
    fn huge_or_small<P>(
        policy: HugePolicy,
        data_len: usize,
        room: impl FnOnce(usize) -> Result<P, &'static str>,
        what: &str,
        make: impl Fn(Option<P>) -> Result<Segment, Error>,
    ) -> Result<Segment, Error> {
        if policy == HugePolicy::Off {
            return make(None);
        }
        match room(sizes(data_len, true) / HUGEPAGE) {
            Ok(place) => match make(Some(place)) {
                Ok(s) => return Ok(s),
                Err(e) if policy == HugePolicy::Required => return Err(e),
                Err(e) => warn_fallback(&format!("{what}: {e}")),
            },
            Err(_) if policy == HugePolicy::Required => return Err(Self::unavailable(data_len)),
            Err(why) => warn_fallback(why),
        }
        make(None)
    }

    /// Whether `need` free hugepages exist for a hugetlb memfd (which needs no mount).
    fn hugetlb_memfd_room(need: usize) -> Result<(), &'static str> {
        if free_hugepages() >= need {
            Ok(())
        } else {
            Err("too few free hugepages")
        }
    }

    /// A memfd segment of `data_len` octets; `seal` None leaves it unsealed, unnamed and
    /// sparse, Some seals its size and names it by `/proc/<pid>/fd/<fd>`.
    fn memfd(
        name: &CString,
        kind: SegmentKind,
        data_len: usize,
        huge: bool,
        seal: Option<Allocation>,
    ) -> Result<Segment, Error> {
        let flags = libc::MFD_CLOEXEC
            | if seal.is_some() {
                libc::MFD_ALLOW_SEALING
            } else {
                0
            }
            | if huge { libc::MFD_HUGETLB } else { 0 };
        // SAFETY: valid C string; fd checked and then owned.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        if raw < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = sizes(data_len, huge);
        truncate(fd.as_fd(), len)?;
        match seal {
            Some(Allocation::Whole) => allocate(fd.as_fd(), 0, len)?,
            // The header, written below.
            Some(Allocation::Sparse) => allocate(fd.as_fd(), 0, DATA_OFFSET)?,
            None => {}
        }
        if seal.is_some() {
            add_seals(fd.as_fd(), SEALS)?;
        }
        let file_id = id_of(&fstat(fd.as_fd())?);
        let ptr = map_fd(fd.as_fd(), len)?;
        let path = seal.map(|_| {
            PathBuf::from(format!(
                "{PROC_DIR}/{}/fd/{}",
                std::process::id(),
                fd.as_raw_fd()
            ))
        });
        let seg = Segment {
            ptr,
            len,
            fd: Some(fd),
            file_id,
            path,
            named: false,
            remove_on_drop: false,
            backing: if huge {
                Backing::HugePages
            } else {
                Backing::Shm
            },
            kind,
        };
        seg.write_header();
        Ok(seg)
    }

    /// Maps a segment another process created, as [`Segment::open`] does, but only if its
    /// size is sealed against shrinking ([`Error::NotSealed`] otherwise, also for anything
    /// that is not a regular file): what a process maps of memory another controls.
    pub fn open_sealed(path: &Path, kind: Option<SegmentKind>) -> Result<Segment, Error> {
        let fd = open_regular(path)?;
        // Seals only ever grow, so the size read after this check cannot shrink later.
        if seals(fd.as_fd())? & libc::F_SEAL_SHRINK == 0 {
            return Err(Error::NotSealed);
        }
        let mut seg = Self::from_fd(fd, kind)?;
        seg.path = Some(path.to_path_buf());
        Ok(seg)
    }

    fn unavailable(data_len: usize) -> Error {
        Error::HugepagesUnavailable {
            mounted: hugetlbfs_mount().is_some(),
            free_pages: free_hugepages(),
            needed_pages: sizes(data_len, true) / HUGEPAGE,
        }
    }

    /// Where a named segment lives if it exists: the hugetlbfs mount, then [`SHM_DIR`].
    pub fn find(name: &str) -> Option<PathBuf> {
        check_name(name).ok()?;
        hugetlbfs_mount()
            .into_iter()
            .chain([PathBuf::from(SHM_DIR)])
            .map(|d| d.join(name))
            .find(|p| p.exists())
    }

    /// Frees `name` for a new segment of a process that must be the only one to hold it (a
    /// daemon's): a segment of that name whose creator has died is removed, and its path and
    /// the dead pid are returned (for a warning); one whose creator still runs is refused.
    pub fn reclaim(name: &str) -> Result<Option<(PathBuf, u32)>, Error> {
        let Some(old) = Self::find(name) else {
            return Ok(None);
        };
        let pid = Self::open(&old, None).map_or(0, |s| s.header().creator_pid);
        if crate::process::runs(pid) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("segment {} belongs to running pid {pid}", old.display()),
            )
            .into());
        }
        let _ = std::fs::remove_file(&old);
        Ok(Some((old, pid)))
    }

    /// Maps an existing segment by path (another process created it), checking its header.
    /// `kind` None accepts any kind.
    pub fn open(path: &Path, kind: Option<SegmentKind>) -> Result<Segment, Error> {
        let fd = open_file(path, false)?;
        let mut seg = Self::from_fd(fd, kind)?;
        seg.path = Some(path.to_path_buf());
        seg.named = !path.starts_with(PROC_DIR);
        if hugetlbfs_mount().is_some_and(|m| path.starts_with(m)) {
            seg.backing = Backing::HugePages;
        }
        Ok(seg)
    }

    /// Maps a segment received as a file descriptor (e.g. over [`crate::fdpass`]), checking
    /// its header. The result does not remove anything on drop.
    pub fn from_fd(fd: OwnedFd, kind: Option<SegmentKind>) -> Result<Segment, Error> {
        let st = fstat(fd.as_fd())?;
        let len = st.st_size as usize;
        if len < DATA_OFFSET {
            return Err(Error::Layout);
        }
        let ptr = map_fd(fd.as_fd(), len)?;
        // From here `seg` owns the mapping and unmaps it on every error path.
        let mut seg = Segment {
            ptr,
            len,
            fd: Some(fd),
            file_id: id_of(&st),
            path: None,
            named: false,
            remove_on_drop: false,
            backing: Backing::Shm,
            kind: SegmentKind::Other,
        };
        // hugetlbfs reports its magic in statfs; the block size also tells.
        if st.st_blksize as usize >= HUGEPAGE {
            seg.backing = Backing::HugePages;
        }
        let h = seg.header();
        if h.magic != SEGMENT_MAGIC {
            return Err(Error::BadMagic);
        }
        if h.abi_version != crate::ABI_VERSION {
            return Err(Error::Version {
                found: h.abi_version,
                expected: crate::ABI_VERSION,
            });
        }
        if h.size as usize != len || h.data_offset as usize != DATA_OFFSET {
            return Err(Error::Layout);
        }
        seg.kind = SegmentKind::try_from(h.kind)?;
        if let Some(k) = kind {
            if k != seg.kind {
                return Err(Error::Kind {
                    found: h.kind,
                    expected: k as u32,
                });
            }
        }
        Ok(seg)
    }

    fn write_header(&self) {
        let h = SegmentHeader {
            magic: SEGMENT_MAGIC,
            abi_version: crate::ABI_VERSION,
            kind: self.kind as u32,
            size: self.len as u64,
            creator_pid: std::process::id(),
            _pad: 0,
            data_offset: DATA_OFFSET as u64,
            _reserved: [0; 3],
        };
        // SAFETY: the mapping is at least one page, page-aligned, and ours to write.
        unsafe { core::ptr::write_volatile(self.ptr.as_ptr() as *mut SegmentHeader, h) };
    }

    /// A copy of the header.
    pub fn header(&self) -> SegmentHeader {
        // SAFETY: the mapping is at least DATA_OFFSET long and page-aligned; any bit pattern
        // is a valid SegmentHeader (integers only).
        unsafe { core::ptr::read_volatile(self.ptr.as_ptr() as *const SegmentHeader) }
    }

    /// The start of the data area (page-aligned).
    pub fn data(&self) -> NonNull<u8> {
        // SAFETY: len >= DATA_OFFSET (checked at creation and open).
        unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(DATA_OFFSET)) }
    }
    /// Octets in the data area.
    pub fn data_len(&self) -> usize {
        self.len - DATA_OFFSET
    }
    /// Octets of the whole mapping, header included.
    pub fn mapped_len(&self) -> usize {
        self.len
    }
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    pub fn backing(&self) -> Backing {
        self.backing
    }
    pub fn kind(&self) -> SegmentKind {
        self.kind
    }
    /// (device, inode) of the backing file, read when it was mapped: two handles name the
    /// same memory iff equal (how control checks that an fd an application sent is the
    /// segment it names).
    pub fn file_id(&self) -> (u64, u64) {
        self.file_id
    }
    /// This handle's descriptor, while it has one.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }
    /// Gives up this handle's descriptor to the caller: the mapping stays valid without it
    /// (mmap(2)), so a process holding many segments need not hold a descriptor for each.
    /// A sealed segment's [`Segment::path`] (`/proc/<pid>/fd/<fd>`) names it only while the
    /// returned descriptor is open: close it once every other process has mapped the
    /// segment. [`Segment::allocate`] needs the descriptor and fails without it.
    pub fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fd.take()
    }
    /// Whether dropping this handle removes the file (default: true for the creator).
    pub fn set_remove_on_drop(&mut self, remove: bool) {
        self.remove_on_drop = remove && self.named;
    }
    /// Copies `src` into the data area at `offset`; false if it does not fit.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> bool {
        if offset
            .checked_add(src.len())
            .is_none_or(|e| e > self.data_len())
        {
            return false;
        }
        // SAFETY: bounds checked; the region is mapped read-write. Concurrent writers in other
        // processes are a protocol matter (the data is plain octets).
        unsafe {
            core::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.data().as_ptr().add(offset),
                src.len(),
            )
        };
        true
    }
    /// Copies from the data area at `offset` into `dst`; false if out of bounds.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool {
        if offset
            .checked_add(dst.len())
            .is_none_or(|e| e > self.data_len())
        {
            return false;
        }
        // SAFETY: as in `write_at`.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.data().as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        true
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: ptr/len are the mapping made at construction, unmapped once here.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
        if self.remove_on_drop {
            if let Some(p) = &self.path {
                if let Err(e) = std::fs::remove_file(p) {
                    tracing::warn!("removing segment {}: {e}", p.display());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(tag: &str) -> String {
        format!("iwarp-test-{tag}-{}", std::process::id())
    }

    #[test]
    fn create_open_share_and_remove() {
        let s = Segment::create(&name("a"), SegmentKind::Memory, 100, HugePolicy::Auto).unwrap();
        assert!(s.data_len() >= 100);
        assert_eq!(s.data().as_ptr() as usize % PAGE, 0);
        let h = s.header();
        assert_eq!(
            (h.magic, h.kind, h.creator_pid),
            (
                SEGMENT_MAGIC,
                SegmentKind::Memory as u32,
                std::process::id()
            )
        );
        let path = s.path().unwrap().to_path_buf();
        assert_eq!(Segment::find(&name("a")).as_deref(), Some(path.as_path()));
        let o = Segment::open(&path, Some(SegmentKind::Memory)).unwrap();
        assert!(s.write_at(10, b"shared"));
        let mut b = [0; 6];
        assert!(o.read_at(10, &mut b));
        assert_eq!(&b, b"shared");
        assert!(!o.read_at(o.data_len() - 2, &mut b), "bounds are checked");
        assert_eq!(s.file_id(), o.file_id());
        assert!(matches!(
            Segment::open(&path, Some(SegmentKind::CompletionQueue)),
            Err(Error::Kind { .. })
        ));
        assert!(matches!(
            Segment::create(&name("a"), SegmentKind::Memory, 1, HugePolicy::Auto),
            Err(Error::Io(_))
        ));
        drop(o);
        assert!(path.exists(), "an opener does not remove");
        drop(s);
        assert!(!path.exists(), "the creator removes");
    }

    #[test]
    fn a_living_creators_name_is_not_reclaimed() {
        let n = name("reclaim");
        assert!(
            Segment::reclaim(&n).unwrap().is_none(),
            "nothing to reclaim"
        );
        let s = Segment::create(&n, SegmentKind::Other, 64, HugePolicy::Off).unwrap();
        let e = Segment::reclaim(&n).expect_err("this process still runs");
        assert!(e.to_string().contains("belongs to running pid"), "{e}");
        assert!(s.path().unwrap().exists(), "the living segment was kept");
    }

    #[test]
    fn keep_on_drop_and_bad_files() {
        let mut s = Segment::create(&name("k"), SegmentKind::Other, 1, HugePolicy::Off).unwrap();
        assert_eq!(s.backing(), Backing::Shm);
        assert_eq!(s.mapped_len(), 2 * PAGE);
        s.set_remove_on_drop(false);
        let path = s.path().unwrap().to_path_buf();
        drop(s);
        assert!(path.exists());
        std::fs::write(&path, vec![0u8; 2 * PAGE]).unwrap();
        assert!(matches!(Segment::open(&path, None), Err(Error::BadMagic)));
        std::fs::write(&path, b"short").unwrap();
        assert!(matches!(Segment::open(&path, None), Err(Error::Layout)));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            Segment::create("a/b", SegmentKind::Other, 1, HugePolicy::Off),
            Err(Error::InvalidName)
        ));
    }

    #[test]
    fn anonymous_segments_map_by_fd() {
        let s =
            Segment::create_anonymous("anon", SegmentKind::Memory, 5000, HugePolicy::Auto).unwrap();
        assert!(s.path().is_none());
        let fd = s.fd().unwrap().try_clone_to_owned().unwrap();
        let o = Segment::from_fd(fd, Some(SegmentKind::Memory)).unwrap();
        assert!(o.write_at(4999, b"z"));
        let mut b = [0];
        assert!(s.read_at(4999, &mut b));
        assert_eq!(b, *b"z");
    }

    #[test]
    fn a_sealed_segment_cannot_change_size_and_only_sealed_files_open_sealed() {
        let s = Segment::create_sealed(
            "iwarp-test-sealed",
            SegmentKind::Memory,
            5000,
            HugePolicy::Auto,
        )
        .unwrap();
        let path = s.path().unwrap().to_path_buf();
        assert!(path.starts_with(format!("/proc/{}/fd", std::process::id())));
        assert_eq!(seals(s.fd().unwrap()).unwrap(), SEALS);
        // Neither through the creator's descriptor nor through the name can anyone shrink it.
        let e = truncate(s.fd().unwrap(), 0).unwrap_err();
        assert!(
            matches!(&e, Error::Io(e) if e.raw_os_error() == Some(libc::EPERM)),
            "{e}"
        );
        let by_name = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(by_name.set_len(0).is_err());
        assert_eq!(by_name.metadata().unwrap().len() as usize, s.mapped_len());
        let o = Segment::open_sealed(&path, Some(SegmentKind::Memory)).unwrap();
        assert!(o.write_at(4999, b"y"));
        let mut b = [0];
        assert!(s.read_at(4999, &mut b));
        assert_eq!(b, *b"y");
        drop(o);
        let mut o = Segment::open_sealed(&path, None).unwrap();
        o.set_remove_on_drop(true);
        drop(o);
        assert!(path.exists(), "a descriptor's name is never removed");

        // An ordinary segment file can be truncated under a mapping: refused.
        let n =
            Segment::create(&name("unsealed"), SegmentKind::Memory, 64, HugePolicy::Off).unwrap();
        assert!(matches!(
            Segment::open_sealed(n.path().unwrap(), None),
            Err(Error::NotSealed)
        ));
        // So is anything that is not a regular file, without opening it for real.
        assert!(matches!(
            Segment::open_sealed(Path::new("/dev/null"), None),
            Err(Error::NotSealed)
        ));
    }

    #[test]
    fn a_segment_without_its_descriptor_stays_mapped_and_sealed() {
        let mut s = Segment::create_sealed(
            "iwarp-test-nofd",
            SegmentKind::Memory,
            5000,
            HugePolicy::Off,
        )
        .unwrap();
        let path = s.path().unwrap().to_path_buf();
        let mut o = Segment::open_sealed(&path, Some(SegmentKind::Memory)).unwrap();
        let id = s.file_id();
        let (raw, name) = (s.fd().unwrap().as_raw_fd(), s.take_fd().unwrap());
        drop(o.take_fd());
        assert!(s.fd().is_none() && o.fd().is_none());
        assert_eq!((s.file_id(), o.file_id()), (id, id));
        // The name holds while the caller keeps the descriptor, and no longer.
        assert!(Segment::open_sealed(&path, None).is_ok());
        let seals_of_name = seals(name.as_fd()).unwrap();
        assert_eq!(
            seals_of_name, SEALS,
            "the sealing outlives the creator's handle"
        );
        drop(name);
        assert!(
            std::fs::metadata(format!("/proc/self/fd/{raw}")).is_err()
                || Segment::open_sealed(&path, None).map_or(true, |r| r.file_id() != id),
            "the descriptor was closed"
        );
        // Both mappings still reach the same pages.
        assert!(o.write_at(4999, b"m"));
        let mut b = [0];
        assert!(s.read_at(4999, &mut b));
        assert_eq!(b, *b"m");
        assert!(matches!(s.allocate(0, PAGE), Err(Error::Io(_))));
    }

    #[test]
    fn a_sparse_sealed_segment_has_memory_only_where_allocated() {
        use std::os::unix::fs::MetadataExt;
        let s = Segment::create_sealed_sparse("iwarp-test-sparse", SegmentKind::Memory, 16 << 20)
            .unwrap();
        assert_eq!(seals(s.fd().unwrap()).unwrap(), SEALS);
        let blocks = || std::fs::metadata(s.path().unwrap()).unwrap().blocks() * 512;
        assert_eq!(blocks(), DATA_OFFSET as u64, "the header only");
        s.allocate(8 << 20, 3 * PAGE).unwrap();
        assert_eq!(blocks(), (DATA_OFFSET + 3 * PAGE) as u64);
        assert!(matches!(
            s.allocate(s.data_len() - PAGE, 2 * PAGE),
            Err(Error::Layout)
        ));
        assert!(
            truncate(s.fd().unwrap(), PAGE).is_err(),
            "sealed against shrinking"
        );
    }

    #[test]
    fn hugepages_required_says_why() {
        let n = name("h");
        if hugetlbfs_mount().is_some() && free_hugepages() >= 1 {
            if let Ok(s) = Segment::create(&n, SegmentKind::Other, 1 << 20, HugePolicy::Required) {
                assert_eq!(s.backing(), Backing::HugePages);
                assert_eq!(s.mapped_len() % HUGEPAGE, 0);
            }
        } else {
            let e =
                Segment::create(&n, SegmentKind::Other, 1 << 20, HugePolicy::Required).unwrap_err();
            assert!(e.to_string().contains("hugepages required"), "{e}");
            assert!(Segment::find(&n).is_none(), "nothing left behind");
        }
    }
}
