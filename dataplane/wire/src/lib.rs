//! Byte-exact codecs for the iWARP protocol suite.
//!
//! - [`mpa`]: Marker PDU Aligned framing (RFC 5044, updated by RFC 6581): FPDUs with padding,
//!   CRC32c and markers, a resumable deframer, and the MPA Request/Reply frames.
//! - [`ddp`]: Direct Data Placement headers and segmentation (RFC 5041).
//! - [`rdmap`]: RDMAP messages (RFC 5040), atomics and Immediate Data (RFC 7306), and the
//!   RDMAP version 2 draft (Send with Immediate, Read V2).
//! - [`terminate`]: the Terminate message and every (layer, type, code) the RFCs name.
//! - [`crc`]: CRC32c as MPA uses it.
//!
//! The crate does no I/O, holds no state beyond the deframer's, never allocates on the data
//! path, contains no `unsafe`, and never panics on input: every parser returns [`Error`],
//! which names the Terminate a receiver must send.
#![forbid(unsafe_code)]

pub mod crc;
pub mod ddp;
mod error;
pub mod mpa;
pub mod rdmap;
pub mod terminate;

pub use error::{Error, Result};
pub use terminate::{Layer, TermCause};
