//! RDMAP messages over DDP: RFC 5040, the RFC 7306 extensions (atomics, Immediate Data) and
//! the RDMAP version 2 draft (draft-wood-storm-rdmap-ext-v2: Send with Immediate, Read V2).
//!
//! The RDMAP control field travels in DDP's first RsvdULP octet:
//!
//! ```text
//! version 1: | RV (2) | Rsv (2) | Opcode (4) |     (RFC 5040 section 4.2)
//! version 2: | RV (2) | Rsv (1) | Opcode (5) |     (V2 draft section 4.1)
//! ```
//!
//! [`SegmentRepr`] is the meaning of one whole DDP segment (DDP header + RDMAP header); its
//! ULP payload is returned beside it as a slice, never copied.
//!
//! Contract (smoltcp style): [`SegmentRepr::parse`] never panics on any input and returns an
//! [`Error`] that names the Terminate to send; [`SegmentRepr::emit`] never panics into a
//! buffer of at least [`SegmentRepr::header_len`] bytes.
//!
//! Public API (what the engine codes against):
//!
//! ```text
//! Opcode (repr u8, TryFrom<u8>)   .info() -> OpcodeInfo { tagged, qn, rdmap_header_len,
//!                                 min_version }, .carries_invalidate(), .solicited()
//! parse_control(u8) -> (version, Opcode); control(version, Opcode) -> u8
//! SegmentRepr { version, opcode, last, buffer: ddp::Buffer, header: RdmapHeader }
//!     parse(ulpdu) -> (SegmentRepr, payload slice); header_len(); emit(&mut [u8])
//! RdmapHeader::{None, ReadRequest, ReadRequestV2, Terminate, Immediate(u64),
//!               AtomicRequest, AtomicResponse { request_id, original }}
//! AOpCode::{FetchAdd = 0, CmpSwap = 2} (TryFrom<u8>: 0x1 and 0x3..=0xf are ReservedAOpCode)
//! QN_SEND 0, QN_READ_REQUEST 1 (also Atomic Requests), QN_TERMINATE 2, QN_RESPONSE 3
//! ```
//!
//! Choices where the specifications leave one:
//! - RFC 7306 section 4 calls the Atomic Response header "32 bytes long", but its figure 6 and
//!   appendix A.2 show 12 (request id, original value); we follow the figures.
//! - V2 draft section 5.3: a Send with Immediate's last segment carries only the 8 octets of
//!   immediate data. `emit` writes them from `RdmapHeader::Immediate`; `parse` hands them back
//!   as the payload (header `None`), and the receiver checks that there are exactly 8, since a
//!   wrong count there is a Terminate of its own (RDMAP catastrophic, localized).
//! - RFC 7306 section 5.2.1 item 4 names no Terminate for an unsupported AOpCode; we send
//!   RDMAP Remote Operation / Unexpected OpCode (see `error.rs`).

use crate::ddp::{self, Buffer, DdpRepr};
use crate::error::{Error, Result};
use crate::terminate::{TerminatePacket, TerminateRepr};

/// RDMAP version 1 (RFC 5040).
pub const RDMAP_V1: u8 = 1;
/// RDMAP version 2 (V2 draft), used only when both peers negotiated it.
pub const RDMAP_V2: u8 = 2;

/// Untagged queue numbers (RFC 5040 section 5.1, RFC 7306 section 10.2).
pub const QN_SEND: u32 = 0;
pub const QN_READ_REQUEST: u32 = 1;
pub const QN_TERMINATE: u32 = 2;
/// Atomic Responses (RFC 7306) and Read V2 Responses (V2 draft).
pub const QN_RESPONSE: u32 = 3;

/// RDMAP opcodes: 4 bits in version 1, 5 bits in version 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    Write = 0x0,
    ReadRequest = 0x1,
    ReadResponse = 0x2,
    Send = 0x3,
    SendInvalidate = 0x4,
    SendSe = 0x5,
    SendSeInvalidate = 0x6,
    Terminate = 0x7,
    ImmediateData = 0x8,
    ImmediateDataSe = 0x9,
    AtomicRequest = 0xa,
    AtomicResponse = 0xb,
    ReadRequestV2 = 0x11,
    ReadResponseV2 = 0x12,
    SendImmediate = 0x13,
    SendInvalidateImmediate = 0x14,
    SendSeImmediate = 0x15,
    SendSeInvalidateImmediate = 0x16,
}

/// Static facts about an opcode, like siw's `iwarp_pktinfo` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Tagged (true) or untagged buffer model.
    pub tagged: bool,
    /// The untagged queue number, if untagged.
    pub qn: u32,
    /// Length of the RDMAP header that follows the DDP header (Terminate: its minimum).
    pub rdmap_header_len: usize,
    /// The lowest RDMAP version that has the opcode.
    pub min_version: u8,
}

const fn info(tagged: bool, qn: u32, rdmap_header_len: usize, min_version: u8) -> OpcodeInfo {
    OpcodeInfo {
        tagged,
        qn,
        rdmap_header_len,
        min_version,
    }
}

/// Read Request header length (RFC 5040 section 4.4).
pub const READ_REQUEST_LEN: usize = 28;
/// Read V2 Request header length (V2 draft section 6.1).
pub const READ_REQUEST_V2_LEN: usize = 16;
/// Atomic Request header length (RFC 7306 section 5.2.1).
pub const ATOMIC_REQUEST_LEN: usize = 52;
/// Atomic Response header length (RFC 7306 section 5.2.2).
pub const ATOMIC_RESPONSE_LEN: usize = 12;
/// Immediate Data header length (RFC 7306 section 6.2).
pub const IMMEDIATE_LEN: usize = 8;

impl Opcode {
    /// Every opcode, in value order: RFC 5040, RFC 7306, the V2 draft.
    pub const ALL: [Opcode; 18] = [
        Opcode::Write,
        Opcode::ReadRequest,
        Opcode::ReadResponse,
        Opcode::Send,
        Opcode::SendInvalidate,
        Opcode::SendSe,
        Opcode::SendSeInvalidate,
        Opcode::Terminate,
        Opcode::ImmediateData,
        Opcode::ImmediateDataSe,
        Opcode::AtomicRequest,
        Opcode::AtomicResponse,
        Opcode::ReadRequestV2,
        Opcode::ReadResponseV2,
        Opcode::SendImmediate,
        Opcode::SendInvalidateImmediate,
        Opcode::SendSeImmediate,
        Opcode::SendSeInvalidateImmediate,
    ];

    pub const fn info(self) -> OpcodeInfo {
        match self {
            Opcode::Write | Opcode::ReadResponse => info(true, 0, 0, RDMAP_V1),
            Opcode::ReadRequest => info(false, QN_READ_REQUEST, READ_REQUEST_LEN, RDMAP_V1),
            Opcode::Send | Opcode::SendInvalidate | Opcode::SendSe | Opcode::SendSeInvalidate => {
                info(false, QN_SEND, 0, RDMAP_V1)
            }
            Opcode::Terminate => info(false, QN_TERMINATE, crate::terminate::CONTROL_LEN, RDMAP_V1),
            Opcode::ImmediateData | Opcode::ImmediateDataSe => {
                info(false, QN_SEND, IMMEDIATE_LEN, RDMAP_V1)
            }
            Opcode::AtomicRequest => info(false, QN_READ_REQUEST, ATOMIC_REQUEST_LEN, RDMAP_V1),
            Opcode::AtomicResponse => info(false, QN_RESPONSE, ATOMIC_RESPONSE_LEN, RDMAP_V1),
            Opcode::ReadRequestV2 => info(false, QN_READ_REQUEST, READ_REQUEST_V2_LEN, RDMAP_V2),
            Opcode::ReadResponseV2 => info(false, QN_RESPONSE, 0, RDMAP_V2),
            Opcode::SendImmediate
            | Opcode::SendInvalidateImmediate
            | Opcode::SendSeImmediate
            | Opcode::SendSeInvalidateImmediate => info(false, QN_SEND, 0, RDMAP_V2),
        }
    }

    /// Whether the untagged RsvdULP field carries an Invalidate STag.
    pub const fn carries_invalidate(self) -> bool {
        matches!(
            self,
            Opcode::SendInvalidate
                | Opcode::SendSeInvalidate
                | Opcode::SendInvalidateImmediate
                | Opcode::SendSeInvalidateImmediate
        )
    }

    /// Whether the message asks for a solicited event at the receiver.
    pub const fn solicited(self) -> bool {
        matches!(
            self,
            Opcode::SendSe
                | Opcode::SendSeInvalidate
                | Opcode::ImmediateDataSe
                | Opcode::SendSeImmediate
                | Opcode::SendSeInvalidateImmediate
        )
    }
}

impl TryFrom<u8> for Opcode {
    type Error = Error;
    fn try_from(v: u8) -> Result<Opcode> {
        Ok(match v {
            0x0 => Opcode::Write,
            0x1 => Opcode::ReadRequest,
            0x2 => Opcode::ReadResponse,
            0x3 => Opcode::Send,
            0x4 => Opcode::SendInvalidate,
            0x5 => Opcode::SendSe,
            0x6 => Opcode::SendSeInvalidate,
            0x7 => Opcode::Terminate,
            0x8 => Opcode::ImmediateData,
            0x9 => Opcode::ImmediateDataSe,
            0xa => Opcode::AtomicRequest,
            0xb => Opcode::AtomicResponse,
            0x11 => Opcode::ReadRequestV2,
            0x12 => Opcode::ReadResponseV2,
            0x13 => Opcode::SendImmediate,
            0x14 => Opcode::SendInvalidateImmediate,
            0x15 => Opcode::SendSeImmediate,
            0x16 => Opcode::SendSeInvalidateImmediate,
            other => return Err(Error::UnknownOpcode(other)),
        })
    }
}

/// Splits the RDMAP control octet into (version, opcode).
pub fn parse_control(ctrl: u8) -> Result<(u8, Opcode)> {
    let version = ctrl >> 6;
    let raw = match version {
        RDMAP_V1 => {
            // In version 1 the two bits above the opcode are reserved; a set low reserved
            // bit would be a 5-bit opcode, which only version 2 has.
            if ctrl & 0x10 != 0 {
                return Err(Error::UnknownOpcode(ctrl & 0x1f));
            }
            ctrl & 0x0f
        }
        RDMAP_V2 => ctrl & 0x1f,
        v => return Err(Error::RdmapVersion(v)),
    };
    Ok((version, Opcode::try_from(raw)?))
}

/// Builds the RDMAP control octet.
pub const fn control(version: u8, opcode: Opcode) -> u8 {
    (version << 6) | opcode as u8
}

/// Atomic Operation Codes (RFC 7306 section 5.2.1, figure 5). 0x1 (Swap in the drafts) is
/// Reserved in the RFC and rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AOpCode {
    FetchAdd = 0x0,
    CmpSwap = 0x2,
}

impl TryFrom<u8> for AOpCode {
    type Error = Error;
    fn try_from(v: u8) -> Result<AOpCode> {
        match v {
            0x0 => Ok(AOpCode::FetchAdd),
            0x2 => Ok(AOpCode::CmpSwap),
            other => Err(Error::ReservedAOpCode(other)),
        }
    }
}

/// The Atomic Operation Request header (RFC 7306 section 5.2.1, figure 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicRequest {
    pub aopcode: AOpCode,
    pub request_id: u32,
    pub stag: u32,
    pub to: u64,
    pub add_swap: u64,
    pub add_swap_mask: u64,
    pub compare: u64,
    pub compare_mask: u64,
}

/// The Read Request header (RFC 5040 section 4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadRequest {
    pub sink_stag: u32,
    pub sink_to: u64,
    pub size: u32,
    pub src_stag: u32,
    pub src_to: u64,
}

/// The Read V2 Request header (V2 draft section 6.1): no sink buffer on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadRequestV2 {
    pub size: u32,
    pub src_stag: u32,
    pub src_to: u64,
}

/// The RDMAP header that follows the DDP header, by message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmapHeader {
    /// Write, Read Response, the Send variants, Read V2 Response: payload only.
    None,
    ReadRequest(ReadRequest),
    ReadRequestV2(ReadRequestV2),
    Terminate(TerminateRepr),
    /// Immediate Data / Immediate Data with SE: exactly 8 bytes.
    Immediate(u64),
    AtomicRequest(AtomicRequest),
    AtomicResponse {
        request_id: u32,
        original: u64,
    },
}

/// The meaning of one DDP segment carrying RDMAP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRepr {
    pub version: u8,
    pub opcode: Opcode,
    pub last: bool,
    pub buffer: Buffer,
    pub header: RdmapHeader,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

impl SegmentRepr {
    /// Parses a whole DDP segment (the ULPDU of one FPDU). Returns the meaning and the ULP
    /// payload. Checks, in the order a receiver must (RFC 5040 section 7, RFC 7306 section 8.2):
    /// DDP version and length, RDMAP version and opcode, buffer model and queue number, the
    /// RDMAP header, and the 8-byte length of Immediate Data.
    pub fn parse(ulpdu: &[u8]) -> Result<(SegmentRepr, &[u8])> {
        let packet = ddp::Packet::new_checked(ulpdu)?;
        let ddp = DdpRepr::parse(&packet)?;
        let (version, opcode) = parse_control(ddp.rsvd_ulp)?;
        let info = opcode.info();
        if info.min_version > version {
            return Err(Error::UnknownOpcode(opcode as u8));
        }
        match ddp.buffer {
            Buffer::Tagged { .. } if !info.tagged => {
                return Err(Error::WrongBufferModel(opcode as u8))
            }
            Buffer::Untagged { .. } if info.tagged => {
                return Err(Error::WrongBufferModel(opcode as u8))
            }
            Buffer::Untagged { qn, .. } if qn != info.qn => return Err(Error::BadQueueNumber(qn)),
            _ => {}
        }
        let rest = &ulpdu[packet.header_len()..];
        let (header, payload) = parse_header(opcode, rest, ddp.last)?;
        Ok((
            SegmentRepr {
                version,
                opcode,
                last: ddp.last,
                buffer: ddp.buffer,
                header,
            },
            payload,
        ))
    }

    /// DDP header plus RDMAP header length.
    pub fn header_len(&self) -> usize {
        let ddp = match self.buffer {
            Buffer::Tagged { .. } => ddp::TAGGED_HEADER_LEN,
            Buffer::Untagged { .. } => ddp::UNTAGGED_HEADER_LEN,
        };
        ddp + match &self.header {
            RdmapHeader::None => 0,
            RdmapHeader::ReadRequest(_) => READ_REQUEST_LEN,
            RdmapHeader::ReadRequestV2(_) => READ_REQUEST_V2_LEN,
            RdmapHeader::Terminate(t) => t.buffer_len(),
            RdmapHeader::Immediate(_) => IMMEDIATE_LEN,
            RdmapHeader::AtomicRequest(_) => ATOMIC_REQUEST_LEN,
            RdmapHeader::AtomicResponse { .. } => ATOMIC_RESPONSE_LEN,
        }
    }

    /// Writes the DDP and RDMAP headers into the start of `buf`; the caller appends payload.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.header_len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall);
        }
        let ddp = DdpRepr {
            last: self.last,
            rsvd_ulp: control(self.version, self.opcode),
            buffer: self.buffer,
        };
        let at = ddp.emit(buf)?;
        let h = &mut buf[at..len];
        match &self.header {
            RdmapHeader::None => {}
            RdmapHeader::ReadRequest(r) => {
                h[0..4].copy_from_slice(&r.sink_stag.to_be_bytes());
                h[4..12].copy_from_slice(&r.sink_to.to_be_bytes());
                h[12..16].copy_from_slice(&r.size.to_be_bytes());
                h[16..20].copy_from_slice(&r.src_stag.to_be_bytes());
                h[20..28].copy_from_slice(&r.src_to.to_be_bytes());
            }
            RdmapHeader::ReadRequestV2(r) => {
                h[0..4].copy_from_slice(&r.size.to_be_bytes());
                h[4..8].copy_from_slice(&r.src_stag.to_be_bytes());
                h[8..16].copy_from_slice(&r.src_to.to_be_bytes());
            }
            RdmapHeader::Terminate(t) => {
                t.emit(h)?;
            }
            RdmapHeader::Immediate(v) => h.copy_from_slice(&v.to_be_bytes()),
            RdmapHeader::AtomicRequest(a) => {
                h[0..4].copy_from_slice(&(a.aopcode as u32).to_be_bytes());
                h[4..8].copy_from_slice(&a.request_id.to_be_bytes());
                h[8..12].copy_from_slice(&a.stag.to_be_bytes());
                h[12..20].copy_from_slice(&a.to.to_be_bytes());
                h[20..28].copy_from_slice(&a.add_swap.to_be_bytes());
                h[28..36].copy_from_slice(&a.add_swap_mask.to_be_bytes());
                h[36..44].copy_from_slice(&a.compare.to_be_bytes());
                h[44..52].copy_from_slice(&a.compare_mask.to_be_bytes());
            }
            RdmapHeader::AtomicResponse {
                request_id,
                original,
            } => {
                h[0..4].copy_from_slice(&request_id.to_be_bytes());
                h[4..12].copy_from_slice(&original.to_be_bytes());
            }
        }
        Ok(len)
    }
}

fn parse_header(opcode: Opcode, rest: &[u8], last: bool) -> Result<(RdmapHeader, &[u8])> {
    let need = opcode.info().rdmap_header_len;
    if rest.len() < need {
        return Err(Error::Truncated);
    }
    let (h, payload) = rest.split_at(need);
    let header = match opcode {
        Opcode::ReadRequest => RdmapHeader::ReadRequest(ReadRequest {
            sink_stag: be32(h, 0),
            sink_to: be64(h, 4),
            size: be32(h, 12),
            src_stag: be32(h, 16),
            src_to: be64(h, 20),
        }),
        Opcode::ReadRequestV2 => RdmapHeader::ReadRequestV2(ReadRequestV2 {
            size: be32(h, 0),
            src_stag: be32(h, 4),
            src_to: be64(h, 8),
        }),
        Opcode::Terminate => {
            // The Terminate header runs to the end of the segment.
            let t = TerminateRepr::parse(&TerminatePacket::new_unchecked(rest))?;
            return Ok((RdmapHeader::Terminate(t), &[]));
        }
        Opcode::ImmediateData | Opcode::ImmediateDataSe => {
            // RFC 7306 section 6.3: exactly 8 bytes, in one segment.
            if !payload.is_empty() || !last {
                return Err(Error::ImmediateLength(rest.len()));
            }
            RdmapHeader::Immediate(be64(h, 0))
        }
        Opcode::AtomicRequest => {
            // The upper 28 bits are reserved: set to zero on transmit, ignored on receive.
            let aopcode = AOpCode::try_from((be32(h, 0) & 0xf) as u8)?;
            RdmapHeader::AtomicRequest(AtomicRequest {
                aopcode,
                request_id: be32(h, 4),
                stag: be32(h, 8),
                to: be64(h, 12),
                add_swap: be64(h, 20),
                add_swap_mask: be64(h, 28),
                compare: be64(h, 36),
                compare_mask: be64(h, 44),
            })
        }
        Opcode::AtomicResponse => RdmapHeader::AtomicResponse {
            request_id: be32(h, 0),
            original: be64(h, 4),
        },
        _ => RdmapHeader::None,
    };
    Ok((header, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_octet() {
        assert_eq!(parse_control(0x40), Ok((1, Opcode::Write)));
        assert_eq!(parse_control(0x4a), Ok((1, Opcode::AtomicRequest)));
        assert_eq!(parse_control(0x93), Ok((2, Opcode::SendImmediate)));
        assert_eq!(parse_control(0x53), Err(Error::UnknownOpcode(0x13)));
        assert_eq!(parse_control(0x03), Err(Error::RdmapVersion(0)));
        assert_eq!(parse_control(0x4c), Err(Error::UnknownOpcode(0xc)));
    }
}
