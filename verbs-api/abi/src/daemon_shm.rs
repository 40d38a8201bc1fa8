//! iwarpd's segment: for each of the daemon's poll-mode workers a command
//! ring (control -> that worker), an upcall ring (replies and events, worker -> control) and
//! a heartbeat word; the generation words. Each application is served by one worker, whose
//! rings carry all its commands.
//!
//! Layout of the segment's data area:
//!
//! ```text
//! 0    DaemonHeader line 0: magic, generation, daemon pid, worker 0's ring offsets and
//!      lengths, the number of workers
//! 64   line 1: control asleep (1 while control sleeps on its bell, `control.bell` beside
//!      the link: a worker that queues an upcall then rings it)
//! 128  line 2: control generation (written by control when it attaches, so the daemon
//!      can tell a restarted control)
//! 256  worker 0: heartbeat line (bumped by its poll loop, Release), command ring, upcall
//!      ring (rings of `Msg`, 64-byte aligned)
//! ...  worker 1, 2, ...: the same, one after another
//! ```
//!
//! Detecting a dead or restarted daemon: a worker's heartbeat stops moving (the caller
//! decides how long is too long; nothing here measures time), [`ControlSide::daemon_alive`]
//! says whether the creator pid still exists, and [`ControlSide::daemon_replaced`] says
//! whether the path now names another segment (a restarted daemon made a new one; its
//! generation differs).
//!
//! Waking an idle control is the doorbell protocol of [`crate::wake`] turned around: control
//! stores 1 in its word, fences and looks at every upcall ring once more before it sleeps;
//! a worker publishes its upcall, fences and loads the word, writing one octet to the bell
//! only when it reads 1.

use crate::command::{Command, Msg, Upcall};
use crate::error::Error;
use crate::ring::{self, Consumer, Full, Producer};
use crate::segment::{HugePolicy, Segment, SegmentKind};
use crate::sync::{fence, AtomicU64, Ordering};
use std::fs::File;
use std::io::Write;
#[cfg(not(loom))]
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

/// "iwarpdmn", little-endian.
pub const DAEMON_MAGIC: u64 = u64::from_le_bytes(*b"iwarpdmn");
/// Default ring capacities.
pub const DEFAULT_COMMAND_SLOTS: usize = 256;
pub const DEFAULT_UPCALL_SLOTS: usize = 1024;
const RINGS_AT: usize = 256;
/// The most workers one daemon segment serves.
pub const MAX_WORKERS: usize = 64;
/// The named pipe control sleeps on, in the directory of the segment's link.
pub const CONTROL_BELL: &str = "control.bell";

#[repr(C, align(64))]
struct Line<T>(T);

#[repr(C)]
struct DaemonHeader {
    /// magic, generation, pid, worker 0's command ring offset, its length, worker 0's
    /// upcall ring offset, its length, number of workers (each worker's lines follow the
    /// previous one's at a stride of heartbeat line + both rings).
    meta: Line<[u64; 8]>,
    /// 1 while control sleeps on its bell.
    control_asleep: Line<AtomicU64>,
    control_generation: Line<AtomicU64>,
}
const _: () = assert!(core::mem::size_of::<DaemonHeader>() <= RINGS_AT);

struct Shared {
    seg: Arc<Segment>,
    generation: u64,
    pid: u32,
}

impl Shared {
    fn header(&self) -> &DaemonHeader {
        // SAFETY: `create`/`open` checked the data area holds a DaemonHeader (page-aligned,
        // large enough); the Arc keeps the mapping alive.
        unsafe { &*(self.seg.data().as_ptr() as *const DaemonHeader) }
    }

    /// The heartbeat word at `at` (a worker's first line).
    fn heartbeat(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `create`/`open` checked that every worker's lines lie inside the data
        // area; `at` is 64-aligned; the Arc keeps the mapping alive.
        unsafe { &*(self.seg.data().as_ptr().add(at) as *const AtomicU64) }
    }
}

/// Where worker `w`'s heartbeat line, command ring and upcall ring start.
fn worker_at(w: usize, cmd_len: usize, up_len: usize) -> (usize, usize, usize) {
    let beat = RINGS_AT + w * (64 + cmd_len + up_len);
    (beat, beat + 64, beat + 64 + cmd_len)
}

fn ring_len(slots: usize) -> usize {
    ring::ring_bytes::<Msg>(slots).div_ceil(64) * 64
}

/// A fresh generation number: nonzero, different across daemon starts.
fn new_generation() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (t ^ ((std::process::id() as u64) << 32)) | 1
}

/// One worker's end in iwarpd: consumes its commands, produces its upcalls, beats its
/// heart.
pub struct DaemonSide {
    pub commands: Consumer<Msg>,
    pub upcalls: Producer<Msg>,
    worker: usize,
    beat_at: usize,
    shared: Shared,
    /// Worker 0's side removes the link when dropped.
    link: Option<PathBuf>,
    /// Where control's bell is (beside the link; none without one) and this worker's
    /// writer, opened at the first ring.
    bell: Option<PathBuf>,
    bell_pipe: Option<File>,
}

/// One worker's rings as control sees them.
pub struct WorkerRings {
    pub commands: Producer<Msg>,
    pub upcalls: Consumer<Msg>,
    beat_at: usize,
}

/// iwarp-control's end: produces commands, consumes upcalls, watches the hearts, for every
/// worker of the daemon.
pub struct ControlSide {
    pub workers: Vec<WorkerRings>,
    shared: Shared,
    path: PathBuf,
    file_id: (u64, u64),
}

/// Namespace for the two constructors.
pub struct DaemonShm;

impl DaemonShm {
    /// Creates the daemon segment `name` (e.g. `iwarp-<instance>.daemon`, placed as
    /// [`Segment::create`] decides) for one worker with rings of the given capacities
    /// (powers of two), and, if `link` is given (`<runtime>/daemon.shm`), a symbolic link
    /// to it there, replacing a stale one. Both are removed when the returned side is
    /// dropped.
    pub fn create(
        name: &str,
        link: Option<&Path>,
        command_slots: usize,
        upcall_slots: usize,
        policy: HugePolicy,
    ) -> Result<DaemonSide, Error> {
        let mut sides = Self::create_workers(name, link, 1, command_slots, upcall_slots, policy)?;
        sides.pop().ok_or(Error::Layout)
    }

    /// As [`DaemonShm::create`], for `workers` poll-mode workers (1 to [`MAX_WORKERS`]): one
    /// side per worker, in order; worker 0's side removes the link when dropped, the segment
    /// goes with the last side.
    pub fn create_workers(
        name: &str,
        link: Option<&Path>,
        workers: usize,
        command_slots: usize,
        upcall_slots: usize,
        policy: HugePolicy,
    ) -> Result<Vec<DaemonSide>, Error> {
        if !command_slots.is_power_of_two()
            || !upcall_slots.is_power_of_two()
            || !(1..=MAX_WORKERS).contains(&workers)
        {
            return Err(Error::Layout);
        }
        let cmd_len = ring_len(command_slots);
        let up_len = ring_len(upcall_slots);
        let total = worker_at(workers, cmd_len, up_len).0;
        let seg = Arc::new(Segment::create(name, SegmentKind::Daemon, total, policy)?);
        let generation = new_generation();
        let pid = std::process::id();
        let base = seg.data();
        let (_, cmd_at, up_at) = worker_at(0, cmd_len, up_len);
        // SAFETY: the data area is page-aligned and at least `total` long; no one else maps
        // it in a way that writes yet (control only attaches after the magic is set, and the
        // file appeared only once the segment header was written; the daemon header is
        // written before any ring and control checks every field).
        unsafe {
            core::ptr::write(
                base.as_ptr() as *mut DaemonHeader,
                DaemonHeader {
                    meta: Line([
                        DAEMON_MAGIC,
                        generation,
                        pid as u64,
                        cmd_at as u64,
                        cmd_len as u64,
                        up_at as u64,
                        up_len as u64,
                        workers as u64,
                    ]),
                    control_asleep: Line(AtomicU64::new(0)),
                    control_generation: Line(AtomicU64::new(0)),
                },
            );
        }
        let link = match link {
            Some(l) => {
                let _ = std::fs::remove_file(l);
                let target = seg.path().ok_or(Error::InvalidName)?;
                std::os::unix::fs::symlink(target, l)?;
                Some(l.to_path_buf())
            }
            None => None,
        };
        let bell = link
            .as_deref()
            .and_then(Path::parent)
            .map(|d| d.join(CONTROL_BELL));
        let mut sides = Vec::with_capacity(workers);
        for w in 0..workers {
            let (beat_at, cmd_at, up_at) = worker_at(w, cmd_len, up_len);
            let (_, commands) = ring_init(&seg, cmd_at, cmd_len, command_slots)?;
            let (upcalls, _) = ring_init(&seg, up_at, up_len, upcall_slots)?;
            sides.push(DaemonSide {
                commands,
                upcalls,
                worker: w,
                beat_at,
                shared: Shared {
                    seg: Arc::clone(&seg),
                    generation,
                    pid,
                },
                link: None,
                bell: bell.clone(),
                bell_pipe: None,
            });
        }
        sides[0].link = link;
        Ok(sides)
    }

    /// Maps the daemon segment at `path` (the segment or a link to it) as control.
    /// `control_generation` is recorded for the daemon to see (nonzero; e.g. control's start
    /// time).
    pub fn open(path: &Path, control_generation: u64) -> Result<ControlSide, Error> {
        let seg = Arc::new(Segment::open(path, Some(SegmentKind::Daemon))?);
        if seg.data_len() < RINGS_AT {
            return Err(Error::Layout);
        }
        // SAFETY: the data area is at least RINGS_AT long and page-aligned; plain integers.
        let meta = unsafe { core::ptr::read_volatile(seg.data().as_ptr() as *const [u64; 8]) };
        if meta[0] != DAEMON_MAGIC {
            return Err(Error::BadMagic);
        }
        let (cmd_len, up_len, workers) = (meta[4] as usize, meta[6] as usize, meta[7] as usize);
        if !(1..=MAX_WORKERS).contains(&workers)
            || !cmd_len.is_multiple_of(64)
            || !up_len.is_multiple_of(64)
            || (meta[3] as usize, meta[5] as usize) != {
                let (_, c, u) = worker_at(0, cmd_len, up_len);
                (c, u)
            }
        {
            return Err(Error::Layout);
        }
        let end = cmd_len
            .checked_add(up_len)
            .and_then(|l| l.checked_add(64))
            .and_then(|l| l.checked_mul(workers))
            .and_then(|l| l.checked_add(RINGS_AT));
        if end.is_none_or(|e| e > seg.data_len()) {
            return Err(Error::Layout);
        }
        let mut rings = Vec::with_capacity(workers);
        for w in 0..workers {
            let (beat_at, cmd_at, up_at) = worker_at(w, cmd_len, up_len);
            let (commands, _) = ring_attach(&seg, cmd_at, cmd_len)?;
            let (_, upcalls) = ring_attach(&seg, up_at, up_len)?;
            rings.push(WorkerRings {
                commands,
                upcalls,
                beat_at,
            });
        }
        let file_id = seg.file_id();
        let shared = Shared {
            seg,
            generation: meta[1],
            pid: meta[2] as u32,
        };
        // A control that died asleep left its word set: this one is awake.
        shared.header().control_asleep.0.store(0, Ordering::Relaxed);
        shared
            .header()
            .control_generation
            .0
            .store(control_generation, Ordering::Release);
        Ok(ControlSide {
            workers: rings,
            shared,
            path: path.to_path_buf(),
            file_id,
        })
    }
}

fn sub(seg: &Arc<Segment>, at: usize) -> NonNull<u8> {
    // SAFETY: callers checked `at` + the ring length lies inside the data area.
    unsafe { NonNull::new_unchecked(seg.data().as_ptr().add(at)) }
}

fn ring_init(
    seg: &Arc<Segment>,
    at: usize,
    len: usize,
    slots: usize,
) -> Result<(Producer<Msg>, Consumer<Msg>), Error> {
    // SAFETY: [at, at+len) lies in the data area (computed by `create`), 64-aligned; the
    // mapping lives as long as the side holding the ends (which holds the Arc).
    unsafe { ring::init(sub(seg, at), len, slots) }
}

fn ring_attach(
    seg: &Arc<Segment>,
    at: usize,
    len: usize,
) -> Result<(Producer<Msg>, Consumer<Msg>), Error> {
    // SAFETY: bounds checked by `open`; `attach` validates the ring header.
    unsafe { ring::attach(sub(seg, at), len) }
}

impl DaemonSide {
    /// The next command and its request id; `Some(Err)` for a slot that does not decode
    /// (answer it with `reply_status::BAD_COMMAND` and its `req_id` from the raw slot).
    pub fn recv_command(&mut self) -> Option<Result<(u64, Command), Error>> {
        self.commands.pop().map(|m| Command::decode(&m))
    }

    /// Queues a reply or event, ringing control's bell if it sleeps; `Err(Full)` when
    /// control is not draining (back-pressure: retry later, never drop).
    pub fn send_upcall(&mut self, u: &Upcall) -> Result<(), Full> {
        self.upcalls.push(u.encode())?;
        // SYNC POINT: the push published the producer index; this fence pairs with the one
        // in `ControlSide::sleeping`, so either control's last look sees the upcall or this
        // load sees control asleep.
        fence(Ordering::SeqCst);
        if self.control_asleep() {
            self.ring_control();
        }
        Ok(())
    }

    /// Whether control sleeps on its bell (the next upcall rings it).
    pub fn control_asleep(&self) -> bool {
        self.shared
            .header()
            .control_asleep
            .0
            .load(Ordering::Relaxed)
            != 0
    }

    /// One octet to control's bell. A control that is not there (or not yet) is not rung:
    /// it looks at the rings when it starts, and while it runs it sleeps a bounded time.
    fn ring_control(&mut self) {
        if self.bell_pipe.is_none() {
            // Write-only and non-blocking: fails (ENXIO) while no control holds the pipe.
            self.bell_pipe = self.bell.as_ref().and_then(|p| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(p)
                    .ok()
            });
        }
        if let Some(pipe) = &mut self.bell_pipe {
            match pipe.write(&[1]) {
                // A full pipe holds rings enough to wake it.
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                // No reader (EPIPE): that control exited, and a new one makes a new pipe.
                Err(_) => self.bell_pipe = None,
            }
        }
    }

    /// Bumps this worker's heartbeat (once per poll-loop round or per timer tick).
    pub fn beat(&self) {
        // SYNC POINT: Release pairs with control's Acquire load in `heartbeat`; only this
        // worker writes it, so a load-add-store needs no read-modify-write.
        let h = self.shared.heartbeat(self.beat_at);
        h.store(h.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
    }

    /// Which worker's rings these are.
    pub fn worker(&self) -> usize {
        self.worker
    }

    pub fn generation(&self) -> u64 {
        self.shared.generation
    }

    /// The generation control wrote when it attached (0: none yet). A change means a new
    /// control process.
    pub fn control_generation(&self) -> u64 {
        // SYNC POINT: pairs with control's Release store in `DaemonShm::open`.
        self.shared
            .header()
            .control_generation
            .0
            .load(Ordering::Acquire)
    }

    pub fn path(&self) -> Option<&Path> {
        self.shared.seg.path()
    }
}

impl Drop for DaemonSide {
    fn drop(&mut self) {
        if let Some(l) = &self.link {
            let _ = std::fs::remove_file(l);
        }
    }
}

impl ControlSide {
    /// How many workers the daemon runs (each with its own rings).
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// Queues a command for `worker`; `Err(Full)` when it is not draining (retry later).
    /// Panics on a worker the daemon does not have.
    pub fn send_command(&mut self, worker: usize, req_id: u64, c: &Command) -> Result<(), Full> {
        self.workers[worker].commands.push(c.encode(req_id))
    }

    /// `worker`'s next reply or event; `Some(Err)` for a slot that does not decode.
    pub fn recv_upcall(&mut self, worker: usize) -> Option<Result<Upcall, Error>> {
        self.workers[worker]
            .upcalls
            .pop()
            .map(|m| Upcall::decode(&m))
    }

    /// About to sleep on the bell: from now on the workers ring it. Look at every upcall
    /// ring once more after this ([`ControlSide::upcalls_waiting`]).
    pub fn sleeping(&self) {
        self.shared
            .header()
            .control_asleep
            .0
            .store(1, Ordering::SeqCst);
        // SYNC POINT: pairs with the fence in `DaemonSide::send_upcall`.
        fence(Ordering::SeqCst);
    }

    /// Awake again: the workers stop ringing.
    pub fn awake(&self) {
        self.shared
            .header()
            .control_asleep
            .0
            .store(0, Ordering::Relaxed);
    }

    /// Whether any worker's upcall ring holds something.
    pub fn upcalls_waiting(&mut self) -> bool {
        self.workers.iter_mut().any(|w| !w.upcalls.is_empty())
    }

    /// `worker`'s heartbeat counter; if it stops moving the worker is stuck or dead.
    pub fn heartbeat(&self, worker: usize) -> u64 {
        // SYNC POINT: pairs with the daemon's Release store in `DaemonSide::beat`.
        self.shared
            .heartbeat(self.workers[worker].beat_at)
            .load(Ordering::Acquire)
    }

    /// The generation of the daemon this side is attached to.
    pub fn generation(&self) -> u64 {
        self.shared.generation
    }

    pub fn daemon_pid(&self) -> u32 {
        self.shared.pid
    }

    /// Whether the daemon's process still runs ([`crate::process::runs`]: one that exited
    /// and was not yet waited for by its parent is gone).
    pub fn daemon_alive(&self) -> bool {
        crate::process::runs(self.shared.pid)
    }

    /// Whether the path this side was opened from is gone or now names another segment
    /// (a restarted daemon): reattach with [`DaemonShm::open`] and report it.
    pub fn daemon_replaced(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(&self.path) {
            Ok(m) => (m.dev(), m.ino()) != self.file_id,
            Err(_) => true,
        }
    }
}

/// Control's end of its bell: the named pipe it sleeps on, removed when dropped.
#[cfg(not(loom))]
pub struct ControlBell {
    pipe: File,
    path: PathBuf,
}

#[cfg(not(loom))]
impl ControlBell {
    /// Makes the bell in `dir` (the directory of the daemon segment's link), replacing a
    /// stale one.
    pub fn create(dir: &Path) -> Result<ControlBell, Error> {
        let path = dir.join(CONTROL_BELL);
        let pipe = crate::wake::make_pipe(&path)?;
        Ok(ControlBell { pipe, path })
    }

    /// The descriptor to wait on: readable once a worker rang.
    pub fn fd(&self) -> RawFd {
        self.pipe.as_raw_fd()
    }

    /// Takes what was rung, so that the bell waits again.
    pub fn drain(&self) {
        crate::wake::drain_pipe(&self.pipe);
    }
}

#[cfg(not(loom))]
impl Drop for ControlBell {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::command::{reply_status, Chunk};

    #[test]
    fn command_reply_round_trip_and_heartbeat() {
        let name = format!("iwarp-test-daemon-{}", std::process::id());
        let link = std::env::temp_dir().join(format!("{name}.link"));
        let mut d = DaemonShm::create(&name, Some(&link), 4, 4, HugePolicy::Auto).unwrap();
        let mut c = DaemonShm::open(&link, 77).unwrap();
        assert_eq!(c.generation(), d.generation());
        assert_eq!(d.control_generation(), 77);
        assert_eq!(c.daemon_pid(), std::process::id());
        assert!(c.daemon_alive());
        assert!(!c.daemon_replaced());

        let h0 = c.heartbeat(0);
        d.beat();
        assert_eq!(c.heartbeat(0), h0 + 1);

        for i in 0..4 {
            c.send_command(0, i, &Command::TcpClose { conn: i as u32 })
                .unwrap();
        }
        assert_eq!(
            c.send_command(0, 9, &Command::Shutdown),
            Err(Full),
            "back-pressure"
        );
        for i in 0..4 {
            let (req, cmd) = d.recv_command().unwrap().unwrap();
            assert_eq!((req, cmd), (i, Command::TcpClose { conn: i as u32 }));
            d.send_upcall(&Upcall::Reply {
                req_id: req,
                status: reply_status::OK,
                value: i * 10,
            })
            .unwrap();
        }
        assert!(d.recv_command().is_none());
        for i in 0..4 {
            assert_eq!(
                c.recv_upcall(0).unwrap().unwrap(),
                Upcall::Reply {
                    req_id: i,
                    status: 0,
                    value: i * 10
                }
            );
        }
        d.send_upcall(&Upcall::TcpBytes {
            conn: 3,
            bytes: Chunk::new(b"MPA ID Req Frame"),
        })
        .unwrap();
        match c.recv_upcall(0).unwrap().unwrap() {
            Upcall::TcpBytes { conn: 3, bytes } => {
                assert_eq!(bytes.as_bytes(), b"MPA ID Req Frame")
            }
            other => panic!("{other:?}"),
        }
        drop(d);
        assert!(c.daemon_replaced(), "segment and link removed");
        assert!(!link.exists());
    }

    #[test]
    fn each_worker_has_its_own_rings_and_heartbeat() {
        let name = format!("iwarp-test-daemon-w-{}", std::process::id());
        let link = std::env::temp_dir().join(format!("{name}.link"));
        let mut d =
            DaemonShm::create_workers(&name, Some(&link), 3, 4, 8, HugePolicy::Auto).unwrap();
        assert_eq!(d.iter().map(|s| s.worker()).collect::<Vec<_>>(), [0, 1, 2]);
        let mut c = DaemonShm::open(&link, 5).unwrap();
        assert_eq!(c.worker_count(), 3);
        for (w, side) in d.iter().enumerate() {
            for _ in 0..=w {
                side.beat();
            }
        }
        assert_eq!((c.heartbeat(0), c.heartbeat(1), c.heartbeat(2)), (1, 2, 3));
        // A command for worker 2 reaches worker 2 only; its reply comes back on its ring.
        c.send_command(
            2,
            42,
            &Command::AllocPd {
                pd: crate::id::PdId(7),
            },
        )
        .unwrap();
        assert!(d[0].recv_command().is_none() && d[1].recv_command().is_none());
        let (req, cmd) = d[2].recv_command().unwrap().unwrap();
        assert_eq!(
            (req, cmd),
            (
                42,
                Command::AllocPd {
                    pd: crate::id::PdId(7)
                }
            )
        );
        let reply = Upcall::Reply {
            req_id: 42,
            status: reply_status::OK,
            value: 0,
        };
        d[2].send_upcall(&reply).unwrap();
        assert!(c.recv_upcall(0).is_none() && c.recv_upcall(1).is_none());
        assert_eq!(c.recv_upcall(2).unwrap().unwrap(), reply);
        // Each worker's command ring fills on its own.
        for i in 0..4 {
            c.send_command(1, i, &Command::Shutdown).unwrap();
        }
        assert_eq!(c.send_command(1, 9, &Command::Shutdown), Err(Full));
        assert!(c.send_command(0, 9, &Command::Shutdown).is_ok());
        // The link goes with worker 0's side, the segment with the last side.
        let seg = d[0].path().unwrap().to_path_buf();
        drop(d.remove(0));
        assert!(!link.exists());
        assert!(seg.exists(), "workers 1 and 2 still map it");
        drop(d);
        assert!(!seg.exists());
        assert!(
            DaemonShm::create_workers(&name, None, MAX_WORKERS + 1, 4, 4, HugePolicy::Auto)
                .is_err()
        );
    }

    fn rung(bell: &ControlBell, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd: bell.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call.
        unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
    }

    /// A worker rings control's bell for an upcall only while control sleeps, and a
    /// drained bell waits again.
    #[test]
    fn an_upcall_rings_a_sleeping_control_only() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("iwarp-test-daemon-bell-{}", std::process::id());
        let link = dir.path().join("daemon.shm");
        let mut d = DaemonShm::create(&name, Some(&link), 4, 4, HugePolicy::Off).unwrap();
        let mut c = DaemonShm::open(&link, 3).unwrap();
        let bell = ControlBell::create(dir.path()).unwrap();
        let up = Upcall::TcpEstablished { conn: 1 };

        d.send_upcall(&up).unwrap();
        assert!(!rung(&bell, 0), "rung while control is awake");
        assert!(c.upcalls_waiting());
        c.recv_upcall(0).unwrap().unwrap();
        assert!(!c.upcalls_waiting());

        c.sleeping();
        d.send_upcall(&up).unwrap();
        assert!(rung(&bell, 0), "not rung while control sleeps");
        c.awake();
        bell.drain();
        assert!(!rung(&bell, 0), "a drained bell still reads as rung");
        assert_eq!(c.recv_upcall(0).unwrap().unwrap(), up);

        // A new control makes a new bell; the worker's writer to the old one is dropped
        // and the new one is rung.
        drop(bell);
        let bell = ControlBell::create(dir.path()).unwrap();
        c.sleeping();
        d.send_upcall(&up).unwrap();
        d.send_upcall(&up).unwrap();
        assert!(rung(&bell, 0), "the new bell was not rung");
        drop(bell);
        assert!(!dir.path().join(CONTROL_BELL).exists(), "bell left behind");
        // A control that died asleep leaves its word set; the next one to attach is awake.
        assert!(d.control_asleep());
        drop(c);
        let _c = DaemonShm::open(&link, 4).unwrap();
        assert!(!d.control_asleep(), "a new control starts asleep");
    }

    /// A worker thread queues 20 000 upcalls; control sleeps on its bell whenever it has
    /// taken everything, with no timeout short enough to hide a lost ring (a lost one leaves
    /// it asleep for 5 s, and the test fails).
    #[test]
    fn no_upcall_is_left_asleep() {
        const N: u64 = 20_000;
        let dir = tempfile::tempdir().unwrap();
        let name = format!("iwarp-test-daemon-asleep-{}", std::process::id());
        let link = dir.path().join("daemon.shm");
        let mut d = DaemonShm::create(&name, Some(&link), 4, 8, HugePolicy::Off).unwrap();
        let mut c = DaemonShm::open(&link, 3).unwrap();
        let bell = ControlBell::create(dir.path()).unwrap();
        let worker = std::thread::spawn(move || {
            for i in 0..N {
                let u = Upcall::Reply {
                    req_id: i,
                    status: reply_status::OK,
                    value: 0,
                };
                while d.send_upcall(&u).is_err() {
                    std::thread::yield_now();
                }
            }
            d
        });
        let (mut seen, mut sleeps) = (0, 0);
        while seen < N {
            if let Some(u) = c.recv_upcall(0) {
                assert!(matches!(u.unwrap(), Upcall::Reply { req_id, .. } if req_id == seen));
                seen += 1;
                continue;
            }
            c.sleeping();
            if !c.upcalls_waiting() {
                let started = std::time::Instant::now();
                rung(&bell, 5000);
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(5),
                    "asleep with {seen} of {N} taken: a ring was lost"
                );
                sleeps += 1;
            }
            c.awake();
            bell.drain();
        }
        drop(worker.join().unwrap());
        assert!(sleeps > 0, "control never slept: the test tested nothing");
    }
}
