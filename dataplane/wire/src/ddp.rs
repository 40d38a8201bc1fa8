//! DDP segment headers (RFC 5041 section 4) and message segmentation (RFC 5041 section 5).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |T|L| Rsvd  | DV|   RsvdULP     |  STag (tagged) / RsvdULP (untagged) ...
//! ```
//!
//! Tagged header (14 bytes): control, RsvdULP (the RDMAP control byte), STag, TO (64 bits).
//! Untagged header (18 bytes): control, RsvdULP, a 32-bit RsvdULP (RDMAP's Invalidate STag),
//! QN, MSN, MO.
//!
//! Contract (smoltcp style): after [`Packet::check_len`] succeeds no accessor panics;
//! [`DdpRepr::parse`] never panics; [`DdpRepr::emit`] never panics and reports a short buffer.
//!
//! Public API (what the engine codes against):
//!
//! ```text
//! Packet<T: AsRef<[u8]>>      new_unchecked / new_checked / check_len, tagged() last() version()
//!                             rsvd_ulp() stag() to() rsvd_ulp2() qn() msn() mo() header_len()
//!                             payload(); setters on T: AsMut<[u8]>
//! DdpRepr { last, rsvd_ulp, buffer: Buffer }   parse(&Packet) / buffer_len() / emit(&mut [u8])
//! Buffer::Tagged { stag, to } | Buffer::Untagged { qn, msn, mo, rsvd_ulp }
//! Segmenter::new(message_len, max_payload) -> Iterator<Item = SegmentPlan { offset, len, last }>
//! Reassembly::accept(mo, len, last) -> Result<Option<message_len>>   (MO continuity check)
//! ```
//!
//! Segmentation (RFC 5041 section 5.1): a tagged segment's TO is the message's base TO plus
//! [`SegmentPlan::offset`]; an untagged segment's MO is the offset itself; every segment of a
//! message carries the same STag (tagged) or the same QN and MSN (untagged); only the last has
//! the L bit. A zero-length message is one segment with no payload and L set (section 5.1
//! allows zero-length messages; they still consume an untagged buffer).

use crate::error::{Error, Result};

/// The DDP version this implementation speaks (RFC 5041 section 4.2, DV = 01b).
pub const DDP_VERSION: u8 = 1;
/// Length of a tagged DDP header.
pub const TAGGED_HEADER_LEN: usize = 14;
/// Length of an untagged DDP header.
pub const UNTAGGED_HEADER_LEN: usize = 18;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const CONTROL: usize = 0;
    pub const RSVD_ULP: usize = 1;
    pub const STAG: Field = 2..6;
    pub const TO: Field = 6..14;
    pub const RSVD_ULP2: Field = 2..6;
    pub const QN: Field = 6..10;
    pub const MSN: Field = 10..14;
    pub const MO: Field = 14..18;
}

const FLAG_TAGGED: u8 = 0x80;
const FLAG_LAST: u8 = 0x40;
const MASK_RSVD: u8 = 0x3c;
const MASK_VERSION: u8 = 0x03;

/// A read/write view of one DDP segment (header and payload).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Ensures the header the T bit announces is present.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < 2 || b.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u32_at(&self, f: core::ops::Range<usize>) -> u32 {
        let b = &self.buffer.as_ref()[f];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    pub fn tagged(&self) -> bool {
        self.buffer.as_ref()[field::CONTROL] & FLAG_TAGGED != 0
    }
    pub fn last(&self) -> bool {
        self.buffer.as_ref()[field::CONTROL] & FLAG_LAST != 0
    }
    pub fn reserved(&self) -> u8 {
        (self.buffer.as_ref()[field::CONTROL] & MASK_RSVD) >> 2
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::CONTROL] & MASK_VERSION
    }
    /// The first RsvdULP octet; RDMAP puts its control field here.
    pub fn rsvd_ulp(&self) -> u8 {
        self.buffer.as_ref()[field::RSVD_ULP]
    }
    /// The header length implied by the T bit.
    pub fn header_len(&self) -> usize {
        match self.buffer.as_ref().first() {
            Some(c) if c & FLAG_TAGGED != 0 => TAGGED_HEADER_LEN,
            _ => UNTAGGED_HEADER_LEN,
        }
    }
    pub fn stag(&self) -> u32 {
        self.u32_at(field::STAG)
    }
    pub fn to(&self) -> u64 {
        let b = &self.buffer.as_ref()[field::TO];
        u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }
    /// The untagged header's 32-bit RsvdULP field (RDMAP: Invalidate STag).
    pub fn rsvd_ulp2(&self) -> u32 {
        self.u32_at(field::RSVD_ULP2)
    }
    pub fn qn(&self) -> u32 {
        self.u32_at(field::QN)
    }
    pub fn msn(&self) -> u32 {
        self.u32_at(field::MSN)
    }
    pub fn mo(&self) -> u32 {
        self.u32_at(field::MO)
    }
    /// Everything after the DDP header (RDMAP header and ULP payload).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u32(&mut self, f: core::ops::Range<usize>, v: u32) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_control(&mut self, tagged: bool, last: bool) {
        let mut c = DDP_VERSION;
        if tagged {
            c |= FLAG_TAGGED;
        }
        if last {
            c |= FLAG_LAST;
        }
        self.buffer.as_mut()[field::CONTROL] = c;
    }
    pub fn set_rsvd_ulp(&mut self, v: u8) {
        self.buffer.as_mut()[field::RSVD_ULP] = v;
    }
    pub fn set_stag(&mut self, v: u32) {
        self.set_u32(field::STAG, v)
    }
    pub fn set_to(&mut self, v: u64) {
        self.buffer.as_mut()[field::TO].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_rsvd_ulp2(&mut self, v: u32) {
        self.set_u32(field::RSVD_ULP2, v)
    }
    pub fn set_qn(&mut self, v: u32) {
        self.set_u32(field::QN, v)
    }
    pub fn set_msn(&mut self, v: u32) {
        self.set_u32(field::MSN, v)
    }
    pub fn set_mo(&mut self, v: u32) {
        self.set_u32(field::MO, v)
    }
}

/// Where a segment's payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// Tagged buffer model: placed at `to` within the buffer named by `stag`.
    Tagged { stag: u32, to: u64 },
    /// Untagged buffer model: message `msn` on queue `qn`, at message offset `mo`.
    /// `rsvd_ulp` is the 32-bit RsvdULP field (RDMAP's Invalidate STag).
    Untagged {
        qn: u32,
        msn: u32,
        mo: u32,
        rsvd_ulp: u32,
    },
}

/// The meaning of a DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpRepr {
    pub last: bool,
    /// The RsvdULP octet (RDMAP control), uninterpreted here.
    pub rsvd_ulp: u8,
    pub buffer: Buffer,
}

impl DdpRepr {
    /// Parses a DDP header. A version other than 1 is an error naming the buffer model so the
    /// receiver can pick the right Terminate (RFC 5041 section 7.2). The reserved bits are
    /// ignored on receive (RFC 5041 section 4.2: "set to zero on transmit, not checked").
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<DdpRepr> {
        packet.check_len()?;
        if packet.version() != DDP_VERSION {
            return Err(Error::DdpVersion {
                version: packet.version(),
                tagged: packet.tagged(),
            });
        }
        let buffer = if packet.tagged() {
            Buffer::Tagged {
                stag: packet.stag(),
                to: packet.to(),
            }
        } else {
            Buffer::Untagged {
                qn: packet.qn(),
                msn: packet.msn(),
                mo: packet.mo(),
                rsvd_ulp: packet.rsvd_ulp2(),
            }
        };
        Ok(DdpRepr {
            last: packet.last(),
            rsvd_ulp: packet.rsvd_ulp(),
            buffer,
        })
    }

    pub fn buffer_len(&self) -> usize {
        match self.buffer {
            Buffer::Tagged { .. } => TAGGED_HEADER_LEN,
            Buffer::Untagged { .. } => UNTAGGED_HEADER_LEN,
        }
    }

    /// Writes the header into the start of `buf`; returns the header length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall);
        }
        let mut p = Packet::new_unchecked(&mut buf[..len]);
        match self.buffer {
            Buffer::Tagged { stag, to } => {
                p.set_control(true, self.last);
                p.set_stag(stag);
                p.set_to(to);
            }
            Buffer::Untagged {
                qn,
                msn,
                mo,
                rsvd_ulp,
            } => {
                p.set_control(false, self.last);
                p.set_rsvd_ulp2(rsvd_ulp);
                p.set_qn(qn);
                p.set_msn(msn);
                p.set_mo(mo);
            }
        }
        p.set_rsvd_ulp(self.rsvd_ulp);
        Ok(len)
    }
}

/// One DDP segment of a message: `len` payload bytes starting at message offset `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentPlan {
    pub offset: u32,
    pub len: u32,
    pub last: bool,
}

/// Splits a message of `message_len` bytes into DDP segments whose payload is at most
/// `max_payload` bytes (the MULPDU less the DDP and RDMAP headers; RFC 5041 section 5.1).
/// A zero-length message is one empty segment with the L bit set.
#[derive(Debug, Clone)]
pub struct Segmenter {
    message_len: u32,
    max_payload: u32,
    next: u32,
    done: bool,
}

impl Segmenter {
    /// `max_payload` of zero would never make progress; it is treated as one byte.
    pub fn new(message_len: u32, max_payload: u32) -> Segmenter {
        Segmenter {
            message_len,
            max_payload: max_payload.max(1),
            next: 0,
            done: false,
        }
    }

    /// How many segments the message takes.
    pub fn count(message_len: u32, max_payload: u32) -> u32 {
        let m = max_payload.max(1);
        if message_len == 0 {
            1
        } else {
            message_len.div_ceil(m)
        }
    }
}

impl Iterator for Segmenter {
    type Item = SegmentPlan;
    fn next(&mut self) -> Option<SegmentPlan> {
        if self.done {
            return None;
        }
        let remaining = self.message_len - self.next;
        let len = remaining.min(self.max_payload);
        let plan = SegmentPlan {
            offset: self.next,
            len,
            last: len == remaining,
        };
        self.next += len;
        self.done = plan.last;
        Some(plan)
    }
}

/// Receive-side bookkeeping for one untagged message: TCP delivers DDP segments in order,
/// so each segment must continue exactly where the previous one ended (RFC 5041 section 5.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reassembly {
    next_mo: u32,
}

impl Reassembly {
    pub fn new() -> Reassembly {
        Reassembly { next_mo: 0 }
    }

    /// Accepts a segment at `mo` of `len` bytes. Returns the message length when `last`.
    /// An out-of-sequence offset (or a message running past 2^32 octets) is
    /// [`Error::BadMessageOffset`], whose Terminate is "Invalid MO" (RFC 5041 section 7.2,
    /// DDP untagged code 4). On error the state is left unchanged.
    pub fn accept(&mut self, mo: u32, len: u32, last: bool) -> Result<Option<u32>> {
        let bad = Error::BadMessageOffset {
            expected: self.next_mo,
            received: mo,
        };
        if mo != self.next_mo {
            return Err(bad);
        }
        self.next_mo = mo.checked_add(len).ok_or(bad)?;
        if last {
            let total = self.next_mo;
            self.next_mo = 0;
            Ok(Some(total))
        } else {
            Ok(None)
        }
    }

    /// The number of bytes received so far of the message in progress.
    pub fn received(&self) -> u32 {
        self.next_mo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 5041 section 4.3 figure (tagged buffer DDP header): T=1, L=1, DV=01, then RsvdULP,
    // STag, TO — here STag 0x11223344, TO 0x0102030405060708, RDMAP control 0x40 (RV=1, Write).
    static TAGGED: [u8; 14] = [
        0xc1, 0x40, 0x11, 0x22, 0x33, 0x44, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
    ];
    // RFC 5041 section 4.4 figure (untagged): T=0, L=0, DV=01, RsvdULP 0x43 (Send),
    // RsvdULP2 0, QN 0, MSN 5, MO 0x1000.
    static UNTAGGED: [u8; 18] = [
        0x01, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0x10, 0,
    ];

    #[test]
    fn deconstruct_tagged() {
        let p = Packet::new_checked(&TAGGED[..]).unwrap();
        assert!(p.tagged() && p.last());
        assert_eq!(p.version(), 1);
        assert_eq!(p.rsvd_ulp(), 0x40);
        assert_eq!(p.stag(), 0x1122_3344);
        assert_eq!(p.to(), 0x0102_0304_0506_0708);
        assert!(p.payload().is_empty());
    }

    #[test]
    fn construct_tagged() {
        let repr = DdpRepr {
            last: true,
            rsvd_ulp: 0x40,
            buffer: Buffer::Tagged {
                stag: 0x1122_3344,
                to: 0x0102_0304_0506_0708,
            },
        };
        let mut buf = [0xa5u8; 16];
        assert_eq!(repr.emit(&mut buf).unwrap(), 14);
        assert_eq!(&buf[..14], &TAGGED);
        assert_eq!(&buf[14..], &[0xa5, 0xa5]);
        assert_eq!(
            DdpRepr::parse(&Packet::new_unchecked(&buf[..])).unwrap(),
            repr
        );
    }

    #[test]
    fn untagged_roundtrip() {
        let p = Packet::new_checked(&UNTAGGED[..]).unwrap();
        let repr = DdpRepr::parse(&p).unwrap();
        assert_eq!(
            repr.buffer,
            Buffer::Untagged {
                qn: 0,
                msn: 5,
                mo: 0x1000,
                rsvd_ulp: 0
            }
        );
        assert!(!repr.last);
        let mut buf = [0xa5u8; 18];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, UNTAGGED);
    }

    #[test]
    fn bad_version_names_buffer_model() {
        let mut b = TAGGED;
        b[0] = 0xc2;
        assert_eq!(
            DdpRepr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::DdpVersion {
                version: 2,
                tagged: true
            })
        );
        let mut u = UNTAGGED;
        u[0] = 0x00;
        let e = DdpRepr::parse(&Packet::new_unchecked(&u[..])).unwrap_err();
        assert_eq!(
            e.terminate_cause(),
            Some(crate::terminate::DDP_UNTAGGED_INVALID_DDP_VERSION)
        );
    }

    #[test]
    fn short_buffers() {
        for n in 0..14 {
            assert_eq!(
                Packet::new_checked(&TAGGED[..n]).unwrap_err(),
                Error::Truncated
            );
        }
        for n in 0..18 {
            assert!(Packet::new_checked(&UNTAGGED[..n]).is_err());
        }
        assert_eq!(
            DdpRepr {
                last: false,
                rsvd_ulp: 0,
                buffer: Buffer::Tagged { stag: 0, to: 0 }
            }
            .emit(&mut [0u8; 13]),
            Err(Error::BufferTooSmall)
        );
    }

    #[test]
    fn zero_length_message_is_one_last_segment() {
        let v: Vec<_> = Segmenter::new(0, 100).collect();
        assert_eq!(
            v,
            vec![SegmentPlan {
                offset: 0,
                len: 0,
                last: true
            }]
        );
    }

    #[test]
    fn reassembly_rejects_gap() {
        let mut r = Reassembly::new();
        assert_eq!(r.accept(0, 10, false), Ok(None));
        let e = r.accept(11, 10, true).unwrap_err();
        assert_eq!(
            e,
            Error::BadMessageOffset {
                expected: 10,
                received: 11
            }
        );
        assert_eq!(
            e.terminate_cause(),
            Some(crate::terminate::DDP_UNTAGGED_INVALID_MO)
        );
        // The message in progress is still intact and can continue.
        assert_eq!(r.accept(10, 5, true), Ok(Some(15)));
    }
}
