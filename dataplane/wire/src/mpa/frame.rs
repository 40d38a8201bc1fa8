//! MPA Request and Reply frames (RFC 5044 section 7.1) with the RFC 6581 enhanced data.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |                  Key (16 octets): "MPA ID Req Frame"           |
//! |M|C|R|E|g|V|Res|     Rev       |          PD_Length            |
//! |                  Private Data (PD_Length octets)               |
//! ```
//!
//! E is RFC 6581's enhanced-connection-establishment flag; with it, the private data starts
//! with four octets of [`EnhancedData`]:
//!
//! ```text
//! |P|Z|          IRD              |W|R|          ORD              |
//! ```
//! P = peer-to-peer, Z = a zero-length Send may be the ready-to-receive (RTR) message, and
//! W / R = a zero-length RDMA Write / Read may be (RFC 6581 section 3).
//!
//! V (0x04 in the flags octet) is this implementation's way to ask for RDMAP version 2: the
//! V2 draft leaves negotiation to an MPA extension that was never published, so we use a
//! reserved bit, which RFC 5044 tells receivers to ignore. A peer that does not know it
//! never echoes it, and both sides then stay on version 1. (g, 0x08, is the bit siw uses for
//! its private "GSO" experiment, so we leave it alone.)

use crate::error::{Error, Result};

pub const KEY_REQUEST: &[u8; 16] = b"MPA ID Req Frame";
pub const KEY_REPLY: &[u8; 16] = b"MPA ID Rep Frame";
/// Length of the fixed part: key, flags, revision, PD_Length.
pub const FRAME_HEADER_LEN: usize = 20;

pub const FLAG_MARKERS: u8 = 0x80;
pub const FLAG_CRC: u8 = 0x40;
pub const FLAG_REJECT: u8 = 0x20;
pub const FLAG_ENHANCED: u8 = 0x10;
/// Our RDMAP version 2 request bit (see the module documentation).
pub const FLAG_RDMAP_V2: u8 = 0x04;

/// Request or Reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    Request,
    Reply,
}

/// The RTR message kinds a peer offers or picks (RFC 6581 section 3): the same the
/// application asks for, so one type.
pub use iwarp_abi::app::Rtr;

/// The first four octets of private data when the enhanced flag is set (RFC 6581 section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EnhancedData {
    /// Inbound RDMA Read queue depth, 14 bits.
    pub ird: u16,
    /// Outbound RDMA Read queue depth, 14 bits.
    pub ord: u16,
    pub peer_to_peer: bool,
    pub rtr: Rtr,
}

/// IRD and ORD are 14-bit fields; 0x3fff is the largest value.
pub const IRD_ORD_MAX: u16 = 0x3fff;
const P2P: u16 = 0x8000;
const RTR_SEND: u16 = 0x4000;
const RTR_WRITE: u16 = 0x8000;
const RTR_READ: u16 = 0x4000;

impl EnhancedData {
    pub const LEN: usize = 4;

    pub fn parse(b: &[u8]) -> Result<EnhancedData> {
        if b.len() < Self::LEN {
            return Err(Error::Truncated);
        }
        let ird = u16::from_be_bytes([b[0], b[1]]);
        let ord = u16::from_be_bytes([b[2], b[3]]);
        Ok(EnhancedData {
            ird: ird & IRD_ORD_MAX,
            ord: ord & IRD_ORD_MAX,
            peer_to_peer: ird & P2P != 0,
            rtr: Rtr {
                send: ird & RTR_SEND != 0,
                write: ord & RTR_WRITE != 0,
                read: ord & RTR_READ != 0,
            },
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<usize> {
        if b.len() < Self::LEN {
            return Err(Error::BufferTooSmall);
        }
        let mut ird = self.ird.min(IRD_ORD_MAX);
        let mut ord = self.ord.min(IRD_ORD_MAX);
        if self.peer_to_peer {
            ird |= P2P;
        }
        if self.rtr.send {
            ird |= RTR_SEND;
        }
        if self.rtr.write {
            ord |= RTR_WRITE;
        }
        if self.rtr.read {
            ord |= RTR_READ;
        }
        b[0..2].copy_from_slice(&ird.to_be_bytes());
        b[2..4].copy_from_slice(&ord.to_be_bytes());
        Ok(Self::LEN)
    }
}

/// The meaning of an MPA Request or Reply frame. `private_data` is the ULP's private data:
/// with `enhanced`, the four octets of [`EnhancedData`] that precede it on the wire are
/// parsed into `enhanced` and not repeated here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    pub kind: FrameKind,
    pub markers: bool,
    pub crc: bool,
    pub reject: bool,
    pub rdmap_v2: bool,
    pub revision: u8,
    pub enhanced: Option<EnhancedData>,
    pub private_data: &'a [u8],
}

impl<'a> FrameRepr<'a> {
    /// The total length of the frame in `buf` once its first 20 octets are there, so a
    /// receiver knows how much of the stream belongs to it.
    pub fn frame_len(buf: &[u8]) -> Result<usize> {
        if buf.len() < FRAME_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let pd = u16::from_be_bytes([buf[18], buf[19]]);
        if pd as usize > super::MAX_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong(pd));
        }
        Ok(FRAME_HEADER_LEN + pd as usize)
    }

    /// Parses a complete frame. Unknown reserved flag bits are ignored (RFC 5044 section
    /// 7.1: "set to zero when sent, ignored when received").
    pub fn parse(buf: &'a [u8]) -> Result<FrameRepr<'a>> {
        let len = Self::frame_len(buf)?;
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        let kind = if &buf[0..16] == KEY_REQUEST {
            FrameKind::Request
        } else if &buf[0..16] == KEY_REPLY {
            FrameKind::Reply
        } else {
            return Err(Error::BadMpaKey);
        };
        let flags = buf[16];
        let revision = buf[17];
        if revision != 1 && revision != 2 {
            return Err(Error::BadMpaRevision(revision));
        }
        let mut pd = &buf[FRAME_HEADER_LEN..len];
        // RFC 6581 section 3: the enhanced data exists only in revision 2.
        let enhanced = if revision == 2 && flags & FLAG_ENHANCED != 0 {
            let e = EnhancedData::parse(pd)?;
            pd = &pd[EnhancedData::LEN..];
            Some(e)
        } else {
            None
        };
        Ok(FrameRepr {
            kind,
            markers: flags & FLAG_MARKERS != 0,
            crc: flags & FLAG_CRC != 0,
            reject: flags & FLAG_REJECT != 0,
            rdmap_v2: flags & FLAG_RDMAP_V2 != 0,
            revision,
            enhanced,
            private_data: pd,
        })
    }

    fn pd_len(&self) -> usize {
        self.private_data.len() + self.enhanced.map_or(0, |_| EnhancedData::LEN)
    }

    pub fn buffer_len(&self) -> usize {
        FRAME_HEADER_LEN + self.pd_len()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let pd_len = self.pd_len();
        if pd_len > super::MAX_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong(pd_len as u16));
        }
        if self.revision != 1 && self.revision != 2 {
            return Err(Error::BadMpaRevision(self.revision));
        }
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall);
        }
        buf[0..16].copy_from_slice(match self.kind {
            FrameKind::Request => KEY_REQUEST,
            FrameKind::Reply => KEY_REPLY,
        });
        let mut flags = 0;
        if self.markers {
            flags |= FLAG_MARKERS;
        }
        if self.crc {
            flags |= FLAG_CRC;
        }
        if self.reject {
            flags |= FLAG_REJECT;
        }
        if self.rdmap_v2 {
            flags |= FLAG_RDMAP_V2;
        }
        let mut at = FRAME_HEADER_LEN;
        if let Some(e) = &self.enhanced {
            flags |= FLAG_ENHANCED;
            at += e.emit(&mut buf[at..])?;
        }
        buf[16] = flags;
        buf[17] = self.revision;
        buf[18..20].copy_from_slice(&(pd_len as u16).to_be_bytes());
        buf[at..len].copy_from_slice(self.private_data);
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The MPA Request of siw-rping-crc.pcap (frame 4): revision 2, C and the enhanced flag,
    // IRD = ORD = 1, no RTR, no peer-to-peer.
    static RPING_CRC_REQUEST: [u8; 24] = [
        b'M', b'P', b'A', b' ', b'I', b'D', b' ', b'R', b'e', b'q', b' ', b'F', b'r', b'a', b'm',
        b'e', 0x50, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01,
    ];

    #[test]
    fn deconstruct_request() {
        let f = FrameRepr::parse(&RPING_CRC_REQUEST).unwrap();
        assert_eq!(f.kind, FrameKind::Request);
        assert!(f.crc && !f.markers && !f.reject && !f.rdmap_v2);
        assert_eq!(f.revision, 2);
        assert_eq!(
            f.enhanced,
            Some(EnhancedData {
                ird: 1,
                ord: 1,
                peer_to_peer: false,
                rtr: Rtr::NONE
            })
        );
        assert!(f.private_data.is_empty());
    }

    #[test]
    fn construct_request() {
        let f = FrameRepr::parse(&RPING_CRC_REQUEST).unwrap();
        let mut buf = [0xa5u8; 26];
        assert_eq!(f.emit(&mut buf).unwrap(), 24);
        assert_eq!(&buf[..24], &RPING_CRC_REQUEST);
        assert_eq!(&buf[24..], &[0xa5, 0xa5]);
    }

    #[test]
    fn enhanced_bits() {
        let e = EnhancedData {
            ird: 0x80,
            ord: 0x3fff,
            peer_to_peer: true,
            rtr: Rtr {
                send: true,
                write: false,
                read: true,
            },
        };
        let mut b = [0u8; 4];
        e.emit(&mut b).unwrap();
        assert_eq!(b, [0xc0, 0x80, 0x7f, 0xff]);
        assert_eq!(EnhancedData::parse(&b).unwrap(), e);
    }

    #[test]
    fn revision_1_has_no_enhanced_data() {
        let mut b = RPING_CRC_REQUEST;
        b[17] = 1;
        let f = FrameRepr::parse(&b).unwrap();
        assert_eq!(f.enhanced, None);
        assert_eq!(f.private_data, &[0, 1, 0, 1]);
    }

    #[test]
    fn errors() {
        let mut b = RPING_CRC_REQUEST;
        b[0] = b'X';
        assert_eq!(FrameRepr::parse(&b), Err(Error::BadMpaKey));
        let mut b = RPING_CRC_REQUEST;
        b[17] = 3;
        assert_eq!(FrameRepr::parse(&b), Err(Error::BadMpaRevision(3)));
        let mut b = RPING_CRC_REQUEST;
        b[18] = 0x02;
        b[19] = 0x01;
        assert_eq!(FrameRepr::parse(&b), Err(Error::PrivateDataTooLong(513)));
        assert_eq!(
            FrameRepr::parse(&RPING_CRC_REQUEST[..23]),
            Err(Error::Truncated)
        );
    }
}
