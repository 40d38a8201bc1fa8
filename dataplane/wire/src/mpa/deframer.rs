//! A resumable FPDU receiver (RFC 5044 sections 4 and 5).
//!
//! TCP may split the stream anywhere, so the deframer keeps its place between calls, like
//! siw's receive states (header, data, trailer). Feed it whatever arrived; it calls back
//! once per complete FPDU with the ULPDU (markers removed, CRC checked when negotiated). When
//! an FPDU lies whole in one input chunk and no marker falls inside it, the ULPDU handed out
//! is a slice of the input: no copy. Otherwise its octets are gathered in a buffer that grows
//! to the largest FPDU gathered so far (a segment's worth from an aligned sender), not to the
//! largest one it accepts: an idle stream costs no reassembly space up front.
//!
//! Any split of the same stream gives the same ULPDUs (tested with random splits).

use super::{fpdu::MpaParams, pad_len, CRC_LEN, HEADER_LEN, MARKER_INTERVAL, MARKER_LEN};
use crate::crc;
use crate::error::{Error, Result};

/// The receive side of one MPA stream in full operation.
#[derive(Debug)]
pub struct Deframer {
    params: MpaParams,
    max_ulpdu: usize,
    /// Stream position (markers included) of the next input octet.
    pos: u64,
    /// Logical octets (markers excluded) of the FPDU being gathered: length, ULPDU, pad, CRC.
    buf: Vec<u8>,
    have: usize,
    /// Running CRC over the raw octets of this FPDU (markers included), without its CRC field.
    crc: u32,
    /// Stream position of this FPDU's first octet, for marker FPDUPTR checks.
    fpdu_start: u64,
    /// Octets of a marker still to skip, and the marker octets seen so far.
    marker: [u8; MARKER_LEN],
    marker_have: usize,
    /// Whether an FPDU (possibly only its leading marker) has begun.
    started: bool,
    /// A sticky error: after one, the stream is unusable (RFC 5044 section 8).
    failed: Option<Error>,
}

impl Deframer {
    /// `max_ulpdu` bounds what this receiver accepts (an FPDU announcing more is an error);
    /// `pos` is the stream position of the first octet to be fed (0 right after the frames).
    /// With markers it must be a multiple of 4, as for [`super::FpduEmitter::new`].
    pub fn new(params: MpaParams, max_ulpdu: usize, pos: u64) -> Deframer {
        let max_ulpdu = max_ulpdu.min(u16::MAX as usize);
        Deframer {
            params,
            max_ulpdu,
            pos,
            buf: Vec::new(),
            have: 0,
            crc: 0,
            fpdu_start: pos,
            marker: [0; MARKER_LEN],
            marker_have: 0,
            started: false,
            failed: None,
        }
    }

    pub fn params(&self) -> MpaParams {
        self.params
    }

    /// Stream octets consumed so far (markers included).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Whether the deframer is between FPDUs.
    pub fn at_boundary(&self) -> bool {
        !self.started
    }

    /// The logical length of the FPDU being gathered, once its length field is in.
    fn needed(&self) -> Option<usize> {
        if self.have < HEADER_LEN {
            return None;
        }
        let ulpdu = u16::from_be_bytes([self.buf[0], self.buf[1]]) as usize;
        Some(HEADER_LEN + ulpdu + pad_len(ulpdu) + CRC_LEN)
    }

    /// Feeds stream octets. Calls `deliver` with each complete ULPDU, in order. Returns the
    /// octets consumed (all of `input` unless an error stopped it). After an error every
    /// later call returns the same error.
    pub fn feed<F: FnMut(&[u8])>(&mut self, input: &[u8], mut deliver: F) -> Result<usize> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let mut at = 0;
        while at < input.len() {
            match self.step(&input[at..], &mut deliver) {
                Ok(n) => at += n,
                Err(e) => {
                    self.failed = Some(e);
                    return Err(e);
                }
            }
        }
        Ok(at)
    }

    fn marker_due(&self) -> bool {
        self.params.markers && self.pos.is_multiple_of(MARKER_INTERVAL as u64)
    }

    /// Consumes some octets of `input` (at least one); returns how many.
    fn step<F: FnMut(&[u8])>(&mut self, input: &[u8], deliver: &mut F) -> Result<usize> {
        if !self.started {
            if let Some(n) = self.try_whole(input, deliver)? {
                return Ok(n);
            }
            self.started = true;
            self.fpdu_start = self.pos;
            self.crc = 0;
        }
        if self.marker_have > 0 || self.marker_due() {
            return self.take_marker(input);
        }
        // Logical octets up to the next marker, the end of this FPDU, or the input's end.
        let mut want = match self.needed() {
            Some(n) => n - self.have,
            None => HEADER_LEN - self.have,
        };
        if self.params.markers {
            let to_marker = MARKER_INTERVAL - (self.pos % MARKER_INTERVAL as u64) as usize;
            want = want.min(to_marker);
        }
        let n = want.min(input.len());
        let chunk = &input[..n];
        // The CRC covers everything of the FPDU but its CRC field.
        let crc_field_at = self.needed().map(|t| t - CRC_LEN);
        let covered = match crc_field_at {
            Some(c) if self.have + n > c => c.saturating_sub(self.have),
            _ => n,
        };
        self.crc = crc::append(self.crc, &chunk[..covered]);
        // Grown to the FPDU's length once known (checked against `max_ulpdu` as its header
        // completes), to the header's before.
        let end = self.have + n;
        if self.buf.len() < end {
            self.buf
                .resize(self.needed().unwrap_or(HEADER_LEN).max(end), 0);
        }
        self.buf[self.have..end].copy_from_slice(chunk);
        self.have += n;
        self.pos += n as u64;
        if self.have == HEADER_LEN {
            self.check_length()?;
        }
        if let Some(total) = self.needed() {
            if self.have == total {
                self.finish(total, deliver)?;
            }
        }
        Ok(n)
    }

    fn check_length(&self) -> Result<()> {
        let ulpdu = u16::from_be_bytes([self.buf[0], self.buf[1]]);
        if ulpdu as usize > self.max_ulpdu {
            return Err(Error::UlpduTooLong(ulpdu));
        }
        Ok(())
    }

    fn take_marker(&mut self, input: &[u8]) -> Result<usize> {
        let n = (MARKER_LEN - self.marker_have).min(input.len());
        self.marker[self.marker_have..self.marker_have + n].copy_from_slice(&input[..n]);
        // Markers inside an FPDU are covered by its CRC.
        self.crc = crc::append(self.crc, &input[..n]);
        self.marker_have += n;
        self.pos += n as u64;
        if self.marker_have == MARKER_LEN {
            self.marker_have = 0;
            let marker_pos = self.pos - MARKER_LEN as u64;
            let fpduptr = u16::from_be_bytes([self.marker[2], self.marker[3]]);
            if fpduptr as u64 != (marker_pos - self.fpdu_start) & 0xffff {
                return Err(Error::BadMarker);
            }
        }
        Ok(n)
    }

    fn finish<F: FnMut(&[u8])>(&mut self, total: usize, deliver: &mut F) -> Result<()> {
        let crc_at = total - CRC_LEN;
        if self.params.crc {
            let received = crc::from_wire([
                self.buf[crc_at],
                self.buf[crc_at + 1],
                self.buf[crc_at + 2],
                self.buf[crc_at + 3],
            ]);
            if received != self.crc {
                return Err(Error::BadCrc {
                    expected: self.crc,
                    received,
                });
            }
        }
        let ulpdu = u16::from_be_bytes([self.buf[0], self.buf[1]]) as usize;
        self.have = 0;
        self.started = false;
        deliver(&self.buf[HEADER_LEN..HEADER_LEN + ulpdu]);
        Ok(())
    }

    /// The zero-copy path: a whole FPDU at the start of `input` with no marker inside.
    fn try_whole<F: FnMut(&[u8])>(
        &mut self,
        input: &[u8],
        deliver: &mut F,
    ) -> Result<Option<usize>> {
        if input.len() < HEADER_LEN {
            return Ok(None);
        }
        let ulpdu = u16::from_be_bytes([input[0], input[1]]) as usize;
        let total = HEADER_LEN + ulpdu + pad_len(ulpdu) + CRC_LEN;
        if self.params.markers {
            let to_marker = MARKER_INTERVAL - (self.pos % MARKER_INTERVAL as u64) as usize;
            if self.marker_due() || total > to_marker {
                return Ok(None);
            }
        }
        if ulpdu > self.max_ulpdu {
            return Err(Error::UlpduTooLong(ulpdu as u16));
        }
        if input.len() < total {
            return Ok(None);
        }
        let crc_at = total - CRC_LEN;
        if self.params.crc {
            let expected = crc::crc32c(&input[..crc_at]);
            let received = crc::from_wire([
                input[crc_at],
                input[crc_at + 1],
                input[crc_at + 2],
                input[crc_at + 3],
            ]);
            if expected != received {
                return Err(Error::BadCrc { expected, received });
            }
        }
        self.pos += total as u64;
        deliver(&input[HEADER_LEN..HEADER_LEN + ulpdu]);
        Ok(Some(total))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fpdu::FpduEmitter;
    use super::*;

    fn stream(params: MpaParams, sizes: &[usize]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut e = FpduEmitter::new(params, 0);
        let mut out = Vec::new();
        let mut ulpdus = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let u: Vec<u8> = (0..s).map(|j| (i * 31 + j) as u8).collect();
            let mut buf = vec![0u8; e.fpdu_len(s)];
            let n = e.emit(&mut buf, &u[..s / 3], &u[s / 3..]).unwrap();
            out.extend_from_slice(&buf[..n]);
            ulpdus.push(u);
        }
        (out, ulpdus)
    }

    fn collect(d: &mut Deframer, chunks: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let mut got = Vec::new();
        for c in chunks {
            d.feed(c, |u| got.push(u.to_vec()))?;
        }
        Ok(got)
    }

    #[test]
    fn whole_and_bytewise_agree() {
        for params in [
            MpaParams {
                crc: true,
                markers: false,
            },
            MpaParams {
                crc: true,
                markers: true,
            },
            MpaParams {
                crc: false,
                markers: true,
            },
        ] {
            let (s, want) = stream(params, &[0, 1, 5, 600, 1000, 1442, 3, 511, 512, 513]);
            let mut d = Deframer::new(params, 1454, 0);
            assert_eq!(collect(&mut d, &[&s]).unwrap(), want);
            let mut d = Deframer::new(params, 1454, 0);
            let bytes: Vec<&[u8]> = s.chunks(1).collect();
            assert_eq!(collect(&mut d, &bytes).unwrap(), want);
            assert!(d.at_boundary());
        }
    }

    #[test]
    fn bad_crc_is_sticky() {
        let params = MpaParams {
            crc: true,
            markers: false,
        };
        let (mut s, _) = stream(params, &[10, 10]);
        s[5] ^= 1;
        let mut d = Deframer::new(params, 100, 0);
        let e = d.feed(&s, |_| {}).unwrap_err();
        assert!(matches!(e, Error::BadCrc { .. }));
        assert_eq!(e.terminate_cause(), Some(crate::terminate::LLP_CRC_ERROR));
        assert_eq!(d.feed(&s, |_| {}), Err(e));
    }

    #[test]
    fn crc_ignored_when_not_negotiated() {
        let params = MpaParams {
            crc: false,
            markers: false,
        };
        let (mut s, want) = stream(params, &[10]);
        let n = s.len();
        s[n - 1] = 0x77;
        let mut d = Deframer::new(params, 100, 0);
        assert_eq!(collect(&mut d, &[&s]).unwrap(), want);
    }

    #[test]
    fn too_long_ulpdu() {
        let mut d = Deframer::new(MpaParams::default(), 100, 0);
        assert_eq!(
            d.feed(&[0, 101, 0, 0], |_| {}),
            Err(Error::UlpduTooLong(101))
        );
        let mut d = Deframer::new(MpaParams::default(), 100, 0);
        assert_eq!(d.feed(&[0], |_| {}), Ok(1));
        assert_eq!(d.feed(&[101], |_| {}), Err(Error::UlpduTooLong(101)));
    }

    #[test]
    fn bad_marker_pointer() {
        let params = MpaParams {
            crc: false,
            markers: true,
        };
        let (mut s, _) = stream(params, &[1000]);
        s[515] ^= 4; // the marker at 512: FPDUPTR 512 -> 516
        let mut d = Deframer::new(params, 1454, 0);
        assert_eq!(d.feed(&s, |_| {}), Err(Error::BadMarker));
    }
}
