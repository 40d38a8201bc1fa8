//! What is measured: the operations, the modes, the transports, and the parsers for the
//! quantities people type (sizes, durations, rates).

use crate::error::{BenchError, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// A verbs operation measured over iWARP (RFC 5040 section 4 opcodes, RFC 7306 extensions).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// Send / Receive (RFC 5040 section 5.3).
    Send,
    /// Send with Immediate Data (RFC 7306 section 6 / RDMAP version 2).
    SendImm,
    /// RDMA Write; the peer polls the last octet of its buffer (RFC 5040 section 5.1).
    Write,
    /// RDMA Write with Immediate Data (RFC 7306 section 6): the peer gets a completion.
    WriteImm,
    /// RDMA Read Request / Read Response (RFC 5040 section 5.2).
    Read,
    /// Fetch and Add on 8 octets (RFC 7306 section 5).
    FetchAdd,
    /// Compare and Swap on 8 octets (RFC 7306 section 5).
    CmpSwap,
}

impl Op {
    pub const ALL: [Op; 7] = [
        Op::Send,
        Op::SendImm,
        Op::Write,
        Op::WriteImm,
        Op::Read,
        Op::FetchAdd,
        Op::CmpSwap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::SendImm => "send-imm",
            Op::Write => "write",
            Op::WriteImm => "write-imm",
            Op::Read => "read",
            Op::FetchAdd => "fetch-add",
            Op::CmpSwap => "cmp-swap",
        }
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, Op::FetchAdd | Op::CmpSwap)
    }

    /// Why `size` cannot be measured with this operation, if it cannot.
    pub fn refuse_size(self, size: usize) -> Option<String> {
        match self {
            Op::FetchAdd | Op::CmpSwap if size != 8 => Some(format!(
                "{} operates on exactly 8 octets (RFC 7306 section 5): include 8 in --sizes, \
                 it is measured at 8 B only",
                self.name()
            )),
            Op::Read if size == 0 => Some(
                "read of 0 octets moves nothing to measure: the smallest RDMA Read is 1 octet"
                    .into(),
            ),
            Op::Write if size == 0 => Some(
                "write of 0 octets: the write ping-pong has the peer poll the last octet it \
                 receives; use write-imm for a zero-length Write (its completion is the signal)"
                    .into(),
            ),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a transport is exercised.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Ping-pong, one message in flight: round-trip latency percentiles.
    Latency,
    /// A window of messages in flight: Gbit/s and million messages per second.
    Bandwidth,
    /// Messages sent at a set offered rate (--rate); latency counted from each message's
    /// intended send time, so a stall is not hidden (coordinated omission).
    OpenLoop,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Latency => "latency",
            Mode::Bandwidth => "bandwidth",
            Mode::OpenLoop => "open-loop",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The transport under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// iWARP through iwarp-verbs, iwarp-control and iwarpd.
    Verbs,
    /// Kernel TCP sockets on loopback with TCP_NODELAY.
    Tcp,
    /// The same, received by one epoll loop in another process.
    TcpProc,
    /// Two pinned threads exchanging through shared memory (the floor).
    Shm,
    /// Two processes exchanging through a shared mapping.
    ShmProc,
}

impl TransportKind {
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Verbs => "verbs",
            TransportKind::Tcp => "tcp",
            TransportKind::TcpProc => "tcp-proc",
            TransportKind::Shm => "shm",
            TransportKind::ShmProc => "shm-proc",
        }
    }

    pub fn is_baseline(self) -> bool {
        !matches!(self, TransportKind::Verbs)
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One exchange to measure: a verbs operation, or (for the baselines) a plain message of the
/// same size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exchange {
    Message,
    Verb(Op),
}

impl Exchange {
    pub fn name(self) -> &'static str {
        match self {
            Exchange::Message => "message",
            Exchange::Verb(op) => op.name(),
        }
    }
}

/// Parses a size: `64`, `4K`, `4KiB`, `1M`, `1MiB`, `2G` (binary multiples; `B` suffix allowed).
pub fn parse_size(s: &str) -> Result<usize> {
    let t = s.trim();
    let bad = || {
        BenchError::usage(format!(
            "size {s:?}: expected a number of octets such as 64, 4K, 64KiB or 1M"
        ))
    };
    let upper = t.to_ascii_uppercase();
    let stripped = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (num, mult) = match stripped.chars().last() {
        Some('K') => (&stripped[..stripped.len() - 1], 1usize << 10),
        Some('M') => (&stripped[..stripped.len() - 1], 1 << 20),
        Some('G') => (&stripped[..stripped.len() - 1], 1 << 30),
        _ => (stripped, 1),
    };
    let n: usize = num.trim().parse().map_err(|_| bad())?;
    n.checked_mul(mult).ok_or_else(bad)
}

/// The largest message the harness will try (buffers are allocated per size).
pub const MAX_SIZE: usize = 1 << 30;

/// Parses a list of size items: each `N` or a sweep `A..B` (doubling) or `A..B:F` (times F),
/// sorted and deduplicated.
pub fn parse_sizes(items: &[String]) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for item in items {
        if let Some((a, rest)) = item.split_once("..") {
            let (b, f) = match rest.split_once(':') {
                Some((b, f)) => (
                    b,
                    f.trim().parse::<usize>().map_err(|_| {
                        BenchError::usage(format!(
                            "sweep {item:?}: the factor after ':' must be an integer >= 2"
                        ))
                    })?,
                ),
                None => (rest, 2),
            };
            let (a, b) = (parse_size(a)?, parse_size(b)?);
            if f < 2 {
                return Err(BenchError::usage(format!(
                    "sweep {item:?}: the factor after ':' must be at least 2"
                )));
            }
            if a == 0 {
                return Err(BenchError::usage(format!(
                    "sweep {item:?}: a sweep multiplies its start, so it cannot start at 0 \
                     (list 0 separately)"
                )));
            }
            if a > b {
                return Err(BenchError::usage(format!(
                    "sweep {item:?}: start is larger than end"
                )));
            }
            let mut s = a;
            while s <= b {
                out.push(s);
                match s.checked_mul(f) {
                    Some(n) => s = n,
                    None => break,
                }
            }
            if out.last() != Some(&b) {
                out.push(b);
            }
        } else {
            out.push(parse_size(item)?);
        }
    }
    if let Some(&big) = out.iter().find(|&&s| s > MAX_SIZE) {
        return Err(BenchError::usage(format!(
            "size {big} is larger than the harness allows ({MAX_SIZE} octets)"
        )));
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err(BenchError::usage("--sizes is empty"));
    }
    Ok(out)
}

/// Parses a duration: `2s`, `500ms`, `250us`, `1.5s`, `1m`.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    let bad = || {
        BenchError::usage(format!(
            "duration {s:?}: expected a number with a unit, such as 2s, 500ms, 250us or 1m"
        ))
    };
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(bad)?;
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit.trim() {
        "ns" => v / 1e9,
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" | "min" => v * 60.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || secs > 86_400.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a message rate in messages per second: `250000`, `250k`, `1.5M`.
pub fn parse_rate(s: &str) -> Result<f64> {
    let t = s.trim().trim_end_matches("/s");
    let bad = || {
        BenchError::usage(format!(
            "rate {s:?}: expected messages per second, such as 100000, 250k or 1.5M"
        ))
    };
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('m' | 'M') => (&t[..t.len() - 1], 1e6),
        Some('g' | 'G') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let r = v * mult;
    if !r.is_finite() || r <= 0.0 {
        return Err(BenchError::usage(format!(
            "rate {s:?}: the offered rate must be more than 0 messages per second"
        )));
    }
    Ok(r)
}

/// Formats octets the way people read sizes: 64 B, 4 KiB, 1 MiB.
pub fn fmt_size(n: usize) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("64").unwrap(), 64);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4kib").unwrap(), 4096);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("2MB").unwrap(), 2 << 20);
        assert!(parse_size("x").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-1").is_err());
    }

    #[test]
    fn a_sweep_doubles_and_keeps_its_end() {
        let s = parse_sizes(&["8..64".into()]).unwrap();
        assert_eq!(s, vec![8, 16, 32, 64]);
        let s = parse_sizes(&["8..100:4".into(), "8".into()]).unwrap();
        assert_eq!(s, vec![8, 32, 100]);
        assert!(parse_sizes(&["0..8".into()]).is_err());
        assert!(parse_sizes(&["64..8".into()]).is_err());
        assert!(parse_sizes(&["8..64:1".into()]).is_err());
        assert!(parse_sizes(&["4G".into()]).is_err());
    }

    #[test]
    fn durations_and_rates_parse() {
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(parse_rate("250k").unwrap(), 250_000.0);
        assert_eq!(parse_rate("1.5M").unwrap(), 1_500_000.0);
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
    }

    #[test]
    fn atomics_take_eight_octets_and_reads_at_least_one() {
        assert!(Op::FetchAdd.refuse_size(8).is_none());
        assert!(Op::CmpSwap.refuse_size(64).is_some());
        assert!(Op::Read.refuse_size(0).is_some());
        assert!(Op::Read.refuse_size(1).is_none());
        assert!(Op::Send.refuse_size(0).is_none());
        assert!(Op::WriteImm.refuse_size(0).is_none());
        assert_eq!(fmt_size(4096), "4 KiB");
        assert_eq!(fmt_size(100), "100 B");
    }
}
