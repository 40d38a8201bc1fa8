//! Interop with Linux soft-iWARP: rdma-core's `rping` in a QEMU guest whose kernel runs `siw`
//! (`scripts/siw-guest/build.sh` makes the guest), against this stack: `iwarpd` on a TAP
//! interface bridged to the guest's, `iwarp-control`, and the `rping` example. Both ways:
//! siw's client validating what our server reads and writes back, and our client validating
//! what siw's server does. Every frame is captured and decoded by Wireshark's dissectors.
//!
//! Root only (TAP and a bridge), and only where the guest is built. CI builds it and sets
//! `IWARP_REQUIRE_SIW=1`, so there a missing piece fails the test instead of skipping it.

use iwarp_testkit::{self as testkit, Proc};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One emulated guest at a time: two on two cores only run slower.
static ONE_GUEST: Mutex<()> = Mutex::new(());

fn sh(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", cmd])
        .status()
        .is_ok_and(|s| s.success())
}

/// The guest's kernel and initrd, or why the test cannot run here.
fn guest() -> Option<PathBuf> {
    let dir = std::env::var_os("IWARP_SIW_GUEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| testkit::target_dir().join("../siw-guest"));
    // SAFETY: geteuid has no preconditions.
    let missing = if unsafe { libc::geteuid() } != 0 {
        Some("not root (TAP and a bridge)".to_string())
    } else if !sh("command -v qemu-system-x86_64 >/dev/null") {
        Some("qemu-system-x86_64 is not installed".to_string())
    } else if !dir.join("vmlinuz").exists() || !dir.join("initrd.gz").exists() {
        Some(format!(
            "no guest in {} (scripts/siw-guest/build.sh makes it)",
            dir.display()
        ))
    } else {
        None
    };
    match missing {
        None => Some(dir),
        Some(why) if std::env::var_os("IWARP_REQUIRE_SIW").is_some() => {
            panic!("IWARP_REQUIRE_SIW is set, but {why}")
        }
        Some(why) => {
            eprintln!("siw interop: skipped, {why}");
            None
        }
    }
}

/// A bridge joining the guest's TAP and ours; both removed when dropped.
struct Link {
    bridge: String,
    guest_tap: String,
}

impl Link {
    fn new(n: u8) -> Link {
        let link = Link {
            bridge: format!("brsiw{n}"),
            guest_tap: format!("vmsiw{n}"),
        };
        link.remove();
        let (br, tap) = (&link.bridge, &link.guest_tap);
        assert!(
            sh(&format!(
                "ip link add {br} type bridge && ip link set {br} up && \
                 ip tuntap add dev {tap} mode tap && ip link set {tap} master {br} && \
                 ip link set {tap} up"
            )),
            "bridge {br} with {tap}"
        );
        link
    }

    fn attach(&self, tap: &str) {
        // The daemon may publish its segment a moment before its TAP interface exists.
        let t = Instant::now();
        while !sh(&format!("ip link show {tap} >/dev/null 2>&1")) {
            assert!(t.elapsed() < Duration::from_secs(10), "no interface {tap}");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            sh(&format!(
                "ip link set {tap} master {} && ip link set {tap} up",
                self.bridge
            )),
            "attach {tap}"
        );
    }

    fn remove(&self) {
        let _ = sh(&format!(
            "ip link del {} 2>/dev/null; ip link del {} 2>/dev/null",
            self.bridge, self.guest_tap
        ));
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.remove();
    }
}

struct Run {
    /// What the guest printed on its console, `guest: exit N` last.
    guest: String,
    /// Our rping's exit and output.
    ours: Output,
    pcap: PathBuf,
    dir: Option<tempfile::TempDir>,
}

impl Drop for Run {
    /// A failed run keeps its capture and logs for a person to open.
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                eprintln!("siw interop: kept {} (siw.pcap)", dir.keep().display());
            }
        }
    }
}

impl Run {
    fn ours_said(&self) -> String {
        format!(
            "{}{}",
            String::from_utf8_lossy(&self.ours.stdout),
            String::from_utf8_lossy(&self.ours.stderr)
        )
    }
}

/// Our endpoint at 10.7`n`.0.1 runs our rping with `ours`; the guest at 10.7`n`.0.2 runs
/// rdma-core's rping with `theirs`.
fn run(guest: &Path, n: u8, ours: &[&str], theirs: &[&str]) -> Run {
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("rt");
    let pcap = dir.path().join("siw.pcap");
    let link = Link::new(n);
    let our_tap = format!("iwsiw{n}");
    let _daemon = Proc(
        Command::new(testkit::binary("iwarpd"))
            .args(["--name", &testkit::unique("siw")])
            .args(["--port", "tap", "--tap", &our_tap, "--polling", "adaptive"])
            .args(["--mac", &format!("02:00:00:00:7{n}:01")])
            .args(["--ip", &format!("10.7{n}.0.1/24")])
            .arg("--runtime-dir")
            .arg(&runtime)
            .arg("--pcap")
            .arg(&pcap)
            .spawn()
            .expect("spawn iwarpd"),
    );
    testkit::wait_for(&runtime.join("daemon.shm"));
    link.attach(&our_tap);
    let _control = testkit::start_control(&runtime);

    let example = testkit::target_dir().join("examples").join("rping");
    assert!(example.exists(), "cargo test builds the examples");
    let ours = Command::new(example)
        .args(ours)
        .arg("--runtime-dir")
        .arg(&runtime)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rping");
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || done_tx.send(ours.wait_with_output().expect("rping")));

    let append = format!(
        "console=ttyS0 panic=-1 quiet guest_ip=10.7{n}.0.2/24 guest_run={}",
        theirs.join(",")
    );
    let console = dir.path().join("console");
    let mut vm = Proc(
        Command::new("qemu-system-x86_64")
            .args(["-machine", "pc", "-cpu", "max", "-m", "512", "-smp", "1"])
            .args(["-nographic", "-no-reboot"])
            .arg("-kernel")
            .arg(guest.join("vmlinuz"))
            .arg("-initrd")
            .arg(guest.join("initrd.gz"))
            .args(["-append", &append])
            .arg("-netdev")
            .arg(format!(
                "tap,id=n0,ifname={},script=no,downscript=no",
                link.guest_tap
            ))
            .args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac=52:54:00:7{n}:00:02"),
            ])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&console).unwrap())
            .spawn()
            .expect("run qemu"),
    );
    // The guest powers off when its rping ends. Ours has its own time limits; once it has
    // ended, the guest gets a while to finish (a server that never saw us would wait forever).
    let start = Instant::now();
    let mut ours = None;
    let mut ours_at = None;
    while vm.0.try_wait().unwrap().is_none() {
        if ours.is_none() {
            ours = done.try_recv().ok();
            ours_at = ours.as_ref().map(|_| Instant::now());
        }
        let late = ours_at.is_some_and(|t| t.elapsed() > Duration::from_secs(60));
        if late || start.elapsed() > Duration::from_secs(300) {
            let _ = vm.0.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let ours = ours.unwrap_or_else(|| done.recv().expect("rping"));
    let guest = std::fs::read_to_string(&console).unwrap_or_default();
    let run = Run {
        guest,
        ours,
        pcap,
        dir: Some(dir),
    };
    eprintln!("--- guest\n{}\n--- ours\n{}", run.guest, run.ours_said());
    run
}

const PINGS: u64 = 10;

#[test]
fn siws_rping_client_validates_our_server() {
    let Some(guest) = guest() else { return };
    let count = PINGS.to_string();
    // 64 KiB pings: the Read Response and the Write span many FPDUs and TCP segments.
    let r = run(
        &guest,
        8,
        &["-s", "-v", "-C", &count],
        &[
            "rping",
            "-c",
            "-a",
            "10.78.0.1",
            "-C",
            &count,
            "-S",
            "65535",
            "-V",
            "-v",
        ],
    );
    assert!(r.guest.contains("guest: exit 0"), "siw's rping failed");
    for i in 0..PINGS {
        // With -V, siw's client prints a ping only after comparing it.
        assert!(
            r.guest.contains(&format!("ping data: rdma-ping-{i}: ")),
            "ping {i} missing on the guest"
        );
    }
    assert!(r.ours.status.success(), "our rping server failed");
    assert!(r
        .ours_said()
        .contains(&format!("rping server: {PINGS} pings")));
    // Each ping: two Sends each way, a Read Request, its Response (many FPDUs) and a Write.
    testkit::tshark_check(&r.pcap, 6 * PINGS as usize, true);
}

#[test]
fn our_rping_client_validates_siws_server_without_crc() {
    let Some(guest) = guest() else { return };
    let count = PINGS.to_string();
    let r = run(
        &guest,
        9,
        &[
            "-c",
            "-a",
            "10.79.0.2",
            "-C",
            &count,
            "-S",
            "1000",
            "-V",
            "-v",
            "--no-crc",
            // The guest boots before its rping listens.
            "--retry",
            "60",
        ],
        &["rping", "-s", "-a", "10.79.0.2", "-S", "1000", "-v"],
    );
    assert!(r.ours.status.success(), "our rping client failed");
    assert!(r
        .ours_said()
        .contains(&format!("rping client: {PINGS} pings")));
    for i in 0..PINGS {
        assert!(
            r.guest
                .contains(&format!("server ping data: rdma-ping-{i}: ")),
            "siw's server did not read ping {i}"
        );
    }
    // siw's server ends when we disconnect, as rping's does: status 0.
    assert!(r.guest.contains("guest: exit 0"), "siw's rping failed");
    testkit::tshark_check(&r.pcap, 6 * PINGS as usize, false);
}

/// The RDMAP opcode of the first FPDU matching the display `filter` (the first of a frame
/// that carries several).
fn first_opcode(pcap: &Path, filter: &str) -> Option<String> {
    let frames =
        testkit::tshark_fields(pcap, filter, "iwarp_rdma.opcode").expect("tshark installed");
    let first = frames.first()?.split(',').next()?;
    Some(first.to_string())
}

/// RFC 6581 peer-to-peer mode: our client offers one RTR message, siw's responder agrees to
/// it, waits for it before it tells its application the connection is up, and then serves.
fn our_client_with_rtr(n: u8, rtr: &str) {
    let Some(guest) = guest() else { return };
    let count = PINGS.to_string();
    let ours_ip = format!("10.7{n}.0.2");
    let r = run(
        &guest,
        n,
        &[
            "-c", "-a", &ours_ip, "-C", &count, "-V", "--rtr", rtr, "--retry", "60",
        ],
        &["rping", "-s", "-a", &ours_ip, "-v"],
    );
    assert!(r.ours.status.success(), "our rping client failed");
    assert!(r
        .ours_said()
        .contains(&format!("rping client: {PINGS} pings")));
    assert!(r.guest.contains("guest: exit 0"), "siw's rping failed");
    // The RTR is the first FPDU of the connection: a zero-length Write or Read Request.
    let want = if rtr == "write" { "0x00" } else { "0x01" };
    assert_eq!(
        first_opcode(&r.pcap, "iwarp_ddp_rdmap").as_deref(),
        Some(want)
    );
    // siw's first FPDU: the zero-length Read Response a Read RTR asks for, or else its
    // server's first RDMA Read of our client's buffer.
    let theirs = format!("iwarp_ddp_rdmap && ip.src == 10.7{n}.0.2");
    let want = if rtr == "read" { "0x02" } else { "0x01" };
    assert_eq!(first_opcode(&r.pcap, &theirs).as_deref(), Some(want));
    testkit::tshark_check(&r.pcap, 6 * PINGS as usize, true);
}

#[test]
fn siws_server_takes_a_zero_length_write_as_the_rtr() {
    our_client_with_rtr(6, "write");
}

/// The Read RTR is answered: siw's zero-length Read Response must reach us before our
/// client's first Send is served. siw's responder race would leave the RTR unread without
/// the initiator's hold before RTS (docs/interop-siw.md).
#[test]
fn siws_server_takes_a_zero_length_read_as_the_rtr() {
    our_client_with_rtr(5, "read");
}
