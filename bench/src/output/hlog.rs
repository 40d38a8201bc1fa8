//! HdrHistogram interval logs (the format of HdrHistogram's `HistogramLogWriter`, readable by
//! HistogramLogProcessor, HdrHistogram's plotter and the Rust crate's `IntervalLogIterator`):
//! one interval per result, tagged `mode/transport/op/size`, values in nanoseconds.

use crate::error::{BenchError, Result};
use crate::report::Measurement;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Writes every measurement that has a histogram to `path`; sets each one's `hdr_tag`.
pub fn write(ms: &mut [Measurement], path: &Path, started: SystemTime) -> Result<()> {
    let what = || format!("the histogram log {}", path.display());
    let mut buf = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    {
        let mut w = IntervalLogWriterBuilder::new()
            .add_comment("iwarp-bench latency histograms, values in nanoseconds")
            .add_comment("tag = mode/transport/op/size")
            .with_start_time(started)
            .with_base_time(started)
            .begin_log_with(&mut buf, &mut ser)
            .map_err(|e| BenchError::output(what(), e))?;
        let mut offset = Duration::ZERO;
        for m in ms.iter_mut() {
            let Some(h) = &m.histogram else { continue };
            let tag = m.tag();
            let t = Tag::new(&tag)
                .ok_or_else(|| BenchError::output(what(), format!("bad tag {tag:?}")))?;
            let len = Duration::from_secs_f64(m.seconds.max(0.0));
            w.write_histogram(h, offset, len, Some(t))
                .map_err(|e| BenchError::output(what(), e))?;
            offset += len;
            m.hdr_tag = Some(tag);
        }
    }
    std::fs::write(path, buf).map_err(|e| BenchError::io(format!("writing {}", path.display()), e))
}

/// Reads a log written by [`write()`] back: (tag, histogram) per interval, in order.
pub fn read(path: &Path) -> Result<Vec<(String, Histogram<u64>)>> {
    let what = || format!("the histogram log {}", path.display());
    let bytes = std::fs::read(path)
        .map_err(|e| BenchError::io(format!("reading {}", path.display()), e))?;
    let mut de = Deserializer::new();
    let mut out = Vec::new();
    for entry in IntervalLogIterator::new(&bytes) {
        let entry = entry.map_err(|e| BenchError::output(what(), format!("{e:?}")))?;
        if let LogEntry::Interval(ilh) = entry {
            let tag = ilh
                .tag()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default();
            let raw = base64_decode(ilh.encoded_histogram())
                .ok_or_else(|| BenchError::output(what(), "an interval is not valid base64"))?;
            let h: Histogram<u64> = de
                .deserialize(&mut raw.as_slice())
                .map_err(|e| BenchError::output(what(), format!("{e:?}")))?;
            out.push((tag, h));
        }
    }
    Ok(out)
}

/// Standard base64 (RFC 4648 section 4), as the interval log encodes histograms.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let s = s.trim().trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        for i in 0..n {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_rfc4648_vectors() {
        assert_eq!(base64_decode("Zm9vYmFy").unwrap(), b"foobar");
        assert_eq!(base64_decode("Zm9vYg==").unwrap(), b"foob");
        assert_eq!(base64_decode("Zm9vYmE=").unwrap(), b"fooba");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert!(base64_decode("Zm9v!").is_none());
        assert!(base64_decode("Z").is_none());
    }
}
