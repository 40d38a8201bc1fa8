//! Typed configuration: one TOML file, every key with a default, and validation whose errors
//! name the key and what is wrong with it (`port.kind: unknown value "foo", expected one of
//! "unix", "tap", "dpdk"`).

pub use iwarp_abi::limits::Limits;
#[cfg(feature = "logging")]
pub mod logging;

use serde::Deserialize;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// A configuration error: the key (dotted path) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: message.into(),
    }
}

/// The error for a value outside a key's choices, listing them.
fn unknown(key: &str, value: &str, allowed: &[&str]) -> ConfigError {
    let list: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
    err(
        key,
        format!(
            "unknown value \"{value}\", expected one of {}",
            list.join(", ")
        ),
    )
}

/// A key whose value is one of a few words: an enum that TOML and the command line spell
/// as those words. Parsing (`FromStr`, and serde through it) refuses any other word with
/// an error that names the key and lists the words.
macro_rules! choice {
    (
        $(#[$meta:meta])*
        $name:ident, $key:literal {
            $($(#[$vmeta:meta])* $variant:ident = $word:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
        #[serde(try_from = "String")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// The configuration key this value is given by.
            pub const KEY: &'static str = $key;
            /// Every value, as the configuration spells it.
            pub const WORDS: &'static [&'static str] = &[$($word),+];

            /// The value as the configuration spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }

        impl FromStr for $name {
            type Err = ConfigError;
            fn from_str(s: &str) -> Result<$name, ConfigError> {
                match s {
                    $($word => Ok($name::$variant),)+
                    _ => Err(unknown($key, s, $name::WORDS)),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(s: String) -> Result<$name, String> {
                // The key comes from the path serde_path_to_error records.
                s.parse().map_err(|e: ConfigError| e.message)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub daemon: Daemon,
    pub port: Port,
    pub tcp: Tcp,
    pub cores: Cores,
    pub pcap: Pcap,
    pub limits: Limits,
    pub shm: Shm,
    pub mpa: Mpa,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Daemon {
    /// The instance name: several daemons can run on one machine.
    pub name: String,
    /// Where sockets, stats and shared-memory names live; default `/tmp/iwarp-<uid>/<name>`.
    pub runtime_dir: Option<PathBuf>,
    pub log_level: LogLevel,
}

choice! {
    /// How much the daemons log.
    LogLevel, "daemon.log_level" {
        Error = "error",
        Warn = "warn",
        Info = "info",
        Debug = "debug",
        Trace = "trace",
    }
}

choice! {
    /// The kind of Ethernet port the daemon runs on.
    PortKind, "port.kind" {
        /// The embedded virtual Ethernet made of Unix datagram sockets: no root, no DPDK.
        Unix = "unix",
        /// A Linux TAP device (root).
        Tap = "tap",
        /// A DPDK port (the `dpdk` feature).
        Dpdk = "dpdk",
    }
}

choice! {
    /// How a poll-mode worker waits when it has nothing to do.
    Polling, "cores.polling" {
        /// Polls without pause.
        Busy = "busy",
        /// Sleeps when idle, until a frame, a doorbell or a TCP timer wakes it.
        Adaptive = "adaptive",
    }
}

choice! {
    /// Whether shared-memory segments use hugepages.
    Hugepages, "shm.hugepages" {
        /// When free ones exist.
        Auto = "auto",
        /// Always: a segment fails without them.
        On = "on",
        /// Never.
        Off = "off",
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Port {
    pub kind: PortKind,
    /// MAC address, "02:00:00:00:00:01" form.
    pub mac: String,
    /// IPv4 address with prefix, "10.77.0.1/24" form.
    pub ipv4: String,
    pub gateway: Option<Ipv4Addr>,
    pub mtu: usize,
    /// The directory of the embedded virtual Ethernet segment (unix port).
    pub segment: PathBuf,
    /// The TAP interface name (tap port).
    pub tap_name: String,
    /// EAL arguments (dpdk port).
    pub eal_args: Vec<String>,
    pub dpdk_port_id: u16,
    /// Let the device compute TCP checksums on transmit and check them on receive, each
    /// where it can (dpdk port; most NICs can, memif cannot). Off: both in software, and
    /// captures show the checksums the wire carries.
    pub checksum_offload: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tcp {
    /// smoltcp's receive and send buffers per connection (1 MiB each by default). The
    /// receive buffer is the window the peer may fill, so it must exceed what the peer keeps
    /// in flight; much more costs speed, not only memory: the buffers are rings the data is
    /// copied through, and a ring larger than the cache is copied through at memory speed
    /// (4 MiB each moved 64 KiB Writes 8–18 % slower over memif than 1 MiB: docs/performance.md).
    pub rx_buffer: usize,
    pub tx_buffer: usize,
    /// The minimum retransmission timeout, in microseconds (far below smoltcp's fixed 1 s).
    pub min_rto_us: u64,
    /// Our TCP segment size, and so the largest FPDU; 0 (the default): `port.mtu` - 40
    /// (1460 on a 1500-octet link, 8960 with 9000-octet jumbo frames). See [`Config::mss`].
    pub mss: usize,
    /// Unacknowledged bytes per connection, at most (the node's own window; whole segments);
    /// 0 (the default): see [`Config::max_inflight`]. In loss recovery, octets the peer has
    /// SACKed do not count against it (RFC 6675's pipe), so up to `tx_buffer` may then be
    /// unacknowledged. smoltcp's maximum RTO is not a key: it
    /// is its fixed 60 s divided by the clock dilation, 60 ms with the default min_rto_us.
    pub max_inflight: usize,
    /// Unacknowledged bytes all of a worker's connections may have together; 0 (the
    /// default): four times `max_inflight` (see [`Config::worker_inflight`]). Each connection
    /// that sent in the last millisecond gets an equal share, never less than four segments
    /// nor more than `max_inflight`. Every octet in flight is held in the sender's ring and
    /// its resend copy until acknowledged: fifty connections each holding `max_inflight` would
    /// hold 25 MiB of them, out of the cache, where one connection's fits it (64 KiB Writes
    /// on one core, docs/performance.md). It bounds what a worker moves per round trip, so it
    /// must cover the link's bandwidth-delay product.
    pub worker_inflight: usize,
    /// A connection whose peer sends nothing this long (milliseconds of real time in which
    /// our poll loop ran; keep-alives go every quarter of it) is given up and its QP enters
    /// Error: how a dead peer is detected.
    pub user_timeout_ms: u64,
    /// Hold the ACK of a lone small segment up to this long (microseconds, real time) so it
    /// rides the answer instead of costing a frame of its own; 0 sends it at once. Out of
    /// order data and a second full segment are still acknowledged at once (RFC 5681). The
    /// default, 5, is about one poll turn and a post: a busy-polling application's answer
    /// comes within it, and an ACK held that long costs a sender nothing (its retransmission
    /// timer is `min_rto_us`).
    pub ack_delay_us: u64,
    /// The congestion controller: "cubic" (RFC 9438, the default, as Linux), "newreno"
    /// (RFC 5681/6582), "dctcp" (RFC 8257, for ECN-marking data-centre links) or "none"
    /// (`max_inflight` alone, for dedicated links).
    pub congestion: Congestion,
    /// How long a peer may hold an ACK (microseconds): nothing is resent on a timeout before
    /// its RTT plus this. Linux delays ACKs 40 ms and more; losses within a flight are
    /// repaired by SACK and duplicate ACKs without waiting for it.
    pub peer_ack_delay_us: u64,
    /// Explicit Congestion Notification (RFC 3168): ask for it in our SYNs, accept it when a
    /// peer's SYN asks, mark our data ECN-capable and answer the peer's congestion echoes.
    /// Left out: on for "dctcp" (which needs the marks), off for the others, whose peers
    /// may sit behind middleboxes that mishandle ECN (see [`Config::ecn`]).
    pub ecn: Option<bool>,
}

choice! {
    /// The congestion controller of every connection.
    Congestion, "tcp.congestion" {
        /// CUBIC (RFC 9438), the default, as Linux.
        Cubic = "cubic",
        /// NewReno (RFC 5681, RFC 6582).
        NewReno = "newreno",
        /// DCTCP (RFC 8257), for ECN-marking data-centre links.
        Dctcp = "dctcp",
        /// The in-flight bound alone, for dedicated links.
        None = "none",
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cores {
    /// Core ids to pin the poll-mode workers to, in worker order; empty: unpinned.
    pub list: Vec<usize>,
    /// Poll-mode workers (1 to 64); 0: one per core in `list` (one when the list is
    /// empty). Several share the port: the Unix port's one socket, a DPDK device's or a
    /// multi-queue TAP interface's queues (one each). Each worker serves its applications end to end: their QPs, regions and
    /// connections, and the frames of those connections. Workers beyond `list` run unpinned.
    pub workers: usize,
    /// "busy" polls without pause; "adaptive" sleeps when idle, until a frame, a doorbell
    /// from an application or control, or a TCP timer wakes it.
    pub polling: Polling,
    /// Adaptive polling on a port without a descriptor to sleep on (DPDK): the longest
    /// timed sleep when idle, in microseconds.
    pub max_idle_sleep_us: u64,
    /// Adaptive polling: idle polls spun before sleeping. 0 suits machines whose cores are
    /// shared (a spinning daemon holds the core its peer or the application needs); a few
    /// hundred save the wake-up where cores are to spare.
    pub idle_spins: u32,
    /// Time each stage of the poll loop (port I/O, TCP, engine, application rings) and
    /// publish the sums in the stats file; costs a clock read per stage per busy turn.
    pub stage_timing: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Pcap {
    /// Write every frame sent and received to this pcap file.
    pub file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Shm {
    /// "auto" uses hugepages when free ones exist, "on" requires them, "off" never uses them.
    pub hugepages: Hugepages,
}

/// Connection setup (iwarp-control).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Mpa {
    /// After a valid MPA Reply, the initiator waits at least this long (milliseconds) before
    /// its QP enters RTS, so its first FPDU cannot reach a responder that has not yet handed
    /// its socket to the QP. Linux siw sends its Reply first, and an FPDU that lands in
    /// between is left unread until more data arrives; when the application then waits for
    /// an answer, both sides hang. A peer slow to reply gets a longer hold: half the time its
    /// Reply took, up to 100 ms. 0 turns the hold off (peers that are ready when they reply:
    /// this stack, hardware RNICs).
    pub rts_delay_ms: u64,
}

impl Default for Mpa {
    fn default() -> Mpa {
        Mpa { rts_delay_ms: 5 }
    }
}

impl Default for Daemon {
    fn default() -> Daemon {
        Daemon {
            name: "iwarp0".into(),
            runtime_dir: None,
            log_level: LogLevel::Info,
        }
    }
}

impl Default for Port {
    fn default() -> Port {
        Port {
            kind: PortKind::Unix,
            mac: "02:00:00:00:00:01".into(),
            ipv4: "10.77.0.1/24".into(),
            gateway: None,
            mtu: 1500,
            segment: std::env::temp_dir().join("iwarp-segment"),
            tap_name: "iwarp0".into(),
            eal_args: Vec::new(),
            dpdk_port_id: 0,
            checksum_offload: true,
        }
    }
}

impl Default for Tcp {
    fn default() -> Tcp {
        Tcp {
            rx_buffer: 1 << 20,
            tx_buffer: 1 << 20,
            min_rto_us: 1000,
            mss: 0,
            max_inflight: 0,
            worker_inflight: 0,
            user_timeout_ms: 2000,
            ack_delay_us: 5,
            congestion: Congestion::Cubic,
            peer_ack_delay_us: 40_000,
            ecn: None,
        }
    }
}

impl Default for Cores {
    fn default() -> Cores {
        Cores {
            list: Vec::new(),
            workers: 0,
            polling: Polling::Adaptive,
            max_idle_sleep_us: 200,
            idle_spins: 0,
            stage_timing: false,
        }
    }
}

impl Default for Shm {
    fn default() -> Shm {
        Shm {
            hugepages: Hugepages::Auto,
        }
    }
}

/// Parses "aa:bb:cc:dd:ee:ff".
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in out.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Parses "a.b.c.d/len".
pub fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (ip, len) = s.split_once('/')?;
    let len: u8 = len.parse().ok()?;
    (len <= 32).then_some(())?;
    Some((ip.parse().ok()?, len))
}

/// The default bound on a connection's unacknowledged octets for segments of `mss`: the
/// larger of 256 KiB and 64 segments, within the send buffer. A bound in octets rather than
/// segments, because with no SACK a timeout resends all of it (smoltcp goes back to the
/// oldest unacknowledged octet); at least 64 segments, because a receiver acknowledges a
/// burst of up to 32 frames at once, and fewer than two bursts in flight leave the sender
/// waiting for each acknowledgement (with 9000-octet frames 256 KiB is 29 segments:
/// measured, each core then sat half idle).
pub fn default_max_inflight(mss: usize, tx_buffer: usize) -> usize {
    (256 << 10).max(64 * mss).min(tx_buffer)
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("", format!("cannot read {}: {e}", path.display())))?;
        Config::parse(&text)
    }

    /// Parses and validates TOML text; unknown keys are errors.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let c: Config =
            serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                // A syntax error has no key yet: its line stands in for it.
                let key = if path != "." {
                    path
                } else {
                    inner
                        .span()
                        .map(|s| text[..s.start].lines().count())
                        .map_or(String::new(), |l| format!("line {l}"))
                };
                err(&key, inner.message().to_string())
            })?;
        c.validate()?;
        Ok(c)
    }

    /// How many poll-mode workers the daemon runs.
    pub fn workers(&self) -> usize {
        match self.cores.workers {
            0 => self.cores.list.len().max(1),
            n => n,
        }
    }

    /// The TCP segment size: `tcp.mss`, or `port.mtu` - 40 (IPv4 and TCP headers) when 0.
    pub fn mss(&self) -> usize {
        match self.tcp.mss {
            0 => self.port.mtu.saturating_sub(40),
            mss => mss,
        }
    }

    /// What one connection may have unacknowledged: `tcp.max_inflight`, or when 0
    /// [`default_max_inflight`].
    pub fn max_inflight(&self) -> usize {
        match self.tcp.max_inflight {
            0 => default_max_inflight(self.mss(), self.tcp.tx_buffer),
            n => n,
        }
    }

    /// What a worker's connections may have unacknowledged together: `tcp.worker_inflight`,
    /// or when 0 four times [`Config::max_inflight`] (1 MiB on a 1500-octet link).
    pub fn worker_inflight(&self) -> usize {
        match self.tcp.worker_inflight {
            0 => 4 * self.max_inflight(),
            n => n,
        }
    }

    /// Whether connections negotiate ECN: `tcp.ecn`, or when left out, whether the
    /// congestion controller is DCTCP (RFC 8257 section 3 assumes ECN on both ends).
    pub fn ecn(&self) -> bool {
        self.tcp
            .ecn
            .unwrap_or(self.tcp.congestion == Congestion::Dctcp)
    }

    /// Checks every value; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mpa.rts_delay_ms > 10_000 {
            return Err(err(
                "mpa.rts_delay_ms",
                format!(
                    "{} is above 10000 (the MPA setup timeout)",
                    self.mpa.rts_delay_ms
                ),
            ));
        }
        if self.daemon.name.is_empty() || self.daemon.name.contains('/') {
            return Err(err("daemon.name", "must be a non-empty name without '/'"));
        }
        if parse_mac(&self.port.mac).is_none() {
            return Err(err(
                "port.mac",
                format!(
                    "\"{}\" is not a MAC address like 02:00:00:00:00:01",
                    self.port.mac
                ),
            ));
        }
        if parse_mac(&self.port.mac).is_some_and(|m| m[0] & 1 != 0) {
            return Err(err(
                "port.mac",
                "a multicast address cannot be a port's address",
            ));
        }
        if parse_cidr(&self.port.ipv4).is_none() {
            return Err(err(
                "port.ipv4",
                format!(
                    "\"{}\" is not an IPv4 address with prefix like 10.77.0.1/24",
                    self.port.ipv4
                ),
            ));
        }
        if !(576..=9216).contains(&self.port.mtu) {
            return Err(err(
                "port.mtu",
                format!("{} is outside 576..=9216", self.port.mtu),
            ));
        }
        if self.port.kind == PortKind::Dpdk && self.port.eal_args.is_empty() {
            return Err(err(
                "port.eal_args",
                "the dpdk port needs EAL arguments (e.g. [\"--vdev=net_memif0\"])",
            ));
        }
        if self.tcp.min_rto_us == 0 || self.tcp.min_rto_us > 1_000_000 {
            return Err(err(
                "tcp.min_rto_us",
                format!("{} is outside 1..=1000000", self.tcp.min_rto_us),
            ));
        }
        if self.tcp.mss != 0 && (self.tcp.mss < 536 || self.tcp.mss + 40 > self.port.mtu) {
            return Err(err(
                "tcp.mss",
                format!(
                    "{} must be at least 536 and fit port.mtu {} with 40 octets of headers \
                     (0: port.mtu - 40)",
                    self.tcp.mss, self.port.mtu
                ),
            ));
        }
        for (key, v) in [
            ("tcp.rx_buffer", self.tcp.rx_buffer),
            ("tcp.tx_buffer", self.tcp.tx_buffer),
        ] {
            if !(64 << 10..=1 << 30).contains(&v) {
                return Err(err(key, format!("{v} is outside 64 KiB..=1 GiB")));
            }
        }
        let inflight = self.max_inflight();
        if inflight < self.mss() || inflight > self.tcp.tx_buffer {
            return Err(err(
                "tcp.max_inflight",
                format!(
                    "{inflight} must be between the segment size ({}) and tcp.tx_buffer ({})",
                    self.mss(),
                    self.tcp.tx_buffer
                ),
            ));
        }
        if self.worker_inflight() < inflight {
            return Err(err(
                "tcp.worker_inflight",
                format!(
                    "{} is below tcp.max_inflight ({inflight}): a lone connection would not \
                     get its window",
                    self.worker_inflight()
                ),
            ));
        }
        if !(10..=3_600_000).contains(&self.tcp.user_timeout_ms) {
            return Err(err(
                "tcp.user_timeout_ms",
                format!("{} is outside 10..=3600000", self.tcp.user_timeout_ms),
            ));
        }
        if self.tcp.peer_ack_delay_us > 1_000_000 {
            return Err(err(
                "tcp.peer_ack_delay_us",
                format!("{} is outside 0..=1000000", self.tcp.peer_ack_delay_us),
            ));
        }
        if self.tcp.ack_delay_us > 1000 {
            return Err(err(
                "tcp.ack_delay_us",
                format!("{} is outside 0..=1000", self.tcp.ack_delay_us),
            ));
        }
        if !(1..=1_000_000).contains(&self.cores.max_idle_sleep_us) {
            return Err(err(
                "cores.max_idle_sleep_us",
                format!("{} is outside 1..=1000000", self.cores.max_idle_sleep_us),
            ));
        }
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some(c) = self.cores.list.iter().find(|&&c| c >= n) {
            return Err(err(
                "cores.list",
                format!("core {c} does not exist on this machine ({n} cores)"),
            ));
        }
        if let Some(c) =
            (1..self.cores.list.len()).find(|&i| self.cores.list[..i].contains(&self.cores.list[i]))
        {
            return Err(err(
                "cores.list",
                format!(
                    "core {} is named twice (one worker per core)",
                    self.cores.list[c]
                ),
            ));
        }
        if self.cores.workers > 64 {
            return Err(err(
                "cores.workers",
                format!("{} is outside 0..=64", self.cores.workers),
            ));
        }
        if self.limits.max_ird > 0x3fff || self.limits.max_ord > 0x3fff {
            return Err(err(
                "limits.max_ird",
                "IRD and ORD are 14-bit values (RFC 6581): at most 16383",
            ));
        }
        if self.limits.max_sge == 0 || self.limits.max_sge > 4 {
            return Err(err(
                "limits.max_sge",
                format!("{} is outside 1..=4", self.limits.max_sge),
            ));
        }
        Ok(())
    }

    /// The runtime directory: configured, or `/tmp/iwarp-<uid>/<name>`.
    pub fn runtime_dir(&self) -> PathBuf {
        self.daemon.runtime_dir.clone().unwrap_or_else(|| {
            let uid = std::env::var("UID")
                .or_else(|_| std::env::var("USER"))
                .unwrap_or_else(|_| "user".into());
            std::env::temp_dir()
                .join(format!("iwarp-{uid}"))
                .join(&self.daemon.name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn a_full_file() {
        let c = Config::parse(
            r#"
            [daemon]
            name = "left"
            [port]
            kind = "unix"
            mac = "02:00:00:00:00:0a"
            ipv4 = "10.77.0.10/24"
            [tcp]
            min_rto_us = 500
            [cores]
            list = [0]
            polling = "busy"
            [pcap]
            file = "/tmp/x.pcap"
            "#,
        )
        .unwrap();
        assert_eq!(c.daemon.name, "left");
        assert_eq!(parse_mac(&c.port.mac), Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(c.tcp.min_rto_us, 500);
        assert_eq!(c.cores.polling, Polling::Busy);
        assert_eq!(c.port.kind, PortKind::Unix);
        assert_eq!(c.tcp.congestion, Congestion::Cubic, "the default");
        assert_eq!(c.pcap.file.as_deref(), Some(Path::new("/tmp/x.pcap")));
    }

    #[test]
    fn choices_are_enums_whose_errors_name_the_key_and_list_the_words() {
        let c = Config::parse(
            "[daemon]\nlog_level = \"debug\"\n[cores]\npolling = \"busy\"\n\
             [shm]\nhugepages = \"off\"\n",
        )
        .unwrap();
        assert_eq!(
            (c.daemon.log_level, c.cores.polling, c.shm.hugepages),
            (LogLevel::Debug, Polling::Busy, Hugepages::Off)
        );
        for (text, expected) in [
            (
                "[daemon]\nlog_level = \"loud\"\n",
                "daemon.log_level: unknown value \"loud\", expected one of \"error\", \"warn\", \
                 \"info\", \"debug\", \"trace\"",
            ),
            (
                "[cores]\npolling = \"lazy\"\n",
                "cores.polling: unknown value \"lazy\", expected one of \"busy\", \"adaptive\"",
            ),
            (
                "[shm]\nhugepages = \"yes\"\n",
                "shm.hugepages: unknown value \"yes\", expected one of \"auto\", \"on\", \"off\"",
            ),
        ] {
            assert_eq!(Config::parse(text).unwrap_err().to_string(), expected);
        }
        // The command line's words go through the same parse and the same message.
        assert_eq!(
            "lazy".parse::<Polling>().unwrap_err(),
            Config::parse("[cores]\npolling = \"lazy\"\n").unwrap_err()
        );
        for w in PortKind::WORDS {
            assert_eq!(w.parse::<PortKind>().unwrap().as_str(), *w);
        }
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key_and_a_syntax_error_its_line() {
        let e = Config::parse("[port]\nmtu = 1500\n[tcp]\nmss = \"big\"\n").unwrap_err();
        assert_eq!(e.key, "tcp.mss", "{e}");
        let e = Config::parse("[port]\nmtu = 1500\nmac =\n").unwrap_err();
        assert_eq!(e.key, "line 3", "{e}");
    }

    #[test]
    fn segment_size_and_inflight_bound_follow_the_mtu_unless_set() {
        let c = Config::default();
        assert_eq!((c.mss(), c.max_inflight()), (1460, 256 << 10));
        let jumbo = Config::parse("[port]\nmtu = 9000\n").unwrap();
        assert_eq!((jumbo.mss(), jumbo.max_inflight()), (8960, 64 * 8960));
        let small = Config::parse("[port]\nmtu = 9000\n[tcp]\ntx_buffer = 131072\n").unwrap();
        assert_eq!(small.max_inflight(), 128 << 10, "within the send buffer");
        let set =
            Config::parse("[port]\nmtu = 9000\n[tcp]\nmss = 1460\nmax_inflight = 65536\n").unwrap();
        assert_eq!((set.mss(), set.max_inflight()), (1460, 64 << 10));
        assert_eq!(c.worker_inflight(), 1 << 20, "four connections' worth");
        assert_eq!(set.worker_inflight(), 256 << 10);
        assert_eq!(
            Config::parse("[tcp]\nmss = 1461\n").unwrap_err().key,
            "tcp.mss",
            "beyond port.mtu - 40"
        );
    }

    #[test]
    fn workers_default_to_one_per_listed_core() {
        assert_eq!(Config::default().workers(), 1);
        assert_eq!(Config::parse("[cores]\nlist = [0]\n").unwrap().workers(), 1);
        let c = Config::parse("[cores]\nworkers = 3\n").unwrap();
        assert_eq!(
            (c.workers(), c.cores.list.len()),
            (3, 0),
            "unpinned workers"
        );
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::parse("[port]\nkind = \"foo\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "port.kind: unknown value \"foo\", expected one of \"unix\", \"tap\", \"dpdk\""
        );
        assert_eq!(
            Config::parse("[port]\nmac = \"zz\"\n").unwrap_err().key,
            "port.mac"
        );
        assert_eq!(
            Config::parse("[port]\nipv4 = \"10.0.0.1\"\n")
                .unwrap_err()
                .key,
            "port.ipv4"
        );
        assert_eq!(
            Config::parse("[tcp]\nmin_rto_us = 0\n").unwrap_err().key,
            "tcp.min_rto_us"
        );
        assert_eq!(
            Config::parse("[cores]\nlist = [4096]\n").unwrap_err().key,
            "cores.list"
        );
        assert_eq!(
            Config::parse("[port]\nkind = \"dpdk\"\n").unwrap_err().key,
            "port.eal_args"
        );
        assert_eq!(
            Config::parse("[cores]\nlist = [0, 0]\n").unwrap_err().key,
            "cores.list"
        );
        assert_eq!(
            Config::parse("[tcp]\nack_delay_us = 5000\n")
                .unwrap_err()
                .key,
            "tcp.ack_delay_us"
        );
        assert_eq!(
            Config::parse("[cores]\nworkers = 65\n").unwrap_err().key,
            "cores.workers"
        );

        assert_eq!(
            Config::parse("[limits]\nmax_ird = 20000\n")
                .unwrap_err()
                .key,
            "limits.max_ird"
        );
        assert_eq!(
            Config::parse("[tcp]\nmax_inflight = 100\n")
                .unwrap_err()
                .key,
            "tcp.max_inflight"
        );
        assert_eq!(
            Config::parse("[tcp]\nworker_inflight = 65536\n")
                .unwrap_err()
                .key,
            "tcp.worker_inflight"
        );
        assert_eq!(
            Config::parse("[tcp]\nuser_timeout_ms = 1\n")
                .unwrap_err()
                .key,
            "tcp.user_timeout_ms"
        );
        assert_eq!(
            Config::parse("[cores]\nmax_idle_sleep_us = 0\n")
                .unwrap_err()
                .key,
            "cores.max_idle_sleep_us"
        );
        let e = Config::parse("[port]\nbogus = 1\n").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn ecn_follows_dctcp_unless_the_file_says() {
        let on = |text: &str| Config::parse(text).unwrap().ecn();
        assert!(!on(""), "cubic, the default: off");
        assert!(on("[tcp]\ncongestion = \"dctcp\"\n"));
        assert!(!on("[tcp]\ncongestion = \"dctcp\"\necn = false\n"));
        assert!(on("[tcp]\ncongestion = \"newreno\"\necn = true\n"));
        assert!(Config::parse("[tcp]\necn = \"yes\"\n").is_err());
    }

    #[test]
    fn the_congestion_controller_is_one_of_four_and_an_unknown_one_is_refused() {
        for (name, alg) in [
            ("cubic", Congestion::Cubic),
            ("newreno", Congestion::NewReno),
            ("dctcp", Congestion::Dctcp),
            ("none", Congestion::None),
        ] {
            let c = Config::parse(&format!("[tcp]\ncongestion = \"{name}\"\n")).unwrap();
            assert_eq!(c.tcp.congestion, alg);
        }
        let e = Config::parse("[tcp]\ncongestion = \"bbr\"\n").unwrap_err();
        assert_eq!(e.key, "tcp.congestion");
        assert!(e.message.contains("\"bbr\""), "{}", e.message);
        assert_eq!(
            Config::parse("[tcp]\npeer_ack_delay_us = 2000000\n")
                .unwrap_err()
                .key,
            "tcp.peer_ack_delay_us"
        );
    }
}
