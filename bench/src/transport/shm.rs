//! The floor: two pinned threads (or two processes) exchanging through shared memory, with no
//! protocol at all. Nothing that moves a message between two cores can beat it.
//!
//! Both sides map one region:
//!
//! ```text
//! 0      PING line: seq (u64), then up to 56 payload octets inline
//! 128    PONG line: seq (u64), then up to 56 payload octets inline
//! 256    CTRL line: ready, stop, role, len, slots, peer error
//! 384    HEAD line: stream producer index
//! 512    TAIL line: stream consumer index
//! 4096   data: ping-pong buffers A and B, or the stream's slots
//! ```
//!
//! Ping-pong: the client writes its payload (inline in the PING line when it fits, so a small
//! message is one cache line bouncing; else into buffer A), then stores the sequence number
//! with Release; the responder Acquire-loads it, copies the payload into the reply (PONG line
//! or buffer B) and stores the sequence number into PONG with Release; the client Acquire-loads
//! it and copies the reply out. Each side writes a buffer only while the other cannot be
//! reading it (it is waiting for the next sequence number), so the plain copies never race.
//!
//! Stream: a single-producer single-consumer ring of `slots` message slots. The producer copies
//! a message into slot `head % slots` and publishes `head + 1` (Release); the consumer copies
//! it out and publishes `tail + 1` (Release), which is what "delivered" means here.
//!
//! The two-process variant maps a file under /dev/shm (or the temp dir) and runs the peer side
//! in a child process: this executable started with `--shm-peer FILE` (see `serve_file`).

use super::{pin, Backoff, PingPong, Setup, Stream, Transport};
use crate::error::{BenchError, Result};
use crate::stages::StageTimes;
use crate::workload::{Exchange, TransportKind};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const LINE: usize = 128;
const PING: usize = 0;
const PONG: usize = LINE;
const CTRL: usize = 2 * LINE;
const HEAD: usize = 3 * LINE;
const TAIL: usize = 4 * LINE;
const DATA: usize = 4096;
/// Payload octets that fit in a flag line after the sequence number.
const INLINE: usize = 56;

// CTRL words.
const READY: usize = CTRL;
const STOP: usize = CTRL + 8;
const ROLE: usize = CTRL + 16;
const LEN: usize = CTRL + 24;
const SLOTS: usize = CTRL + 32;
const PEER_ERR: usize = CTRL + 40;
const MAGIC: usize = CTRL + 48;

const ROLE_PING_PONG: u64 = 1;
const ROLE_STREAM: u64 = 2;
const MAGIC_VALUE: u64 = 0x6977_6172_7062_6e63; // "iwarpbnc"

/// At most this much memory for a stream's slots.
const MAX_RING_BYTES: usize = 256 << 20;

fn err(kind: TransportKind, e: impl std::fmt::Display) -> BenchError {
    BenchError::transport(kind.name(), e)
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// A shared mapping (anonymous for threads, a file for processes), unmapped on drop.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region is plain shared memory. All cross-thread synchronization goes through
// the `AtomicU64` words returned by `word`; the plain byte copies are ordered by them as the
// module documentation describes.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` only hands out atomics and raw pointers.
unsafe impl Sync for Region {}

impl Region {
    fn map(fd: libc::c_int, len: usize) -> std::io::Result<Region> {
        let flags = if fd < 0 {
            libc::MAP_SHARED | libc::MAP_ANONYMOUS
        } else {
            libc::MAP_SHARED
        };
        // SAFETY: a fresh mapping of `len` octets; the kernel picks the address. `fd` is -1 for
        // an anonymous mapping or an open file at least `len` long.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = NonNull::new(p as *mut u8).ok_or_else(std::io::Error::last_os_error)?;
        Ok(Region { ptr, len })
    }

    /// Anonymous shared memory for two threads (zero-filled).
    pub fn anonymous(len: usize) -> std::io::Result<Region> {
        Region::map(-1, len)
    }

    /// Creates `path` (which must not exist) of `len` octets and maps it (zero-filled).
    pub fn create_file(path: &Path, len: usize) -> std::io::Result<Region> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        f.set_len(len as u64)?;
        Region::map(f.as_raw_fd(), len)
    }

    /// Maps an existing region file whole.
    pub fn open_file(path: &Path) -> std::io::Result<Region> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let len = f.metadata()?.len() as usize;
        if len < DATA {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a shared-memory benchmark region (too short)",
            ));
        }
        Region::map(f.as_raw_fd(), len)
    }

    /// The 8-octet word at `off` (a multiple of 8 inside the region) as an atomic.
    pub(crate) fn word(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off + 8 <= self.len,
            "word offset {off} out of range"
        );
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned); the memory lives as
        // long as `self`, and every access to these words is atomic.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }

    /// A raw pointer to `len` octets at `off`, bounds-checked.
    fn bytes(&self, off: usize, len: usize) -> *mut u8 {
        assert!(off + len <= self.len, "range {off}+{len} out of the region");
        // SAFETY: in bounds of the mapping (checked above).
        unsafe { self.ptr.as_ptr().add(off) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `map` created; nothing borrows it any more.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}

/// Where the payload of each direction lives for a ping-pong of `len` octets.
fn ping_pong_layout(len: usize) -> (usize, usize, usize) {
    if len <= INLINE {
        (PING + 8, PONG + 8, DATA)
    } else {
        let b = DATA + round_up(len, 4096);
        (DATA, b, b + round_up(len, 4096))
    }
}

fn stream_layout(len: usize, window: usize) -> (usize, usize, usize) {
    let stride = round_up(len.max(1), 64);
    let slots = window.clamp(1, (MAX_RING_BYTES / stride).max(1));
    (stride, slots, DATA + slots * stride)
}

/// Copies `len` octets between a private buffer and the region.
///
/// # Safety
/// `dst`/`src` must be valid for `len` octets and not written concurrently (the protocol in
/// the module documentation guarantees it for region buffers).
unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    if len > 0 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

/// Waits until `word >= target`, or the stop word is set (then false).
fn wait_at_least(r: &Region, off: usize, target: u64) -> bool {
    let mut b = Backoff::new();
    let mut n: u32 = 0;
    loop {
        // SYNC POINT: Acquire pairs with the other side's Release store of this word.
        if r.word(off).load(Ordering::Acquire) >= target {
            return true;
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(64) && r.word(STOP).load(Ordering::Acquire) != 0 {
            return false;
        }
        b.snooze();
    }
}

/// The responder / consumer side, run by a thread or by the peer process until told to stop.
fn serve(r: &Region) -> Result<(), String> {
    let len = r.word(LEN).load(Ordering::Acquire) as usize;
    let slots = r.word(SLOTS).load(Ordering::Acquire) as usize;
    // The header comes from a file: check it before any layout arithmetic uses it.
    if len > r.len || slots > r.len {
        return Err("the region header names more than the region holds".into());
    }
    match r.word(ROLE).load(Ordering::Acquire) {
        ROLE_PING_PONG => {
            let (a, b, end) = ping_pong_layout(len);
            if end > r.len {
                return Err("region too small for its ping-pong".into());
            }
            let mut seq = 1;
            while wait_at_least(r, PING, seq) {
                // SAFETY: the client wrote A before its Release store of `seq` and does not
                // touch A or B again until it sees PONG == seq; both ranges are in bounds.
                unsafe { copy(r.bytes(a, len), r.bytes(b, len), len) };
                // SYNC POINT: Release publishes B to the client's Acquire load of PONG.
                r.word(PONG).store(seq, Ordering::Release);
                seq += 1;
            }
            Ok(())
        }
        ROLE_STREAM => {
            let (stride, _, _) = stream_layout(len, slots);
            if slots == 0 || slots.saturating_mul(stride).saturating_add(DATA) > r.len {
                return Err("region too small for its ring".into());
            }
            let mut private = vec![0u8; len];
            let mut tail: u64 = 0;
            loop {
                if !wait_at_least(r, HEAD, tail + 1) {
                    return Ok(());
                }
                // SYNC POINT: Acquire pairs with the producer's Release store of HEAD.
                let head = r.word(HEAD).load(Ordering::Acquire);
                while tail < head {
                    let slot = DATA + (tail as usize % slots) * stride;
                    // SAFETY: the producer wrote this slot before publishing HEAD past it and
                    // will not reuse it until TAIL passes it.
                    unsafe { copy(r.bytes(slot, len), private.as_mut_ptr(), len) };
                    tail += 1;
                }
                // One store per batch (as a ring consumer does): the producer's cached view of
                // TAIL is refreshed once per batch, not once per message.
                // SYNC POINT: Release hands the slots back to the producer.
                r.word(TAIL).store(tail, Ordering::Release);
            }
        }
        other => Err(format!("unknown role {other} in the region")),
    }
}

/// The peer process's entry point (`iwarp-bench --shm-peer FILE [--shm-peer-core N]`): maps the
/// region the parent created, says ready, serves until the parent sets stop.
pub fn serve_file(path: &Path, core: Option<usize>) -> Result<()> {
    pin(core);
    let kind = TransportKind::ShmProc;
    let r = Region::open_file(path).map_err(|e| err(kind, format!("{}: {e}", path.display())))?;
    if r.word(MAGIC).load(Ordering::Acquire) != MAGIC_VALUE {
        return Err(err(
            kind,
            format!("{}: not a benchmark region", path.display()),
        ));
    }
    r.word(READY).store(1, Ordering::Release);
    serve(&r).map_err(|m| {
        r.word(PEER_ERR).store(1, Ordering::Release);
        err(kind, m)
    })
}

/// The other side: a thread in this process, or a child process.
enum Peer {
    Thread(JoinHandle<Result<(), String>>),
    Process(Child),
}

struct Shared {
    kind: TransportKind,
    region: Arc<Region>,
    peer: Option<Peer>,
}

impl Shared {
    fn start(
        kind: TransportKind,
        exe: Option<&Path>,
        role: u64,
        len: usize,
        slots: usize,
        region_len: usize,
        core: Option<usize>,
    ) -> Result<Shared> {
        let file = match exe {
            Some(_) => Some(region_file()?),
            None => None,
        };
        let region = match &file {
            Some(p) => Region::create_file(p, region_len),
            None => Region::anonymous(region_len),
        }
        .map_err(|e| err(kind, format!("mapping {region_len} octets: {e}")))?;
        region.word(ROLE).store(role, Ordering::Relaxed);
        region.word(LEN).store(len as u64, Ordering::Relaxed);
        region.word(SLOTS).store(slots as u64, Ordering::Relaxed);
        // SYNC POINT: Release publishes the header to the peer's Acquire load of MAGIC.
        region.word(MAGIC).store(MAGIC_VALUE, Ordering::Release);
        let region = Arc::new(region);
        let peer = match (exe, &file) {
            (Some(exe), Some(path)) => {
                let mut cmd = Command::new(exe);
                cmd.arg("--shm-peer").arg(path);
                if let Some(c) = core {
                    cmd.arg("--shm-peer-core").arg(c.to_string());
                }
                let (child, _) =
                    start_peer(&mut cmd, path, &region, READY).map_err(|m| err(kind, m))?;
                Peer::Process(child)
            }
            _ => {
                let r = region.clone();
                let h = std::thread::Builder::new()
                    .name("shm-peer".into())
                    .spawn(move || {
                        pin(core);
                        serve(&r)
                    })
                    .map_err(|e| BenchError::io("spawning the shared-memory peer", e))?;
                Peer::Thread(h)
            }
        };
        Ok(Shared {
            kind,
            region,
            peer: Some(peer),
        })
    }

    fn peer_gone(&mut self) -> bool {
        match &mut self.peer {
            Some(Peer::Thread(h)) => h.is_finished(),
            Some(Peer::Process(c)) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    fn stop(&mut self) -> Result<()> {
        // SYNC POINT: Release; the peer polls STOP with Acquire while it waits.
        self.region.word(STOP).store(1, Ordering::Release);
        match self.peer.take() {
            Some(Peer::Thread(h)) => h
                .join()
                .map_err(|_| err(self.kind, "the peer thread panicked"))?
                .map_err(|m| err(self.kind, m)),
            Some(Peer::Process(mut c)) => {
                let deadline = Instant::now() + Duration::from_secs(5);
                loop {
                    match c.try_wait() {
                        Ok(Some(st)) if st.success() => return Ok(()),
                        Ok(Some(st)) => {
                            return Err(err(self.kind, format!("the peer process exited: {st}")))
                        }
                        Ok(None) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(1))
                        }
                        _ => {
                            let _ = c.kill();
                            let _ = c.wait();
                            return Err(err(self.kind, "the peer process did not stop"));
                        }
                    }
                }
            }
            None => Ok(()),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A fresh name for a region file (in `/dev/shm` where there is one).
pub(crate) fn region_file() -> Result<PathBuf> {
    use std::sync::atomic::AtomicU32;
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = Path::new("/dev/shm");
    let dir = if dir.is_dir() {
        dir.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    Ok(dir.join(format!(
        "iwarp-bench-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )))
}

/// Starts `cmd`, a peer process handed the region file `path`, and waits for it to store
/// its sign of readiness in the region's word at `off` (see [`wait_for_word`]). The file is
/// removed either way: both have mapped it, or the start failed. A peer that did not get
/// ready is killed. Returns the process and the word's value.
pub(crate) fn start_peer(
    cmd: &mut Command,
    path: &Path,
    region: &Region,
    off: usize,
) -> Result<(Child, u64), String> {
    let spawned = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", Path::new(cmd.get_program()).display()));
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    };
    let ready = wait_for_word(region, off, &mut child);
    // Mapped by both now (or failed): the name is no longer needed.
    let _ = std::fs::remove_file(path);
    match ready {
        Ok(v) => Ok((child, v)),
        Err(m) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(m)
        }
    }
}

/// Waits up to 10 s for a peer process to store a non-zero value in the region's word at
/// `off` (its sign that it mapped the region and is ready), and returns the value; an
/// error if `child` exits first or the time runs out.
fn wait_for_word(r: &Region, off: usize, child: &mut Child) -> Result<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // SYNC POINT: Acquire pairs with the peer's Release store of the word.
        let v = r.word(off).load(Ordering::Acquire);
        if v != 0 {
            return Ok(v);
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("the peer process exited before it was ready: {st}"));
        }
        if Instant::now() > deadline {
            return Err("the peer process did not map the region within 10 s".into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The shared-memory floor: `ShmTransport::threads()` or `ShmTransport::processes(exe)`.
#[derive(Debug, Clone)]
pub struct ShmTransport {
    /// The executable to start as the peer process (`iwarp-bench`); `None`: a thread.
    exe: Option<PathBuf>,
}

impl ShmTransport {
    pub fn threads() -> ShmTransport {
        ShmTransport { exe: None }
    }

    pub fn processes(exe: PathBuf) -> ShmTransport {
        ShmTransport { exe: Some(exe) }
    }
}

impl Transport for ShmTransport {
    fn kind(&self) -> TransportKind {
        if self.exe.is_some() {
            TransportKind::ShmProc
        } else {
            TransportKind::Shm
        }
    }

    fn supports(&self, exchange: Exchange) -> bool {
        exchange == Exchange::Message
    }

    fn ping_pong(&self, setup: &Setup) -> Result<Box<dyn PingPong>> {
        let len = setup.size;
        let (a, b, end) = ping_pong_layout(len);
        let shared = Shared::start(
            self.kind(),
            self.exe.as_deref(),
            ROLE_PING_PONG,
            len,
            0,
            end,
            setup.responder_core,
        )?;
        Ok(Box::new(ShmPingPong {
            region: shared.region.clone(),
            shared,
            a,
            b,
            len,
            seq: 0,
            payload: vec![0x5a; len],
            stages: setup.stages,
            times: StageTimes::default(),
        }))
    }

    fn stream(&self, setup: &Setup) -> Result<Box<dyn Stream>> {
        let len = setup.size;
        let (stride, slots, end) = stream_layout(len, setup.window);
        let shared = Shared::start(
            self.kind(),
            self.exe.as_deref(),
            ROLE_STREAM,
            len,
            slots,
            end,
            setup.responder_core,
        )?;
        Ok(Box::new(ShmStream {
            region: shared.region.clone(),
            shared,
            len,
            stride,
            slots,
            head: 0,
            tail_cache: 0,
            reported: 0,
            payload: vec![0x5a; len],
        }))
    }
}

struct ShmPingPong {
    region: Arc<Region>,
    shared: Shared,
    a: usize,
    b: usize,
    len: usize,
    seq: u64,
    payload: Vec<u8>,
    stages: bool,
    times: StageTimes,
}

impl PingPong for ShmPingPong {
    fn round_trip(&mut self) -> Result<()> {
        let r = &*self.region;
        let t0 = self.stages.then(Instant::now);
        self.seq += 1;
        // SAFETY: the responder reads A only after our Release store below and is waiting
        // for it now; in bounds by the layout.
        unsafe { copy(self.payload.as_ptr(), r.bytes(self.a, self.len), self.len) };
        // SYNC POINT: Release publishes A to the responder's Acquire load of PING.
        r.word(PING).store(self.seq, Ordering::Release);
        let t1 = self.stages.then(Instant::now);
        let mut b = Backoff::new();
        let mut n: u32 = 0;
        // SYNC POINT: Acquire pairs with the responder's Release store of PONG.
        while r.word(PONG).load(Ordering::Acquire) != self.seq {
            n = n.wrapping_add(1);
            if n.is_multiple_of(4096) && self.shared.peer_gone() {
                return Err(err(self.shared.kind, "the responder stopped"));
            }
            b.snooze();
        }
        // SAFETY: the responder wrote B before PONG and waits for the next PING now.
        unsafe {
            copy(
                r.bytes(self.b, self.len),
                self.payload.as_mut_ptr(),
                self.len,
            )
        };
        if let (Some(t0), Some(t1)) = (t0, t1) {
            self.times
                .add((t1 - t0).as_nanos() as u64, t1.elapsed().as_nanos() as u64);
        }
        Ok(())
    }

    fn stages(&self) -> StageTimes {
        self.times
    }

    fn reset_stages(&mut self) {
        self.times = StageTimes::default();
    }

    fn teardown(mut self: Box<Self>) -> Result<()> {
        self.shared.stop()
    }
}

struct ShmStream {
    region: Arc<Region>,
    shared: Shared,
    len: usize,
    stride: usize,
    slots: usize,
    head: u64,
    tail_cache: u64,
    reported: u64,
    payload: Vec<u8>,
}

impl Stream for ShmStream {
    fn post(&mut self, _seq: u64) -> Result<bool> {
        let r = &*self.region;
        if self.head - self.tail_cache >= self.slots as u64 {
            // SYNC POINT: Acquire pairs with the consumer's Release store of TAIL.
            self.tail_cache = r.word(TAIL).load(Ordering::Acquire);
            if self.head - self.tail_cache >= self.slots as u64 {
                return Ok(false);
            }
        }
        let slot = DATA + (self.head as usize % self.slots) * self.stride;
        // SAFETY: the consumer is done with this slot (TAIL passed it); in bounds.
        unsafe { copy(self.payload.as_ptr(), r.bytes(slot, self.len), self.len) };
        self.head += 1;
        // SYNC POINT: Release publishes the slot to the consumer's Acquire load of HEAD.
        r.word(HEAD).store(self.head, Ordering::Release);
        Ok(true)
    }

    fn poll_delivered(&mut self, delivered: &mut dyn FnMut(u64)) -> Result<usize> {
        // SYNC POINT: Acquire pairs with the consumer's Release store of TAIL.
        let tail = self.region.word(TAIL).load(Ordering::Acquire);
        self.tail_cache = tail;
        for seq in self.reported..tail {
            delivered(seq);
        }
        let n = (tail - self.reported) as usize;
        self.reported = tail;
        if n == 0 && self.head > tail && self.shared.peer_gone() {
            return Err(err(self.shared.kind, "the consumer stopped"));
        }
        Ok(n)
    }

    fn teardown(mut self: Box<Self>) -> Result<()> {
        self.shared.stop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_payloads_ride_in_the_flag_line_and_large_ones_do_not() {
        let (a, b, _) = ping_pong_layout(56);
        assert_eq!((a, b), (PING + 8, PONG + 8));
        let (a, b, end) = ping_pong_layout(57);
        assert_eq!(a, DATA);
        assert!(b >= a + 57 && end >= b + 57);
    }

    #[test]
    fn the_ring_is_capped_but_never_empty() {
        let (stride, slots, end) = stream_layout(1 << 20, 1 << 16);
        assert_eq!(stride, 1 << 20);
        assert_eq!(slots, MAX_RING_BYTES / (1 << 20));
        assert_eq!(end, DATA + slots * stride);
        let (_, slots, _) = stream_layout(0, 8);
        assert_eq!(slots, 8);
    }

    #[test]
    fn round_trips_complete_through_the_thread_floor() {
        let t = ShmTransport::threads();
        let setup = Setup {
            exchange: Exchange::Message,
            size: 100,
            window: 1,
            responder_core: None,
            stages: true,
        };
        let mut pp = t.ping_pong(&setup).unwrap();
        for _ in 0..10 {
            pp.round_trip().unwrap();
        }
        assert_eq!(pp.stages().exchanges, 10);
        pp.teardown().unwrap();
    }

    #[test]
    fn a_region_file_that_is_not_ours_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("not-a-region");
        std::fs::write(&p, vec![0u8; 8192]).unwrap();
        assert!(serve_file(&p, None).is_err());
        std::fs::write(&p, b"short").unwrap();
        assert!(serve_file(&p, None).is_err());
        // A well-formed header that names a payload larger than the file.
        let mut bytes = vec![0u8; 8192];
        bytes[MAGIC..MAGIC + 8].copy_from_slice(&MAGIC_VALUE.to_ne_bytes());
        bytes[ROLE..ROLE + 8].copy_from_slice(&ROLE_PING_PONG.to_ne_bytes());
        bytes[LEN..LEN + 8].copy_from_slice(&u64::MAX.to_ne_bytes());
        std::fs::write(&p, &bytes).unwrap();
        let e = serve_file(&p, None).unwrap_err().to_string();
        assert!(e.contains("more than the region holds"), "{e}");
    }
}
