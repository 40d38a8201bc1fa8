//! The crate's one error type: one variant per failure cause of a verb that the Verbs spec
//! lists (section 7 "errors" of Post Send, Post Receive, Poll CQ, Deregister, ...).

use core::fmt;
use iwarp_abi::id::Stag;

#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The work queue has no free entry (Verbs: "Insufficient resources" / queue full).
    QueueFull,
    /// More scatter/gather entries than the QP was created with.
    InvalidSgeCount {
        count: usize,
        max: usize,
    },
    /// Inline data longer than the QP supports.
    InvalidInlineLength {
        len: usize,
        max: usize,
    },
    /// The work request names a region of another QP's PD or an STag this process does not
    /// hold.
    InvalidStag {
        stag: u32,
    },
    /// An SGE runs past the end of its region.
    InvalidLength {
        offset: u64,
        len: u64,
        region_len: u64,
    },
    /// A work request opcode this QP cannot post (e.g. Read V2 without RDMAP version 2).
    InvalidWrOpcode,
    /// Deregister while posted work requests still use the region.
    MrInUse {
        stag: Stag,
        posted: u64,
    },
    /// The shared-memory contract failed (ring corrupted, segment not mapped).
    Abi(iwarp_abi::Error),
    /// Nothing answers at iwarp-control's socket (is the endpoint running?).
    ControlUnreachable {
        path: std::path::PathBuf,
        reason: String,
    },
    /// iwarp-control closed the connection: it exited, or found iwarpd gone. Every resource
    /// of this context is gone with it.
    ControlGone {
        path: std::path::PathBuf,
    },
    /// iwarp-control refused the request; `code` is its error class, `message` says why
    /// (e.g. a registration past the buffer, a limit reached, an unknown handle).
    Refused {
        code: u16,
        message: String,
    },
    /// A message from iwarp-control that this library does not understand.
    Protocol(String),
    Io(std::io::Error),
    /// Waited too long for `what`.
    Timeout {
        what: &'static str,
    },
    /// The peer rejected our connection request, with its private data.
    ConnectionRejected {
        private_data: Vec<u8>,
    },
    /// Connection setup failed (timeout, refused, MPA negotiation).
    ConnectionFailed {
        reason: String,
    },
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
            Error::ControlUnreachable { path, reason } => write!(
                f,
                "iwarp-control does not answer at {}: {reason} (is the endpoint running?)",
                path.display()
            ),
            Error::ControlGone { path } => write!(
                f,
                "iwarp-control at {} closed the connection (it exited or lost its iwarpd)",
                path.display()
            ),
            Error::Refused { code, message } => {
                write!(f, "iwarp-control refused (error {code}): {message}")
            }
            Error::Protocol(m) => write!(f, "protocol error with iwarp-control: {m}"),
            Error::Io(e) => write!(f, "{e}"),
            Error::Timeout { what } => write!(f, "timed out waiting for {what}"),
            Error::ConnectionRejected { private_data } => write!(
                f,
                "the peer rejected the connection (private data: {:?})",
                String::from_utf8_lossy(private_data)
            ),
            Error::ConnectionFailed { reason } => write!(f, "connection failed: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Abi(e) => Some(e),
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<iwarp_abi::Error> for Error {
    fn from(e: iwarp_abi::Error) -> Error {
        Error::Abi(e)
    }
}
