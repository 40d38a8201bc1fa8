//! The crate's one error type.

use core::fmt;
use std::io;

/// Why an operation on shared memory, a ring or a contract record failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed (open, mmap, ftruncate, sendmsg, ...).
    Io(io::Error),
    /// A name or path is not usable (empty, has `/` or NUL, longer than [`crate::command::SHM_PATH_LEN`]).
    InvalidName,
    /// `HugePolicy::Required` but no hugetlbfs mount with enough free pages; says what was found.
    HugepagesUnavailable {
        mounted: bool,
        free_pages: usize,
        needed_pages: usize,
    },
    /// The memory does not start with the expected magic number (not ours, or not initialised).
    BadMagic,
    /// Written by another ABI version.
    Version { found: u32, expected: u32 },
    /// A segment of another kind than expected (e.g. a CQ ring where an SQ ring was asked for).
    Kind { found: u32, expected: u32 },
    /// Sizes, capacities or alignment do not fit (capacity not a power of two, memory too
    /// small, header size disagrees with the file size).
    Layout,
    /// A ring's slot size differs from the type asked for.
    SlotSize { found: u64, expected: u64 },
    /// A contract record could not be decoded: unknown tag or an out-of-range field.
    Decode { tag: u32, what: &'static str },
    /// The peer of a Unix socket sent no file descriptor where one was expected.
    NoFd,
    /// Memory of another process whose size is not sealed (`F_SEAL_SHRINK`), or not a
    /// regular file at all: it could be truncated under a mapping.
    NotSealed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::InvalidName => {
                f.write_str("invalid shared-memory name (empty, contains '/' or NUL, or too long)")
            }
            Error::HugepagesUnavailable {
                mounted,
                free_pages,
                needed_pages,
            } => write!(
                f,
                "hugepages required but {} (free 2 MiB pages: {free_pages}, needed {needed_pages})",
                if *mounted {
                    "too few are free"
                } else {
                    "no hugetlbfs is mounted"
                }
            ),
            Error::BadMagic => f.write_str("bad magic number: not an iWARP shared-memory object"),
            Error::Version { found, expected } => {
                write!(f, "ABI version {found}, this build speaks {expected}")
            }
            Error::Kind { found, expected } => {
                write!(f, "segment kind {found}, expected {expected}")
            }
            Error::Layout => f.write_str("shared-memory layout does not fit (size or alignment)"),
            Error::SlotSize { found, expected } => {
                write!(f, "ring slot size {found}, expected {expected}")
            }
            Error::Decode { tag, what } => write!(f, "cannot decode record tag {tag}: {what}"),
            Error::NoFd => f.write_str("no file descriptor received"),
            Error::NotSealed => f.write_str(
                "not a memory file sealed against shrinking (F_SEAL_SHRINK): only segments made \
                 by Segment::create_sealed (iwarp-verbs) can be mapped",
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}
