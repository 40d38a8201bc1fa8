//! The Terminate message (RFC 5040 section 4.8) and the named (layer, type, code) triples of
//! RFC 5040 section 4.8, RFC 5041 section 7, RFC 5044 section 8, RFC 6581 section 3 and
//! RFC 7306 section 8.
//!
//! A Terminate travels as an untagged DDP message on queue 2. Its RDMAP header is the
//! Terminate Control word, optionally followed by the length and copies of the DDP and RDMAP
//! headers of the segment that caused it:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! | Layer | EType |  Error Code   |M|D|R|        Reserved         |
//! |   DDP Segment Length (if M)   |  Terminated DDP header (if D) ...
//! ... Terminated RDMA header (if R)                               |
//! ```
//!
//! Contract (smoltcp style): after [`TerminatePacket::check_len`] succeeds no accessor panics;
//! [`TerminateRepr::parse`] never panics; [`TerminateRepr::emit`] never panics into a buffer of
//! at least [`TerminateRepr::buffer_len`] bytes.

use crate::error::{Error, Result};

/// The layer of a Terminate (RFC 5040 section 4.8, "Layer").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Layer {
    Rdmap = 0,
    Ddp = 1,
    /// The lower layer protocol: MPA over TCP.
    Llp = 2,
}

impl Layer {
    pub fn from_u8(v: u8) -> Option<Layer> {
        match v {
            0 => Some(Layer::Rdmap),
            1 => Some(Layer::Ddp),
            2 => Some(Layer::Llp),
            _ => None,
        }
    }
}

/// Why a stream is being terminated: layer, error type and error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TermCause {
    pub layer: Layer,
    pub etype: u8,
    pub code: u8,
}

const fn cause(layer: Layer, etype: u8, code: u8) -> TermCause {
    TermCause { layer, etype, code }
}

// RDMAP layer, RFC 5040 section 4.8.
pub const RDMAP_ETYPE_LOCAL_CATASTROPHIC: u8 = 0x0;
pub const RDMAP_ETYPE_REMOTE_PROTECTION: u8 = 0x1;
pub const RDMAP_ETYPE_REMOTE_OPERATION: u8 = 0x2;

/// Local catastrophic error (error code is 0x00 per RFC 5040).
pub const RDMAP_LOCAL_CATASTROPHIC: TermCause = cause(Layer::Rdmap, 0x0, 0x00);
pub const RDMAP_INVALID_STAG: TermCause = cause(Layer::Rdmap, 0x1, 0x00);
pub const RDMAP_BASE_BOUNDS: TermCause = cause(Layer::Rdmap, 0x1, 0x01);
pub const RDMAP_ACCESS_RIGHTS: TermCause = cause(Layer::Rdmap, 0x1, 0x02);
pub const RDMAP_STAG_NOT_ASSOCIATED: TermCause = cause(Layer::Rdmap, 0x1, 0x03);
pub const RDMAP_TO_WRAP: TermCause = cause(Layer::Rdmap, 0x1, 0x04);
pub const RDMAP_PROTECTION_CANNOT_INVALIDATE: TermCause = cause(Layer::Rdmap, 0x1, 0x09);
pub const RDMAP_PROTECTION_UNSPECIFIED: TermCause = cause(Layer::Rdmap, 0x1, 0xff);
pub const RDMAP_INVALID_RDMAP_VERSION: TermCause = cause(Layer::Rdmap, 0x2, 0x05);
pub const RDMAP_UNEXPECTED_OPCODE: TermCause = cause(Layer::Rdmap, 0x2, 0x06);
/// "Catastrophic error, localized to RDMAP Stream": also the error for a misaligned atomic
/// (RFC 7306 section 8.2).
pub const RDMAP_CATASTROPHIC_LOCAL: TermCause = cause(Layer::Rdmap, 0x2, 0x07);
pub const RDMAP_CATASTROPHIC_GLOBAL: TermCause = cause(Layer::Rdmap, 0x2, 0x08);
pub const RDMAP_OPERATION_CANNOT_INVALIDATE: TermCause = cause(Layer::Rdmap, 0x2, 0x09);
pub const RDMAP_OPERATION_UNSPECIFIED: TermCause = cause(Layer::Rdmap, 0x2, 0xff);

// DDP layer, RFC 5041 section 7.2.
pub const DDP_ETYPE_CATASTROPHIC: u8 = 0x0;
pub const DDP_ETYPE_TAGGED: u8 = 0x1;
pub const DDP_ETYPE_UNTAGGED: u8 = 0x2;
pub const DDP_ETYPE_RSVD: u8 = 0x3;

pub const DDP_CATASTROPHIC: TermCause = cause(Layer::Ddp, 0x0, 0x00);
pub const DDP_TAGGED_INVALID_STAG: TermCause = cause(Layer::Ddp, 0x1, 0x00);
pub const DDP_TAGGED_BASE_BOUNDS: TermCause = cause(Layer::Ddp, 0x1, 0x01);
pub const DDP_TAGGED_STAG_NOT_ASSOCIATED: TermCause = cause(Layer::Ddp, 0x1, 0x02);
pub const DDP_TAGGED_TO_WRAP: TermCause = cause(Layer::Ddp, 0x1, 0x03);
pub const DDP_TAGGED_INVALID_DDP_VERSION: TermCause = cause(Layer::Ddp, 0x1, 0x04);
pub const DDP_UNTAGGED_INVALID_QN: TermCause = cause(Layer::Ddp, 0x2, 0x01);
pub const DDP_UNTAGGED_NO_BUFFER: TermCause = cause(Layer::Ddp, 0x2, 0x02);
pub const DDP_UNTAGGED_MSN_RANGE: TermCause = cause(Layer::Ddp, 0x2, 0x03);
pub const DDP_UNTAGGED_INVALID_MO: TermCause = cause(Layer::Ddp, 0x2, 0x04);
pub const DDP_UNTAGGED_TOO_LONG: TermCause = cause(Layer::Ddp, 0x2, 0x05);
pub const DDP_UNTAGGED_INVALID_DDP_VERSION: TermCause = cause(Layer::Ddp, 0x2, 0x06);

// LLP (MPA) layer, RFC 5044 section 8 and RFC 6581 section 3; error type 0 is MPA.
pub const LLP_TCP_LOST: TermCause = cause(Layer::Llp, 0x0, 0x01);
pub const LLP_CRC_ERROR: TermCause = cause(Layer::Llp, 0x0, 0x02);
/// "MPA Marker and ULPDU Length field mismatch".
pub const LLP_FPDU_START: TermCause = cause(Layer::Llp, 0x0, 0x03);
pub const LLP_INVALID_REQUEST_REPLY: TermCause = cause(Layer::Llp, 0x0, 0x04);
pub const LLP_LOCAL_CATASTROPHIC: TermCause = cause(Layer::Llp, 0x0, 0x05);
pub const LLP_INSUFFICIENT_IRD: TermCause = cause(Layer::Llp, 0x0, 0x06);
pub const LLP_NO_MATCHING_RTR: TermCause = cause(Layer::Llp, 0x0, 0x07);

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const CONTROL: Field = 0..4;
    pub const DDP_SEG_LEN: Field = 4..6;
    pub const COPIED: usize = 6;
}

const FLAG_M: u32 = 0x0000_8000;
const FLAG_D: u32 = 0x0000_4000;
const FLAG_R: u32 = 0x0000_2000;

/// Size of the Terminate Control word.
pub const CONTROL_LEN: usize = 4;

/// A view of a Terminate RDMAP header (the bytes after the untagged DDP header).
#[derive(Debug, Clone)]
pub struct TerminatePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TerminatePacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        TerminatePacket { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The control word must be there, and the length field when M or D is set.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::CONTROL.end {
            return Err(Error::Truncated);
        }
        if (self.m() || self.d() || self.r()) && len < field::DDP_SEG_LEN.end {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn control(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    pub fn layer(&self) -> u8 {
        (self.control() >> 28) as u8
    }
    pub fn etype(&self) -> u8 {
        ((self.control() >> 24) & 0xf) as u8
    }
    pub fn code(&self) -> u8 {
        ((self.control() >> 16) & 0xff) as u8
    }
    /// M: the DDP Segment Length field is valid.
    pub fn m(&self) -> bool {
        self.control() & FLAG_M != 0
    }
    /// D: a terminated DDP header is included.
    pub fn d(&self) -> bool {
        self.control() & FLAG_D != 0
    }
    /// R: a terminated RDMA header is included.
    pub fn r(&self) -> bool {
        self.control() & FLAG_R != 0
    }
    pub fn ddp_segment_length(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::DDP_SEG_LEN.start], b[field::DDP_SEG_LEN.start + 1]])
    }
    /// The copied DDP and RDMAP headers, as received.
    pub fn copied_headers(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        if b.len() > field::COPIED {
            &b[field::COPIED..]
        } else {
            &[]
        }
    }
}

/// The maximum number of header bytes a Terminate copies: the longest DDP header (18) and
/// the longest RDMAP header that precedes payload (Atomic Request, 52).
pub const MAX_COPIED: usize = 18 + 52;

/// The meaning of a Terminate RDMAP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminateRepr {
    pub cause: TermCause,
    /// The length of the offending DDP segment (M flag), if reported.
    pub ddp_segment_length: Option<u16>,
    /// Bytes of the offending DDP header (D flag) — a copy, empty when not included.
    pub ddp_header: CopiedHeader,
    /// Bytes of the offending RDMAP header (R flag) — a copy, empty when not included.
    pub rdmap_header: CopiedHeader,
}

/// A fixed-capacity copy of a header, so a Terminate needs no allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CopiedHeader {
    len: u8,
    bytes: [u8; 52],
}

impl core::fmt::Debug for CopiedHeader {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:02x?}", self.as_slice())
    }
}

impl CopiedHeader {
    pub const EMPTY: CopiedHeader = CopiedHeader {
        len: 0,
        bytes: [0; 52],
    };

    /// Copies at most 52 bytes of `src`.
    pub fn new(src: &[u8]) -> CopiedHeader {
        let n = src.len().min(52);
        let mut bytes = [0; 52];
        bytes[..n].copy_from_slice(&src[..n]);
        CopiedHeader {
            len: n as u8,
            bytes,
        }
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl TerminateRepr {
    /// A Terminate carrying no copied headers (for errors not tied to an inbound segment).
    pub fn new(cause: TermCause) -> TerminateRepr {
        TerminateRepr {
            cause,
            ddp_segment_length: None,
            ddp_header: CopiedHeader::EMPTY,
            rdmap_header: CopiedHeader::EMPTY,
        }
    }

    /// Parses the Terminate header. The split of the copied bytes into the DDP header and the
    /// RDMAP header follows the copied DDP header's own T bit (14 bytes tagged, 18 untagged).
    pub fn parse<T: AsRef<[u8]>>(packet: &TerminatePacket<T>) -> Result<TerminateRepr> {
        packet.check_len()?;
        let layer = Layer::from_u8(packet.layer()).ok_or(Error::Malformed)?;
        let cause = TermCause {
            layer,
            etype: packet.etype(),
            code: packet.code(),
        };
        let copied = packet.copied_headers();
        let (ddp, rdmap) = if packet.d() {
            let first = *copied.first().ok_or(Error::Truncated)?;
            let ddp_len = if first & 0x80 != 0 { 14 } else { 18 };
            if copied.len() < ddp_len {
                return Err(Error::Truncated);
            }
            let (d, r) = copied.split_at(ddp_len);
            (d, if packet.r() { r } else { &[][..] })
        } else {
            (&[][..], if packet.r() { copied } else { &[][..] })
        };
        if rdmap.len() > 52 {
            return Err(Error::Malformed);
        }
        Ok(TerminateRepr {
            cause,
            ddp_segment_length: packet.m().then(|| packet.ddp_segment_length()),
            ddp_header: CopiedHeader::new(ddp),
            rdmap_header: CopiedHeader::new(rdmap),
        })
    }

    fn has_tail(&self) -> bool {
        self.ddp_segment_length.is_some()
            || !self.ddp_header.is_empty()
            || !self.rdmap_header.is_empty()
    }

    pub fn buffer_len(&self) -> usize {
        if self.has_tail() {
            field::COPIED + self.ddp_header.as_slice().len() + self.rdmap_header.as_slice().len()
        } else {
            CONTROL_LEN
        }
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall);
        }
        let mut control = ((self.cause.layer as u32) << 28)
            | (((self.cause.etype & 0xf) as u32) << 24)
            | ((self.cause.code as u32) << 16);
        if self.ddp_segment_length.is_some() {
            control |= FLAG_M;
        }
        if !self.ddp_header.is_empty() {
            control |= FLAG_D;
        }
        if !self.rdmap_header.is_empty() {
            control |= FLAG_R;
        }
        buf[field::CONTROL].copy_from_slice(&control.to_be_bytes());
        if self.has_tail() {
            buf[field::DDP_SEG_LEN]
                .copy_from_slice(&self.ddp_segment_length.unwrap_or(0).to_be_bytes());
            let d = self.ddp_header.as_slice();
            let r = self.rdmap_header.as_slice();
            buf[field::COPIED..field::COPIED + d.len()].copy_from_slice(d);
            buf[field::COPIED + d.len()..len].copy_from_slice(r);
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_word_layout() {
        // Layer DDP (1), type untagged (2), code invalid MSN range (3), M and D set.
        let mut repr = TerminateRepr::new(DDP_UNTAGGED_MSN_RANGE);
        repr.ddp_segment_length = Some(0x0404);
        let hdr = [0x41u8, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0];
        repr.ddp_header = CopiedHeader::new(&hdr);
        let mut buf = [0xa5u8; 64];
        let n = repr.emit(&mut buf).unwrap();
        assert_eq!(n, 6 + 18);
        assert_eq!(&buf[..6], &[0x12, 0x03, 0xc0, 0x00, 0x04, 0x04]);
        assert_eq!(&buf[6..24], &hdr);
        assert_eq!(buf[24], 0xa5);
        let parsed = TerminateRepr::parse(&TerminatePacket::new_unchecked(&buf[..n])).unwrap();
        assert_eq!(parsed, repr);
    }

    #[test]
    fn bare_terminate_is_four_bytes() {
        let repr = TerminateRepr::new(RDMAP_CATASTROPHIC_LOCAL);
        let mut buf = [0xa5u8; 8];
        assert_eq!(repr.emit(&mut buf).unwrap(), 4);
        assert_eq!(&buf[..5], &[0x02, 0x07, 0x00, 0x00, 0xa5]);
    }

    #[test]
    fn truncated_is_an_error() {
        assert_eq!(
            TerminateRepr::parse(&TerminatePacket::new_unchecked(&[0x12u8, 0x03, 0xc0][..])),
            Err(Error::Truncated)
        );
        assert_eq!(
            TerminateRepr::parse(&TerminatePacket::new_unchecked(
                &[0x12u8, 0x03, 0xc0, 0][..]
            )),
            Err(Error::Truncated)
        );
    }
}
