//! Building FPDUs (RFC 5044 section 4) for transmission.
//!
//! ```text
//! | ULPDU_Length (16) | ULPDU ... | PAD (0-3) | CRC (32) |
//! ```
//!
//! With markers negotiated (RFC 5044 section 5) a 4-octet marker sits at every stream
//! position that is a multiple of 512, counted from the first octet of full operation (the
//! first octet after this side's MPA Request or Reply frame). A marker is
//! `| reserved (16, zero) | FPDUPTR (16) |`, FPDUPTR being the number of octets from the
//! start of the FPDU the marker lies in back to the marker. A marker that falls on the first
//! octet of an FPDU, before its ULPDU_Length field, belongs to that FPDU and so carries
//! FPDUPTR 0 (our reading of section 5; a receiver that sees 0 knows the header follows).
//! Markers count neither in ULPDU_Length nor in the pad computation, and the CRC covers them
//! (section 4.3).

use super::{pad_len, CRC_LEN, HEADER_LEN, MARKER_INTERVAL, MARKER_LEN};
use crate::crc;
use crate::error::{Error, Result};

/// What the two sides negotiated for one direction of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MpaParams {
    /// CRC32c present and checked (otherwise the field is sent as zero and ignored).
    pub crc: bool,
    /// Markers every 512 octets.
    pub markers: bool,
}

/// The largest ULPDU whose FPDU fits in `max_fpdu` octets wherever it starts in the stream,
/// chosen so that no pad is needed (ULPDU_Length + ULPDU a multiple of 4).
/// For MSS 1460 without markers this is 1454; siw's 1442 comes from MSS 1448 (timestamps).
pub const fn mulpdu(max_fpdu: usize, markers: bool) -> usize {
    let mut room = max_fpdu;
    if markers {
        // An FPDU of `max_fpdu` octets contains at most ceil(max_fpdu / 512) markers.
        room -= MARKER_LEN * max_fpdu.div_ceil(MARKER_INTERVAL);
    }
    if room < HEADER_LEN + CRC_LEN + 2 {
        return 0;
    }
    room -= CRC_LEN;
    (room / 4) * 4 - HEADER_LEN
}

/// Writes FPDUs into caller buffers and tracks the stream position markers depend on.
#[derive(Debug, Clone)]
pub struct FpduEmitter {
    params: MpaParams,
    /// Stream octets emitted so far in full operation, markers included.
    pos: u64,
}

impl FpduEmitter {
    /// `pos` is the stream position of the next octet (0 right after the MPA frames).
    ///
    /// `pos` must be a multiple of 4 when markers are on. Full operation starts at 0 and every
    /// FPDU and marker is a multiple of 4 octets (RFC 5044 sections 4.1 and 5), so a marker
    /// never splits the CRC field; a misaligned start could put one there, and RFC 5044 does
    /// not say whether such a marker is covered by the CRC (the deframer and this emitter
    /// would disagree).
    pub fn new(params: MpaParams, pos: u64) -> FpduEmitter {
        FpduEmitter { params, pos }
    }

    pub fn params(&self) -> MpaParams {
        self.params
    }

    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Markers inside `len` logical octets starting at stream position `pos`.
    fn markers_in(mut pos: u64, len: usize) -> usize {
        let mut logical = len;
        let mut n = 0;
        while logical > 0 {
            if pos.is_multiple_of(MARKER_INTERVAL as u64) {
                n += 1;
                pos += MARKER_LEN as u64;
            }
            let to_next = MARKER_INTERVAL - (pos % MARKER_INTERVAL as u64) as usize;
            let step = to_next.min(logical);
            logical -= step;
            pos += step as u64;
        }
        n
    }

    /// The exact length of the FPDU for a ULPDU of `ulpdu_len` octets, emitted next.
    pub fn fpdu_len(&self, ulpdu_len: usize) -> usize {
        let logical = HEADER_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN;
        if self.params.markers {
            logical + MARKER_LEN * Self::markers_in(self.pos, logical)
        } else {
            logical
        }
    }

    /// Emits one FPDU whose ULPDU is `header ++ payload` (no copy into a temporary).
    /// Returns the number of octets written at the start of `out`.
    pub fn emit(&mut self, out: &mut [u8], header: &[u8], payload: &[u8]) -> Result<usize> {
        let ulpdu_len = header.len() + payload.len();
        if ulpdu_len > u16::MAX as usize {
            return Err(Error::UlpduTooLong(u16::MAX));
        }
        let total = self.fpdu_len(ulpdu_len);
        if out.len() < total {
            return Err(Error::BufferTooSmall);
        }
        let mut w = Writer {
            out,
            at: 0,
            pos: self.pos,
            start: self.pos,
            markers: self.params.markers,
        };
        w.put(&(ulpdu_len as u16).to_be_bytes());
        w.put(header);
        w.put(payload);
        w.put(&[0u8; 3][..pad_len(ulpdu_len)]);
        w.marker_if_due();
        let value = if self.params.crc {
            crc::to_wire(crc::crc32c(&w.out[..w.at]))
        } else {
            [0; 4]
        };
        w.put(&value);
        debug_assert_eq!(w.at, total);
        self.pos = w.pos;
        Ok(total)
    }
}

impl FpduEmitter {
    /// Like [`FpduEmitter::emit`], but the payload is written in place by `fill`, which gets
    /// exactly `payload_len` octets of `out` (so a sender gathers straight from registered
    /// memory into the frame: one copy fewer). Without markers only: with markers the
    /// payload would not be contiguous, and this returns [`Error::Malformed`].
    pub fn emit_with<F>(
        &mut self,
        out: &mut [u8],
        header: &[u8],
        payload_len: usize,
        fill: F,
    ) -> Result<usize>
    where
        F: FnOnce(&mut [u8]) -> Result<()>,
    {
        if self.params.markers {
            return Err(Error::Malformed);
        }
        let ulpdu_len = header.len() + payload_len;
        if ulpdu_len > u16::MAX as usize {
            return Err(Error::UlpduTooLong(u16::MAX));
        }
        let total = self.fpdu_len(ulpdu_len);
        if out.len() < total {
            return Err(Error::BufferTooSmall);
        }
        out[..HEADER_LEN].copy_from_slice(&(ulpdu_len as u16).to_be_bytes());
        out[HEADER_LEN..HEADER_LEN + header.len()].copy_from_slice(header);
        let body = HEADER_LEN + ulpdu_len;
        fill(&mut out[HEADER_LEN + header.len()..body])?;
        let crc_at = total - CRC_LEN;
        out[body..crc_at].fill(0);
        let value = if self.params.crc {
            crc::to_wire(crc::crc32c(&out[..crc_at]))
        } else {
            [0; 4]
        };
        out[crc_at..total].copy_from_slice(&value);
        self.pos += total as u64;
        Ok(total)
    }
}

struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
    pos: u64,
    start: u64,
    markers: bool,
}

impl Writer<'_> {
    fn marker_if_due(&mut self) {
        if self.markers && self.pos.is_multiple_of(MARKER_INTERVAL as u64) {
            let fpduptr = (self.pos - self.start) as u16;
            self.out[self.at..self.at + 2].copy_from_slice(&[0, 0]);
            self.out[self.at + 2..self.at + 4].copy_from_slice(&fpduptr.to_be_bytes());
            self.at += MARKER_LEN;
            self.pos += MARKER_LEN as u64;
        }
    }

    fn put(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            self.marker_if_due();
            let n = if self.markers {
                let to_next = MARKER_INTERVAL - (self.pos % MARKER_INTERVAL as u64) as usize;
                to_next.min(bytes.len())
            } else {
                bytes.len()
            };
            self.out[self.at..self.at + n].copy_from_slice(&bytes[..n]);
            self.at += n;
            self.pos += n as u64;
            bytes = &bytes[n..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mulpdu_values() {
        assert_eq!(mulpdu(1460, false), 1454);
        assert_eq!(mulpdu(1448, false), 1442);
        // 1460 octets hold at most 3 markers: 1460 - 12 - 4 = 1444, rounded so that
        // ULPDU_Length + ULPDU is a multiple of 4: 1442.
        assert_eq!(mulpdu(1460, true), 1442);
        assert_eq!(mulpdu(4, false), 0);
    }

    #[test]
    fn plain_fpdu_with_pad_and_crc() {
        let mut e = FpduEmitter::new(
            MpaParams {
                crc: true,
                markers: false,
            },
            0,
        );
        let mut out = [0xa5u8; 16];
        // ULPDU of 5 octets: 2 + 5 = 7, pad 1, then CRC: 12 octets.
        let n = e.emit(&mut out, &[1, 2, 3], &[4, 5]).unwrap();
        assert_eq!(n, 12);
        assert_eq!(&out[..8], &[0, 5, 1, 2, 3, 4, 5, 0]);
        assert_eq!(&out[8..12], &crc::to_wire(crc::crc32c(&out[..8])));
        assert_eq!(&out[12..], &[0xa5; 4]);
    }

    #[test]
    fn crc_off_sends_zero() {
        let mut e = FpduEmitter::new(MpaParams::default(), 0);
        let mut out = [0xa5u8; 8];
        assert_eq!(e.emit(&mut out, &[9, 9], &[]).unwrap(), 8);
        assert_eq!(out, [0, 2, 9, 9, 0, 0, 0, 0]);
    }

    // Markers worked out by hand. Stream position 0 is the first octet after the MPA frames.
    // FPDU 1: ULPDU of 1000 octets -> 2 + 1000 + 2 pad + 4 CRC = 1008 logical octets.
    //   A marker at 0 (the FPDU's first octet, FPDUPTR 0), then logical octets 0..508 at
    //   stream 4..512, a marker at 512 (FPDUPTR 512), logical 508..1008 at 516..1016.
    //   FPDU 1 occupies stream 0..1016 (1016 octets, 2 markers).
    // FPDU 2: ULPDU of 6 -> 2 + 6 + 0 + 4 = 12 logical octets at 1016..1024, a marker at
    //   1024 (FPDUPTR 1024 - 1016 = 8), then the last 4 octets (the CRC) at 1028..1032.
    #[test]
    fn markers_by_hand() {
        let mut e = FpduEmitter::new(
            MpaParams {
                crc: true,
                markers: true,
            },
            0,
        );
        let payload = [0x11u8; 1000];
        assert_eq!(e.fpdu_len(1000), 1016);
        let mut out = vec![0xa5u8; 2048];
        let n1 = e.emit(&mut out, &[], &payload).unwrap();
        assert_eq!(n1, 1016);
        assert_eq!(&out[0..4], &[0, 0, 0, 0]); // marker, FPDUPTR 0
        assert_eq!(&out[4..6], &[0x03, 0xe8]); // ULPDU_Length 1000
        assert_eq!(&out[512..516], &[0, 0, 0x02, 0x00]); // marker, FPDUPTR 512
        assert_eq!(&out[1008..1012], &[0x11, 0x11, 0, 0]); // last payload octets, pad
        let crc1 = crc::crc32c(&out[..1012]);
        assert_eq!(&out[1012..1016], &crc::to_wire(crc1));
        assert_eq!(e.position(), 1016);

        let n2 = e.emit(&mut out[n1..], &[1, 2, 3, 4, 5, 6], &[]).unwrap();
        assert_eq!(n2, 16);
        let f2 = &out[n1..n1 + n2];
        assert_eq!(&f2[0..8], &[0, 6, 1, 2, 3, 4, 5, 6]);
        assert_eq!(&f2[8..12], &[0, 0, 0, 8]); // marker at stream 1024, FPDUPTR 8
        assert_eq!(&f2[12..16], &crc::to_wire(crc::crc32c(&f2[..12])));
        assert_eq!(e.position(), 1032);
    }

    #[test]
    fn emit_with_matches_emit() {
        let params = MpaParams {
            crc: true,
            markers: false,
        };
        let (mut a, mut b) = (FpduEmitter::new(params, 0), FpduEmitter::new(params, 0));
        for len in [0usize, 1, 2, 3, 100, 1441] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let (mut x, mut y) = (vec![0xa5u8; 1600], vec![0x5au8; 1600]);
            let n = a.emit(&mut x, &[7, 7, 7], &payload).unwrap();
            let m = b
                .emit_with(&mut y, &[7, 7, 7], len, |dst| {
                    dst.copy_from_slice(&payload);
                    Ok(())
                })
                .unwrap();
            assert_eq!(&x[..n], &y[..m]);
        }
        let mut m = FpduEmitter::new(
            MpaParams {
                crc: true,
                markers: true,
            },
            0,
        );
        assert_eq!(
            m.emit_with(&mut [0u8; 64], &[], 4, |_| Ok(())),
            Err(Error::Malformed)
        );
    }

    #[test]
    fn short_output_is_an_error() {
        let mut e = FpduEmitter::new(MpaParams::default(), 0);
        assert_eq!(
            e.emit(&mut [0u8; 7], &[1, 2], &[]),
            Err(Error::BufferTooSmall)
        );
        assert_eq!(e.position(), 0);
    }
}
