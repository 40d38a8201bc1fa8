//! The crate's one error type: one variant per failure cause of a verb that the Verbs spec
//! lists (section 7 "errors" of Post Send, Post Receive, Poll CQ, Deregister, ...).

use core::fmt;

#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The work queue has no free entry (Verbs: "Insufficient resources" / queue full).
    QueueFull,
    /// More scatter/gather entries than the QP was created with.
    InvalidSgeCount { count: usize, max: usize },
    /// Inline data longer than the QP supports.
    InvalidInlineLength { len: usize, max: usize },
    /// The work request names a region of another QP's PD or an STag this process does not
    /// hold.
    InvalidStag { stag: u32 },
    /// An SGE runs past the end of its region.
    InvalidLength {
        offset: u64,
        len: u64,
        region_len: u64,
    },
    /// A work request opcode this QP cannot post (e.g. Read V2 without RDMAP version 2).
    InvalidWrOpcode,
    /// Deregister while posted work requests still use the region.
    MrInUse { stag: u32, posted: u64 },
    /// The shared-memory contract failed (ring corrupted, segment not mapped).
    Abi(iwarp_abi::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::QueueFull => f.write_str("work queue full"),
            Error::InvalidSgeCount { count, max } => {
                write!(f, "{count} scatter/gather entries, the QP allows {max}")
            }
            Error::InvalidInlineLength { len, max } => {
                write!(f, "{len} octets of inline data, the QP allows {max}")
            }
            Error::InvalidStag { stag } => write!(f, "STag {stag:#010x} is not usable here"),
            Error::InvalidLength {
                offset,
                len,
                region_len,
            } => write!(
                f,
                "{len} octets at offset {offset} run past the region's {region_len} octets"
            ),
            Error::InvalidWrOpcode => f.write_str("work request opcode not allowed on this QP"),
            Error::MrInUse { stag, posted } => write!(
                f,
                "memory region {stag:#010x} is used by {posted} posted work request(s)"
            ),
            Error::Abi(e) => write!(f, "shared memory: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Abi(e) => Some(e),
            _ => None,
        }
    }
}

impl From<iwarp_abi::Error> for Error {
    fn from(e: iwarp_abi::Error) -> Error {
        Error::Abi(e)
    }
}
