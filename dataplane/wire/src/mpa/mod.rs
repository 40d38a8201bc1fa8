//! Marker PDU Aligned framing: RFC 5044, updated by RFC 6581.
//!
//! - [`frame`]: the MPA Request and Reply frames of connection setup (RFC 5044 section 7.1)
//!   and the RFC 6581 enhanced connection data (IRD/ORD, peer-to-peer, RTR choice).
//! - [`fpdu`]: building FPDUs for transmission (ULPDU_Length, ULPDU, pad, CRC32c and, when
//!   negotiated, markers every 512 octets of the stream) and the MULPDU arithmetic.
//! - [`deframer`]: a resumable receiver that takes the TCP stream in any split and yields
//!   each FPDU's ULPDU, with markers removed and the CRC checked.

pub mod deframer;
pub mod fpdu;
pub mod frame;
pub mod negotiation;

pub use deframer::Deframer;
pub use fpdu::{FpduEmitter, MpaParams};
pub use frame::{EnhancedData, FrameKind, FrameRepr, Rtr};

/// Length of the ULPDU_Length field.
pub const HEADER_LEN: usize = 2;
/// Length of the CRC field.
pub const CRC_LEN: usize = 4;
/// Length of a marker.
pub const MARKER_LEN: usize = 4;
/// Markers sit every 512 octets of the stream (RFC 5044 section 5).
pub const MARKER_INTERVAL: usize = 512;
/// The most private data an MPA Request/Reply may carry (RFC 5044 section 7.1).
pub const MAX_PRIVATE_DATA: usize = 512;

/// Pad octets after a ULPDU of `ulpdu_len` bytes: ULPDU_Length + ULPDU + pad is a multiple
/// of 4 (RFC 5044 section 4.1; markers are not counted).
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (HEADER_LEN + ulpdu_len) % 4) % 4
}

/// Length of an FPDU without markers.
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    HEADER_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}
