//! The crate's one error type: one variant per failure cause of a verb (Verbs spec section 7,
//! the "errors" lists of each verb), so the application library can map each to its own.

use core::fmt;
use iwarp_abi::app::ErrorCode;

/// Which resource a limit or a handle refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Pd,
    Cq,
    Srq,
    Qp,
    Mr,
    Mw,
    Connection,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Pd => "protection domain",
            Resource::Cq => "completion queue",
            Resource::Srq => "shared receive queue",
            Resource::Qp => "queue pair",
            Resource::Mr => "memory region",
            Resource::Mw => "memory window",
            Resource::Connection => "connection",
        })
    }
}

/// Why a verb failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The handle names no resource of that kind owned by the caller (another application's
    /// resources are invisible: the same error as a handle that never existed).
    InvalidHandle { what: Resource, id: u32 },
    /// The STag is unknown, its key is stale (re-registered or invalidated), or it is of
    /// another kind than the verb needs.
    InvalidStag { stag: u32 },
    /// A resource of another protection domain was named (Verbs section 5.3).
    PdMismatch { expected: u32, found: u32 },
    /// The resource is still used by others and cannot be destroyed yet (e.g. a PD with QPs,
    /// a CQ that QPs complete into, an MR with bound windows).
    InUse { what: Resource, id: u32, users: u32 },
    /// The configured limit for this resource is reached.
    InsufficientResources { what: Resource, limit: u32 },
    /// A depth, SGE count, inline length or IRD/ORD outside what Query RNIC reports.
    InvalidAttribute {
        name: &'static str,
        value: u64,
        max: u64,
    },
    /// Access rights that make no sense together (Verbs section 7.2.3: remote write or atomic
    /// without local write).
    InvalidAccess { access: u32 },
    /// The region is empty, past the end of its segment, or wraps.
    InvalidRegion {
        offset: u64,
        len: u64,
        segment_len: u64,
    },
    /// The QP cannot move between these states (Verbs section 6.2, figure 4).
    InvalidModify { from: QpStateName, to: QpStateName },
    /// An application message that does not decode (unknown tag, short, bad field).
    Protocol { what: &'static str },
    /// iwarpd refused, for a reason only it can see (windows bound into a region, more
    /// completions on a CQ than its new size): nothing changed.
    Refused {
        what: Resource,
        id: u32,
        reason: &'static str,
    },
}

impl Error {
    /// The class of this error, sent to applications with the message text.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidHandle { .. } => ErrorCode::InvalidHandle,
            Error::InvalidStag { .. } => ErrorCode::InvalidStag,
            Error::PdMismatch { .. } => ErrorCode::PdMismatch,
            Error::InUse { .. } => ErrorCode::InUse,
            Error::InsufficientResources { .. } => ErrorCode::InsufficientResources,
            Error::InvalidAttribute { .. } => ErrorCode::InvalidAttribute,
            Error::InvalidAccess { .. } => ErrorCode::InvalidAccess,
            Error::InvalidRegion { .. } => ErrorCode::InvalidRegion,
            Error::InvalidModify { .. } => ErrorCode::InvalidModify,
            Error::Protocol { .. } => ErrorCode::Protocol,
            Error::Refused { .. } => ErrorCode::Refused,
        }
    }
}

/// A QP state's name as the Verbs spec spells it (section 6.2).
pub type QpStateName = &'static str;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidHandle { what, id } => write!(f, "no {what} with handle {id}"),
            Error::InvalidStag { stag } => write!(f, "invalid or stale STag {stag:#010x}"),
            Error::PdMismatch { expected, found } => write!(
                f,
                "resource belongs to protection domain {found}, not {expected}"
            ),
            Error::InUse { what, id, users } => {
                write!(f, "{what} {id} is still used by {users} other resource(s)")
            }
            Error::InsufficientResources { what, limit } => {
                write!(f, "limit of {limit} {what}s reached ([limits] in the config)")
            }
            Error::InvalidAttribute { name, value, max } => {
                write!(f, "{name} = {value} is outside 1..={max}")
            }
            Error::InvalidAccess { access } => write!(
                f,
                "access rights {access:#x}: remote write and remote atomic need local write"
            ),
            Error::InvalidRegion {
                offset,
                len,
                segment_len,
            } => write!(
                f,
                "region of {len} octets at offset {offset} does not fit its segment of {segment_len} octets"
            ),
            Error::InvalidModify { from, to } => {
                write!(f, "a QP cannot go from {from} to {to}")
            }
            Error::Protocol { what } => write!(f, "malformed application message: {what}"),
            Error::Refused { what, id, reason } => write!(f, "{what} {id}: {reason}"),
        }
    }
}

impl std::error::Error for Error {}
