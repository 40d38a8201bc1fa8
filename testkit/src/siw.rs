//! A live Linux soft-iWARP peer: the QEMU guest of `scripts/siw-guest` (its kernel runs
//! `siw`) on a TAP interface bridged to an `iwarpd` TAP port, with `iwarp-control`. The
//! guest runs one command given on its kernel command line and powers off when it ends.

use crate::{binary, start_control, target_dir, unique, wait_for, Proc};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One emulated guest at a time: two on two cores only run slower.
static ONE_GUEST: Mutex<()> = Mutex::new(());

/// How long our program may go on once the guest has ended: far longer than a disconnect
/// takes.
pub const AFTER_THE_GUEST: Duration = Duration::from_secs(30);

fn sh(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", cmd])
        .status()
        .is_ok_and(|s| s.success())
}

/// The guest's kernel and initrd, or `None` after saying on stderr why the test cannot run
/// here. With `IWARP_REQUIRE_SIW` set (CI builds the guest), a missing piece panics instead.
pub fn guest() -> Option<PathBuf> {
    let dir = std::env::var_os("IWARP_SIW_GUEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("../siw-guest"));
    // SAFETY: geteuid has no preconditions.
    let missing = if unsafe { libc::geteuid() } != 0 {
        Some("skipped (needs root): TAP and a bridge".to_string())
    } else if !sh("command -v qemu-system-x86_64 >/dev/null") {
        Some("skipped: qemu-system-x86_64 is not installed".to_string())
    } else if !dir.join("vmlinuz").exists() || !dir.join("initrd.gz").exists() {
        Some(format!(
            "skipped: no guest in {} (scripts/siw-guest/build.sh makes it)",
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
            eprintln!("siw interop: {why}");
            None
        }
    }
}

/// [`guest`], if its initrd holds `program` (the `contents` stamp `build.sh` writes names
/// them); a guest built by an older script does not hold perftest, and is skipped saying so
/// (or, with `IWARP_REQUIRE_SIW`, fails).
pub fn guest_with(program: &str) -> Option<PathBuf> {
    let dir = guest()?;
    let contents = std::fs::read_to_string(dir.join("contents")).unwrap_or_default();
    if contents.split_whitespace().any(|p| p == program) {
        return Some(dir);
    }
    let why = format!(
        "the guest in {} has no {program} (scripts/siw-guest/build.sh rebuilds it)",
        dir.display()
    );
    if std::env::var_os("IWARP_REQUIRE_SIW").is_some() {
        panic!("IWARP_REQUIRE_SIW is set, but {why}");
    }
    eprintln!("siw interop: skipped: {why}");
    None
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

/// Shell commands that wait until the guest's server listens (its console, which [`run`]
/// names in `IWARP_SIW_CONSOLE`, says `guest: listening`), then a second more, or exit 1 if
/// the guest ends first. A client on our side starts after them, and once: a second try
/// could reach a server that already took a connection from the first and now waits for
/// something else. The second: a guest that has just booted answers late for a while, and
/// a transfer started at once meets spurious resend timeouts (`siw_resends`); one started
/// a second later does not.
pub const UNTIL_GUEST_LISTENS: &str = "until grep -qs 'guest: listening' \"$IWARP_SIW_CONSOLE\"; \
     do grep -qs 'guest: exit' \"$IWARP_SIW_CONSOLE\" && exit 1; sleep 0.05; done; sleep 1";

/// What one run left: both sides' output and the capture of every frame.
pub struct Run {
    /// What the guest printed on its console, `guest: exit N` last.
    pub guest: String,
    /// The guest kernel's log, with siw's connection manager's debug lines.
    pub kernel: String,
    /// Our program's exit and output.
    pub ours: Output,
    /// Ours was still running [`AFTER_THE_GUEST`] after the guest had ended, and was
    /// stopped.
    pub ours_stopped: bool,
    pub pcap: PathBuf,
    guest_ip: String,
    dir: Option<tempfile::TempDir>,
}

impl Drop for Run {
    /// A failed run keeps its capture and logs for a person to open; with `IWARP_SIW_KEEP`
    /// set, every run does.
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("IWARP_SIW_KEEP").is_some() {
            if let Some(dir) = self.dir.take() {
                eprintln!("siw interop: kept {} (siw.pcap)", dir.keep().display());
            }
        }
    }
}

impl Run {
    /// Whether the guest's command exited 0 (the guest's init prints `guest: exit N`).
    pub fn guest_exited_0(&self) -> bool {
        self.guest.contains("guest: exit 0")
    }

    /// What the guest's command printed: its console from `guest: running` on, without the
    /// firmware's and the kernel's boot lines before it.
    pub fn guest_said(&self) -> &str {
        self.guest
            .find("guest: running")
            .map_or(&self.guest[..], |i| &self.guest[i..])
    }

    /// Why the run failed on our side, for an assertion's message: our program's exit (or
    /// that it was stopped after the guest ended) and what the guest printed.
    pub fn ours_failed(&self, what: &str) -> String {
        let how = if self.ours_stopped {
            format!(
                "still running {}s after the guest ended; stopped",
                AFTER_THE_GUEST.as_secs()
            )
        } else {
            self.ours.status.to_string()
        };
        format!("{what}: {how}; the guest printed:\n{}", self.guest_said())
    }

    /// The guest kernel's lines that mention siw.
    pub fn siw_log(&self) -> String {
        self.kernel
            .lines()
            .filter(|l| l.contains("siw"))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Whether siw's connection manager was handed data for a connection it had already
    /// given to its QP: siw sends its MPA Reply before it moves the socket's receive
    /// callback from its connection manager (which ignores data in RDMA mode) to the QP, so
    /// an FPDU arriving in between is left unread until more data comes. A guest descheduled
    /// there (QEMU's emulation on a loaded host) widens that gap past any hold of ours, and
    /// a first Send that waits for its answer then hangs both sides.
    pub fn siw_left_data_unread(&self) -> bool {
        // siw's endpoint states count from 1: RDMA mode is the seventh.
        self.kernel
            .lines()
            .any(|l| l.contains("siw_cm_llp_data_ready: cep state: 7,"))
    }

    /// Whether the guest refused a connection of ours: answered its SYN with a RST, as
    /// Linux does for a port nobody listens on.
    pub fn guest_refused_a_connection(&self) -> bool {
        let filter = format!(
            "ip.src == {} && tcp.flags.reset == 1 && tcp.flags.ack == 1 && tcp.seq_raw == 0",
            self.guest_ip
        );
        crate::tshark_analysed(&self.pcap, &filter).is_some_and(|f| !f.is_empty())
    }

    /// Whether our perftest client lost the race with its server's second listen: perftest
    /// (4.5-0.17, rdma_cm mode) has its server send its last word on the first connection
    /// and only then listen again, on the same port, for the measured connection, which its
    /// client opens the moment that word arrives. A guest slower than that (QEMU's
    /// emulation on a loaded host) refuses the connection with a RST, as Linux does for a
    /// port nobody listens on; perftest's client reports UNREACHABLE and then retries with
    /// the identifiers it has just destroyed, and fails.
    pub fn perftest_beat_the_relisten(&self) -> bool {
        self.guest_refused_a_connection() && self.ours_said().contains("RDMA_CM_EVENT_UNREACHABLE")
    }

    /// Whether siw's perftest (the guest, server or client) failed in its closing exchange
    /// alone, after the measuring side had printed its results: its last Send completed in
    /// error because our side, done and exited, had already reset the connection. Our stack
    /// closes an established connection whose application destroys its QP or exits without
    /// disconnecting with a RST, the abortive teardown of the Verbs specification (section
    /// 6.6.2.3: Error from RTS resets the LLP stream; Destroy QP may, section 6.1.4), where
    /// siw closes its socket with a FIN; a guest slow to complete that Send (QEMU's
    /// emulation on a loaded host) sees the reset first. The transfer was whole: our program
    /// exited 0 and a side that measured printed its result table. Which sides print one
    /// depends on the test: siw's `ib_read_lat` server, for one, prints none, so when siw
    /// serves it is our client's table that shows the run whole.
    pub fn perftest_guest_lost_its_close(&self) -> bool {
        let filter = format!(
            "ip.dst == {} && tcp.flags.reset == 1 && tcp.flags.ack == 1",
            self.guest_ip
        );
        self.ours.status.success()
            && (self.guest_said().contains("#bytes") || self.ours_said().contains("#bytes"))
            && self
                .guest
                .contains("Failed to close connection between server and client")
            && crate::tshark_analysed(&self.pcap, &filter).is_some_and(|f| !f.is_empty())
    }

    /// Our program's stdout and stderr.
    pub fn ours_said(&self) -> String {
        format!(
            "{}{}",
            String::from_utf8_lossy(&self.ours.stdout),
            String::from_utf8_lossy(&self.ours.stderr)
        )
    }
}

/// Runs of a pair at most, while each failed for a race outside our stack that its own
/// evidence shows (see [`rerun_for`]).
pub const OUTSIDE_RACE_RUNS: usize = 3;

/// `run`, then again, up to `runs` runs in all, while `why` names a race outside our stack
/// that the failed run's own evidence shows; each rerun says why.
pub fn rerun_for(
    runs: usize,
    run: impl Fn() -> Run,
    why: impl Fn(&Run) -> Option<&'static str>,
) -> Run {
    let mut r = run();
    for _ in 1..runs {
        let Some(reason) = why(&r) else {
            break;
        };
        eprintln!("{reason}; running the pair again");
        r = run();
    }
    r
}

/// Our endpoint at 10.7`n`.0.1 (runtime directory passed to `ours`, which builds the
/// command to run on our side); the guest at 10.7`n`.0.2 runs `theirs` (its words joined
/// by commas on the kernel command line, so no word may hold a comma or a space).
pub fn run(guest: &Path, n: u8, ours: impl FnOnce(&Path) -> Command, theirs: &[&str]) -> Run {
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("rt");
    let pcap = dir.path().join("siw.pcap");
    let link = Link::new(n);
    let our_tap = format!("iwsiw{n}");
    let _daemon = Proc(
        Command::new(binary("iwarpd"))
            .args(["--name", &unique("siw")])
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
    wait_for(&runtime.join("daemon.shm"));
    link.attach(&our_tap);
    let _control = start_control(&runtime);

    // Its own process group, so that a retrying shell and the program it started can be
    // stopped together.
    let console = dir.path().join("console");
    let ours = ours(&runtime)
        .env("IWARP_SIW_CONSOLE", &console)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn our program");
    let ours_group = ours.id() as i32;
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || done_tx.send(ours.wait_with_output().expect("our program")));

    let append = format!(
        "console=ttyS0 panic=-1 quiet guest_ip=10.7{n}.0.2/24 guest_run={}",
        theirs.join(",")
    );
    let kernel_log = dir.path().join("kernel");
    let mut vm = Proc(
        Command::new("qemu-system-x86_64")
            .args(["-machine", "pc", "-cpu", "max", "-m", "512", "-smp", "1"])
            .args(["-display", "none", "-monitor", "none", "-no-reboot"])
            // The console, then the kernel's log (the guest's init copies it there).
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .arg("-serial")
            .arg(format!("file:{}", kernel_log.display()))
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
            .stdout(Stdio::null())
            .spawn()
            .expect("run qemu"),
    );
    // The guest powers off when its command ends. Ours has its own time limits; once it has
    // ended, the guest gets a while to finish (a server that never saw us would wait forever).
    // Once the guest has ended, ours gets `AFTER_THE_GUEST` and is then stopped: a client
    // still retrying has no server left to reach.
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
    let mut ours_stopped = false;
    let ours = match ours {
        Some(o) => o,
        None => match done.recv_timeout(AFTER_THE_GUEST) {
            Ok(o) => o,
            Err(_) => {
                ours_stopped = true;
                // SAFETY: kill(2) on the process group our child leads (`process_group(0)`);
                // the child has not ended, or `done` would have delivered.
                unsafe { libc::kill(-ours_group, libc::SIGKILL) };
                done.recv().expect("our program")
            }
        },
    };
    let guest = std::fs::read_to_string(&console).unwrap_or_default();
    let kernel = std::fs::read_to_string(&kernel_log).unwrap_or_default();
    let run = Run {
        guest,
        kernel,
        ours,
        ours_stopped,
        pcap,
        guest_ip: format!("10.7{n}.0.2"),
        dir: Some(dir),
    };
    eprintln!(
        "--- guest\n{}\n--- guest kernel (siw)\n{}--- ours\n{}",
        run.guest,
        run.siw_log(),
        run.ours_said()
    );
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn run_with(guest: &str, kernel: &str) -> Run {
        Run {
            guest: guest.into(),
            kernel: kernel.into(),
            ours: Output {
                status: ExitStatus::from_raw(0),
                stdout: Vec::new(),
                stderr: Vec::new(),
            },
            ours_stopped: false,
            pcap: PathBuf::new(),
            guest_ip: "10.70.0.2".into(),
            dir: None,
        }
    }

    /// The client script against a console that says `console`: whether it ran the
    /// program (which prints `started`) and its exit status.
    fn client_against(console: &str) -> (bool, i32) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console");
        std::fs::write(&path, console).unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{UNTIL_GUEST_LISTENS}; exec \"$0\" \"$@\""))
            .args(["echo", "started"])
            .env("IWARP_SIW_CONSOLE", &path)
            .output()
            .unwrap();
        let ran = String::from_utf8_lossy(&out.stdout).contains("started");
        (ran, out.status.code().unwrap_or(-1))
    }

    #[test]
    fn a_client_starts_once_the_guest_listens_and_not_after_it_ended() {
        let booted = "\x1b[2Jguest: running ib_read_lat -R\n* Waiting *\nguest: listening\n";
        assert_eq!(client_against(booted), (true, 0));
        let ended = "guest: running ib_read_lat -R\nguest: exit 1\n";
        assert_eq!(client_against(ended), (false, 1));
    }

    #[test]
    fn siws_data_in_rdma_mode_is_told_from_its_mpa_request() {
        let request =
            "<7>[ 4.2] siw0: CEP[0x1] siw_cm_llp_data_ready: cep state: 4, socket state 1\n";
        let lost = "<7>[ 4.3] siw0: CEP[0x2] siw_cm_llp_data_ready: cep state: 7, socket state 1\n";
        assert!(!run_with("", request).siw_left_data_unread());
        assert!(run_with("", &format!("{request}{lost}")).siw_left_data_unread());
        assert_eq!(run_with("", lost).siw_log(), lost);
    }

    #[test]
    fn what_the_guest_said_starts_at_its_command() {
        let r = run_with(
            "SeaBIOS\nBooting from ROM...\nguest: running rping -s\nguest: exit 0\n",
            "",
        );
        assert_eq!(r.guest_said(), "guest: running rping -s\nguest: exit 0\n");
        assert!(r.ours_failed("our rping").contains("guest: exit 0"));
        assert!(r.guest_exited_0());
        assert!(!run_with("guest: running rping -s\nguest: exit 255\n", "").guest_exited_0());
    }
}
