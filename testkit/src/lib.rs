//! What the process-level tests share: starting `iwarpd` and `iwarp-control` from the
//! workspace's target directory as child processes, and stopping them so that they clean up;
//! decoding their captures with tshark.
//! A dev-dependency only; nothing here ships. For tests of `iwarp-control` alone,
//! [`fake_daemon`] plays `iwarpd` on the command ring.

pub mod bottleneck;
pub mod siw;

use iwarp_abi::command::{reply_status, CloseReason, Command, Upcall};
use iwarp_abi::daemon_shm::DaemonSide;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a process may take to show its runtime files.
pub const START: Duration = Duration::from_secs(20);

/// For the tests that need root (TAP, bridges, DPDK with hugepages): true when running as
/// root; otherwise says on stderr that `test` is skipped, and why.
pub fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("{test}: skipped (needs root)");
    }
    root
}

/// Raises this process's soft limit on open files to its hard limit, which the daemons it
/// starts inherit, and returns the limit now in force. An ordinary user's soft limit is
/// often 1024, fewer than a test holding hundreds of QPs needs (each QP's rings are
/// shared-memory files, open in the application, the daemon and control).
pub fn raise_open_files_limit() -> u64 {
    rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0)
}

/// The EAL arguments that say where DPDK's memory comes from, for a process that needs
/// `megabytes` of it: `--in-memory` on hugepages when enough 2 MiB pages are free, else
/// ordinary memory (`--no-huge`), saying so on stderr for `test`. A machine set up without
/// hugepages (the demo's set-up allocates none) then runs the DPDK tests all the same.
/// DPDK 22.11 refuses `--in-memory` beside `--no-huge`; `--no-shconf` takes its place there,
/// so no run shares or leaves a configuration in `/var/run/dpdk`.
pub fn eal_memory_args(test: &str, megabytes: usize) -> Vec<String> {
    let free_mb = iwarp_abi::segment::free_hugepages() * 2;
    let mut args = if free_mb >= megabytes {
        vec!["--in-memory".to_string()]
    } else {
        eprintln!(
            "{test}: {free_mb} MiB of hugepages free, {megabytes} needed: \
             DPDK on ordinary memory (--no-huge)"
        );
        vec!["--no-huge".to_string(), "--no-shconf".to_string()]
    };
    args.extend(["-m".to_string(), megabytes.to_string()]);
    args
}

/// A child process stopped on drop: SIGTERM first, so it removes its segments and runtime
/// files, SIGKILL if it has not exited within seconds.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `target/<profile>`, where cargo puts the workspace's binaries and examples (the running
/// test is `target/<profile>/deps/<name>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// A workspace binary (`iwarpd`, `iwarp-control`). `cargo test --workspace` builds every
/// binary before the tests run; a lone `cargo test -p` may not, so both are built here, once
/// per test process, into this target directory and profile when one is missing (an existing
/// one is used as it is: rebuilding under tests that run it would race them).
pub fn binary(name: &str) -> PathBuf {
    static BUILD: std::sync::Once = std::sync::Once::new();
    let dir = target_dir();
    let p = dir.join(name);
    BUILD.call_once(|| {
        if ["iwarpd", "iwarp-control"]
            .iter()
            .all(|b| dir.join(b).exists())
        {
            return;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Process::new(cargo);
        cmd.args(["build", "-p", "iwarpd", "-p", "iwarp-control"])
            .arg("--target-dir")
            .arg(dir.parent().expect("target/<profile>"));
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("running cargo build");
        assert!(st.success(), "building iwarpd and iwarp-control");
    });
    assert!(p.exists(), "{} was not built", p.display());
    p
}

/// Waits until `path` exists, or panics naming it.
pub fn wait_for(path: &Path) {
    let t = Instant::now();
    while !path.exists() {
        assert!(t.elapsed() < START, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The value of `key` in an `iwarpd` stats text (`key=value` pairs, one line per core, as
/// `<runtime>/stats` holds them): the first core's that has it.
pub fn stat(text: &str, key: &str) -> Option<u64> {
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// Tests run in parallel in one process: daemon and segment names carry a sequence.
pub fn unique(tag: &str) -> String {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("t-{tag}-{}-{n}", std::process::id())
}

/// `iwarpd` number `n` on the embedded Unix-socket Ethernet of `dir` (segment `dir/eth`),
/// MAC 02:00:00:00:`subnet`:0`n`, IPv4 10.`subnet`.0.`n`/24, runtime directory
/// `dir/<name>`; started once its daemon segment exists.
pub fn start_daemon(dir: &Path, name: &str, n: u8, subnet: u8, extra: &[&str]) -> Proc {
    let runtime = dir.join(name);
    let daemon = Proc(
        Process::new(binary("iwarpd"))
            .args(["--name", &unique(name)])
            .args(["--port", "unix", "--polling", "adaptive"])
            .args(extra)
            .arg("--segment")
            .arg(dir.join("eth"))
            .args(["--mac", &format!("02:00:00:00:{subnet:02x}:0{n}")])
            .args(["--ip", &format!("10.{subnet}.0.{n}/24")])
            .arg("--runtime-dir")
            .arg(&runtime)
            .spawn()
            .expect("spawn iwarpd"),
    );
    wait_for(&runtime.join("daemon.shm"));
    daemon
}

/// `iwarp-control` on `runtime`, started once its socket exists (a stale one is removed
/// first).
pub fn start_control(runtime: &Path) -> Proc {
    let _ = std::fs::remove_file(runtime.join("control.sock"));
    let control = Proc(
        Process::new(binary("iwarp-control"))
            .arg("--runtime-dir")
            .arg(runtime)
            .spawn()
            .expect("spawn iwarp-control"),
    );
    wait_for(&runtime.join("control.sock"));
    control
}

/// An endpoint on the embedded Unix-socket Ethernet: [`start_daemon`]'s `iwarpd` and its
/// `iwarp-control`, in `runtime`. Dropped, control stops first, then the daemon.
pub struct Endpoint {
    pub runtime: PathBuf,
    pub control: Proc,
    pub daemon: Proc,
}

impl Endpoint {
    /// `iwarpd` number `n` of `dir` on subnet `subnet` with `extra` arguments (see
    /// [`start_daemon`]), then its control, runtime directory `dir/<name>`.
    pub fn start(dir: &Path, name: &str, n: u8, subnet: u8, extra: &[&str]) -> Endpoint {
        let daemon = start_daemon(dir, name, n, subnet, extra);
        let runtime = dir.join(name);
        Endpoint {
            control: start_control(&runtime),
            runtime,
            daemon,
        }
    }
}

/// Answers every command OK, forwards it to the test, and plays TCP on loopback: a connect
/// to a listened port becomes an incoming connection there, bytes sent on one end arrive at
/// the other, a connect to any other port is refused.
pub fn fake_daemon(mut d: DaemonSide, tx: mpsc::Sender<Command>, stop: mpsc::Receiver<()>) {
    let mut listening = Vec::new();
    let mut link: BTreeMap<u32, u32> = BTreeMap::new();
    let send = |d: &mut DaemonSide, u: Upcall| {
        while d.send_upcall(&u).is_err() {
            std::thread::sleep(Duration::from_micros(50));
        }
    };
    while stop.try_recv().is_err() {
        d.beat();
        let Some(Ok((req_id, c))) = d.recv_command() else {
            std::thread::sleep(Duration::from_micros(100));
            continue;
        };
        let _ = tx.send(c);
        send(
            &mut d,
            Upcall::Reply {
                req_id,
                status: reply_status::OK,
                value: 0,
            },
        );
        match c {
            Command::TcpListen { port, .. } => listening.push(port),
            Command::TcpUnlisten { port } => listening.retain(|p| *p != port),
            Command::TcpConnect { conn, remote, .. } if listening.contains(&remote.port()) => {
                // Incoming ids are disjoint from control's (high bit set).
                let inc = conn | 0x8000_0000;
                link.insert(conn, inc);
                link.insert(inc, conn);
                send(
                    &mut d,
                    Upcall::TcpIncoming {
                        conn: inc,
                        local_port: remote.port(),
                        peer: "127.0.0.1:40000".parse().unwrap(),
                    },
                );
                send(&mut d, Upcall::TcpEstablished { conn });
            }
            Command::TcpConnect { conn, .. } => send(
                &mut d,
                Upcall::TcpClosed {
                    conn,
                    reason: CloseReason::Refused,
                },
            ),
            Command::TcpSend { conn, bytes } => {
                if let Some(&o) = link.get(&conn) {
                    send(&mut d, Upcall::TcpBytes { conn: o, bytes });
                }
            }
            Command::TcpClose { conn } | Command::TcpAbort { conn } => {
                let reason = if matches!(c, Command::TcpClose { .. }) {
                    CloseReason::Graceful
                } else {
                    CloseReason::Reset
                };
                if let Some(o) = link.remove(&conn) {
                    link.remove(&o);
                    send(&mut d, Upcall::TcpClosed { conn: o, reason });
                }
            }
            _ => {}
        }
    }
}

/// Every frame of a pcap or pcapng file, in order (the captures come in both formats).
pub fn capture_frames(path: &Path) -> Vec<Vec<u8>> {
    capture_frames_timed(path)
        .into_iter()
        .map(|(_, f)| f)
        .collect()
}

/// Every frame of a pcap or pcapng file, in order, with the time it was captured (since the
/// epoch); None for a pcapng simple packet, which carries no time.
pub fn capture_frames_timed(path: &Path) -> Vec<(Option<Duration>, Vec<u8>)> {
    use pcap_file::pcap::PcapReader;
    use pcap_file::pcapng::{Block, PcapNgReader};
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    if bytes.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]) {
        let mut reader = PcapNgReader::new(&bytes[..]).unwrap();
        while let Some(block) = reader.next_block() {
            match block.unwrap() {
                Block::EnhancedPacket(p) => out.push((Some(p.timestamp), p.data.into_owned())),
                Block::SimplePacket(p) => out.push((None, p.data.into_owned())),
                _ => {}
            }
        }
    } else {
        let mut reader = PcapReader::new(&bytes[..]).unwrap();
        while let Some(p) = reader.next_packet() {
            let p = p.unwrap();
            out.push((Some(p.timestamp), p.data.into_owned()));
        }
    }
    out
}

/// The TCP segment an Ethernet II / IPv4 frame of a capture carries, as the tests read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSegment<'a> {
    pub src_mac: [u8; 6],
    /// Address and port of the sender and of the receiver.
    pub src: ([u8; 4], u16),
    pub dst: ([u8; 4], u16),
    pub seq: u32,
    pub syn: bool,
    pub rst: bool,
    /// Where the payload starts in the frame.
    pub payload_at: usize,
    /// The payload, up to the IPv4 total length (no Ethernet padding).
    pub payload: &'a [u8],
}

/// The TCP segment in `frame`; None for any other frame, or one shorter than its headers say.
pub fn tcp_segment(frame: &[u8]) -> Option<TcpSegment<'_>> {
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(*ip.first()? & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    if *ip.get(9)? != 6 || ihl < 20 {
        return None;
    }
    let tcp = ip.get(ihl..total)?;
    let doff = usize::from(*tcp.get(12)? >> 4) * 4;
    if doff < 20 {
        return None;
    }
    let payload = tcp.get(doff..)?;
    let addr = |at: usize| [ip[at], ip[at + 1], ip[at + 2], ip[at + 3]];
    let port = |at: usize| u16::from_be_bytes([tcp[at], tcp[at + 1]]);
    Some(TcpSegment {
        src_mac: frame[6..12].try_into().unwrap(),
        src: (addr(12), port(0)),
        dst: (addr(16), port(2)),
        seq: u32::from_be_bytes(tcp[4..8].try_into().unwrap()),
        syn: tcp[13] & 0x02 != 0,
        rst: tcp[13] & 0x04 != 0,
        payload_at: 14 + ihl + doff,
        payload,
    })
}

/// tshark on `pcap` with `extra` arguments; None where tshark is not installed. Without
/// `analysis` every segment is decoded on its own, retransmissions included: with TCP
/// sequence analysis Wireshark skips a retransmitted segment whole, even FPDUs it carries for
/// the first time (a sender retransmitting from its oldest unacknowledged octet appends what
/// it had queued behind). Every first transmission starts on an FPDU boundary (RFC 5044
/// section 8), so each one decodes alone.
fn tshark(pcap: &Path, analysis: bool, extra: &[&str]) -> Option<String> {
    let analyze = format!(
        "tcp.analyze_sequence_numbers:{}",
        ["FALSE", "TRUE"][usize::from(analysis)]
    );
    let out = Process::new("tshark")
        .arg("-r")
        .arg(pcap)
        // rpcordma wrongly claims small Sends (see testdata/captures/README.md).
        .args(["--disable-protocol", "rpcordma", "-o", &analyze])
        .args(extra)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `field` of every packet matching the display `filter`, each segment decoded on its own,
/// in capture order (one line per packet; a field a packet holds several times, as a frame
/// carrying several FPDUs does, comes comma-separated); None where tshark is not installed.
pub fn tshark_fields(pcap: &Path, filter: &str, field: &str) -> Option<Vec<String>> {
    let out = tshark(pcap, false, &["-Y", filter, "-T", "fields", "-e", field])?;
    Some(out.lines().map(str::to_string).collect())
}

/// The numbers of the frames matching `filter` with TCP sequence analysis on, so that
/// `tcp.analysis.retransmission` and its kin are set; None where tshark is not installed.
pub fn tshark_analysed(pcap: &Path, filter: &str) -> Option<BTreeSet<u64>> {
    let out = tshark(
        pcap,
        true,
        &["-Y", filter, "-T", "fields", "-e", "frame.number"],
    )?;
    Some(out.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// The numbers of the frames matching `filter`.
fn frames_matching(pcap: &Path, analysis: bool, filter: &str) -> BTreeSet<u64> {
    let out = tshark(
        pcap,
        analysis,
        &["-Y", filter, "-T", "fields", "-e", "frame.number"],
    );
    out.unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Wireshark's iWARP dissectors must decode the capture, each segment on its own: every
/// first transmission is whole FPDUs, none malformed, with `crc` every CRC checked good
/// (without, none carried), and at least `min_fpdus` FPDUs are found in all. Count FPDUs, not
/// frames: a TCP segment may carry several (RFC 5044 section 8), and Linux's TCP packs what
/// siw queued behind an unacknowledged segment. A retransmission counts when it decodes
/// cleanly (it may carry an FPDU's only copy) and is left out otherwise: smoltcp re-cuts
/// retransmissions from the oldest unacknowledged octet, so one may straddle FPDUs (only first
/// transmissions are aligned; see docs/dataplane.md). None, with a message, where tshark is not
/// installed; CI installs it.
pub fn tshark_check(pcap: &Path, min_fpdus: usize, crc: bool) -> Option<Decoded> {
    let fields = [
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "iwarp_mpa.ulpdulength",
    ];
    let Some(out) = tshark(
        pcap,
        false,
        &[&["-Y", "iwarp_ddp_rdmap"][..], &fields].concat(),
    ) else {
        eprintln!("tshark_check: skipped (tshark not installed)");
        return None;
    };
    // Per frame: FPDUs, CRCs checked good and bad.
    let mut frames: BTreeMap<u64, [usize; 3]> = BTreeMap::new();
    for line in out.lines() {
        if let Some((n, lengths)) = line.split_once('\t') {
            frames.entry(n.parse().unwrap()).or_default()[0] = lengths.split(',').count();
        }
    }
    // Wireshark 4.0 reports the CRC check only in its detail text, "(Good CRC32)", under
    // each frame's "Frame N:" line.
    let mut frame = 0;
    for line in tshark(pcap, false, &["-V"]).unwrap().lines() {
        let header = line.strip_prefix("Frame ").and_then(|r| r.split_once(':'));
        if let Some(n) = header.and_then(|(n, _)| n.parse().ok()) {
            frame = n;
            continue;
        }
        let (good, bad) = (
            line.matches("(Good CRC32)").count(),
            line.matches("Bad CRC32").count(),
        );
        if good + bad > 0 {
            let f = frames.entry(frame).or_default();
            f[1] += good;
            f[2] += bad;
        }
    }
    let malformed = frames_matching(pcap, false, "_ws.malformed || _ws.expert.severity == error");
    for &n in &malformed {
        frames.entry(n).or_default();
    }
    let retransmitted = frames_matching(
        pcap,
        true,
        "tcp.analysis.retransmission || tcp.analysis.fast_retransmission \
         || tcp.analysis.spurious_retransmission || tcp.analysis.out_of_order",
    );
    let (mut fpdus, mut good, mut left_out) = (0, 0, Vec::new());
    for (n, [k, g, b]) in frames {
        let clean = !malformed.contains(&n) && b == 0 && g == if crc { k } else { 0 };
        if clean {
            fpdus += k;
            good += g;
        } else if retransmitted.contains(&n) {
            left_out.push(n);
        } else {
            panic!(
                "{}: frame {n}, a first transmission: {k} FPDUs, {g} CRCs good, {b} bad, \
                 malformed: {} (CRC in use: {crc})",
                pcap.display(),
                malformed.contains(&n)
            );
        }
    }
    assert!(
        fpdus >= min_fpdus,
        "{}: tshark decoded only {fpdus} FPDUs",
        pcap.display(),
    );
    eprintln!(
        "tshark: {fpdus} FPDUs decoded, {good} CRCs good, no first transmission malformed; \
         re-cut retransmissions left out: {left_out:?}"
    );
    Some(Decoded {
        fpdus,
        good_crcs: good,
        left_out,
    })
}

/// What [`tshark_check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// FPDUs in the frames that decoded cleanly.
    pub fpdus: usize,
    pub good_crcs: usize,
    /// Retransmissions that did not decode alone (re-cut across FPDUs), by frame number.
    pub left_out: Vec<u64>,
}
