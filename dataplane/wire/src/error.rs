//! The crate's one error type.
//!
//! Every variant is small and `Copy`: parsers run on the receive path and must not allocate.
//! Each variant can name the Terminate message (RFC 5040 section 4.8) that a receiver sends when
//! the error comes from the wire, so the engine never has to re-derive it.

use crate::terminate::{self, TermCause};
use core::fmt;

/// What went wrong while parsing or emitting an iWARP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The buffer is shorter than the header (or the declared length) needs.
    Truncated,
    /// The DDP version (DV) is not 1; `tagged` tells which buffer model the segment claimed.
    DdpVersion { version: u8, tagged: bool },
    /// The RDMAP version (RV) is not one this endpoint speaks.
    RdmapVersion(u8),
    /// The RDMAP opcode is unknown (or not valid for the negotiated RDMAP version).
    UnknownOpcode(u8),
    /// The opcode requires the other buffer model (e.g. a tagged Send).
    WrongBufferModel(u8),
    /// The untagged queue number does not belong to the opcode (RFC 5040 section 5.1).
    BadQueueNumber(u32),
    /// The Atomic Operation Code is reserved (0x1, Swap in the drafts) or unassigned (RFC 7306 section 5.2.1).
    ReservedAOpCode(u8),
    /// An Immediate Data message does not carry exactly 8 bytes (RFC 7306 section 6.3).
    ImmediateLength(usize),
    /// A field that must hold a fixed value does not.
    Malformed,
    /// The MPA CRC does not match (RFC 5044 section 4.3).
    BadCrc { expected: u32, received: u32 },
    /// The ULPDU length of an FPDU exceeds what this receiver accepts.
    UlpduTooLong(u16),
    /// A marker's FPDUPTR does not point at the FPDU being received (RFC 5044 section 5).
    BadMarker,
    /// The MPA Request/Reply key is not "MPA ID Req Frame" / "MPA ID Rep Frame".
    BadMpaKey,
    /// An MPA revision other than 1 or 2.
    BadMpaRevision(u8),
    /// Private data longer than the 512 octets RFC 5044 section 7.1 allows.
    PrivateDataTooLong(u16),
    /// An untagged segment's MO does not continue the message where the previous segment of
    /// the same message ended (RFC 5041 section 5.2; Terminate per section 7.2, code 4).
    BadMessageOffset { expected: u32, received: u32 },
    /// The output buffer is too small for `emit`.
    BufferTooSmall,
}

impl Error {
    /// The Terminate message a receiver of this error sends to its peer, if any.
    ///
    /// Errors that can only arise when emitting (`BufferTooSmall`) or during MPA
    /// negotiation, before the connection is in full operation, have no Terminate.
    pub fn terminate_cause(&self) -> Option<TermCause> {
        use terminate::*;
        Some(match *self {
            // A truncated DDP segment cannot be attributed to a buffer: DDP catastrophic.
            Error::Truncated | Error::Malformed => DDP_CATASTROPHIC,
            Error::DdpVersion { tagged: true, .. } => DDP_TAGGED_INVALID_DDP_VERSION,
            Error::DdpVersion { tagged: false, .. } => DDP_UNTAGGED_INVALID_DDP_VERSION,
            Error::RdmapVersion(_) => RDMAP_INVALID_RDMAP_VERSION,
            Error::UnknownOpcode(_) | Error::WrongBufferModel(_) => RDMAP_UNEXPECTED_OPCODE,
            Error::BadQueueNumber(_) => DDP_UNTAGGED_INVALID_QN,
            // RFC 7306 section 5.2.1 item 4 says only "an error MUST be surfaced"; an unsupported
            // operation code is an invalid operation on this stream, reported like an unknown opcode.
            Error::ReservedAOpCode(_) => RDMAP_UNEXPECTED_OPCODE,
            Error::ImmediateLength(_) => RDMAP_CATASTROPHIC_LOCAL,
            Error::BadCrc { .. } => LLP_CRC_ERROR,
            Error::UlpduTooLong(_) | Error::BadMarker => LLP_FPDU_START,
            Error::BadMpaKey | Error::BadMpaRevision(_) | Error::PrivateDataTooLong(_) => {
                LLP_INVALID_REQUEST_REPLY
            }
            Error::BadMessageOffset { .. } => DDP_UNTAGGED_INVALID_MO,
            Error::BufferTooSmall => return None,
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => write!(f, "buffer shorter than the header needs"),
            Error::DdpVersion { version, .. } => write!(f, "DDP version {version}, expected 1"),
            Error::RdmapVersion(v) => write!(f, "RDMAP version {v} not supported"),
            Error::UnknownOpcode(o) => write!(f, "unknown RDMAP opcode {o:#x}"),
            Error::WrongBufferModel(o) => {
                write!(f, "RDMAP opcode {o:#x} in the wrong DDP buffer model")
            }
            Error::BadQueueNumber(q) => write!(f, "invalid DDP queue number {q}"),
            Error::ReservedAOpCode(a) => write!(f, "reserved atomic operation code {a:#x}"),
            Error::ImmediateLength(l) => {
                write!(f, "Immediate Data message of {l} bytes, expected 8")
            }
            Error::Malformed => write!(f, "malformed header"),
            Error::BadCrc { expected, received } => {
                write!(
                    f,
                    "MPA CRC mismatch: computed {expected:#010x}, received {received:#010x}"
                )
            }
            Error::UlpduTooLong(l) => write!(f, "ULPDU length {l} too long"),
            Error::BadMarker => write!(f, "MPA marker does not point at the FPDU header"),
            Error::BadMpaKey => write!(f, "not an MPA Request/Reply frame"),
            Error::BadMpaRevision(r) => write!(f, "MPA revision {r} not supported"),
            Error::PrivateDataTooLong(l) => {
                write!(f, "MPA private data of {l} bytes, at most 512 allowed")
            }
            Error::BadMessageOffset { expected, received } => {
                write!(f, "DDP message offset {received}, expected {expected}")
            }
            Error::BufferTooSmall => write!(f, "output buffer too small"),
        }
    }
}

impl std::error::Error for Error {}

/// Results of this crate.
pub type Result<T> = core::result::Result<T, Error>;
