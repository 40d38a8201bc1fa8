//! Waking an idle daemon as io_uring wakes its polling thread: per worker a "sleeping" word
//! in `wake.shm` and a named pipe (`doorbell`, `doorbell.1`, ...). Out of work, the worker
//! stores 1, fences and looks at every ring once more before it sleeps on the pipe, its port
//! and its timers; a producer publishes its ring index, fences and loads the word, writing
//! one octet to the pipe only when it reads 1. Both fences are SeqCst, so either the last
//! look sees the post or the producer sees the word: no post is left asleep, and a running
//! daemon costs a post one fence and one load. An application rings its own worker
//! ([`Waker::for_worker`]), control the worker it sent to ([`Waker::kick_worker`]).

// The word lives in a shared mapping other processes write: the loom facade (crate::sync)
// cannot stand in for it (as in `notify`).
#![allow(clippy::disallowed_types)]

use crate::error::Error;
use crate::segment::{HugePolicy, Segment, SegmentKind};
use core::sync::atomic::{fence, AtomicU32, Ordering};
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The link to the word's segment, in the runtime directory.
pub const WORD_LINK: &str = "wake.shm";
/// The named pipe, in the runtime directory.
pub const DOORBELL: &str = "doorbell";

/// The most workers the segment has words for.
pub const MAX_WORKERS: usize = 64;

/// The pipe of worker `w` in the runtime directory.
fn doorbell(runtime: &Path, w: usize) -> PathBuf {
    match w {
        0 => runtime.join(DOORBELL),
        w => runtime.join(format!("{DOORBELL}.{w}")),
    }
}

/// Worker `w`'s word (line `w + 1`; line 0 holds the number of workers).
fn word_of(seg: &Segment, w: usize) -> Result<*const AtomicU32, Error> {
    if w >= MAX_WORKERS || seg.data_len() < (w + 2) * 64 {
        return Err(Error::Layout);
    }
    // SAFETY: inside the data area (checked above), 64-aligned (the area is page-aligned).
    Ok(unsafe { seg.data().as_ptr().add((w + 1) * 64) } as *const AtomicU32)
}

/// Makes the named pipe `path` (replacing a stale one) and opens it to wait on. Read and
/// write: the sleeper holds a writer itself, so the pipe never reports end of file when the
/// last ringer closes its end, and opening never blocks.
pub(crate) fn make_pipe(path: &Path) -> Result<File, Error> {
    let _ = std::fs::remove_file(path);
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::InvalidName)?;
    // SAFETY: mkfifo reads a NUL-terminated path that lives for the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o666) } != 0 {
        return Err(io::Error::last_os_error().into());
    }
    Ok(std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?)
}

/// Takes every octet rung into `pipe` (non-blocking), so that it waits again.
pub(crate) fn drain_pipe(mut pipe: &File) {
    let mut buf = [0u8; 256];
    while matches!(pipe.read(&mut buf), Ok(n) if n > 0) {}
}

/// One worker's end: the word it sets before sleeping and the pipe it waits on.
pub struct DaemonWake {
    word: *const AtomicU32,
    _seg: Arc<Segment>,
    pipe: File,
    /// What dropping this end removes: worker 0's the word's link and its pipe, the others
    /// their pipe.
    links: Vec<PathBuf>,
}

// SAFETY: `word` points into the mapping `_seg` keeps alive and is only used atomically.
unsafe impl Send for DaemonWake {}

impl DaemonWake {
    /// Creates the segment `name` (ordinary shared memory: a few words need no hugepage) and
    /// the pipe of a daemon with one worker, linked into `runtime`, replacing a dead daemon's
    /// leftovers and refusing a living daemon's.
    pub fn create(name: &str, runtime: &Path) -> Result<DaemonWake, Error> {
        let mut ends = Self::create_workers(name, runtime, 1)?;
        ends.pop().ok_or(Error::Layout)
    }

    /// As [`DaemonWake::create`] for `workers` workers (1 to [`MAX_WORKERS`]): one end per
    /// worker, in order.
    pub fn create_workers(
        name: &str,
        runtime: &Path,
        workers: usize,
    ) -> Result<Vec<DaemonWake>, Error> {
        if !(1..=MAX_WORKERS).contains(&workers) {
            return Err(Error::Layout);
        }
        Segment::reclaim(name)?;
        let seg = Arc::new(Segment::create(
            name,
            SegmentKind::Wake,
            (workers + 1) * 64,
            HugePolicy::Off,
        )?);
        // SAFETY: line 0 of the fresh data area (page-aligned, at least 64 octets) holds the
        // number of workers; nobody reads it before the link below exists.
        unsafe { &*(seg.data().as_ptr() as *const AtomicU32) }
            .store(workers as u32, Ordering::Release);
        let link = runtime.join(WORD_LINK);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(seg.path().ok_or(Error::InvalidName)?, &link)?;
        let mut ends = Vec::with_capacity(workers);
        for w in 0..workers {
            let fifo = doorbell(runtime, w);
            let pipe = make_pipe(&fifo)?;
            ends.push(DaemonWake {
                word: word_of(&seg, w)?,
                _seg: Arc::clone(&seg),
                pipe,
                links: vec![fifo],
            });
        }
        ends[0].links.push(link);
        Ok(ends)
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: see `create`: in the live mapping, 4-aligned (the data area is page-aligned).
        unsafe { &*self.word }
    }

    /// The descriptor to wait on: readable when a producer rang.
    pub fn fd(&self) -> RawFd {
        self.pipe.as_raw_fd()
    }

    /// About to sleep: from now on producers ring. Look at every ring once more after this.
    pub fn sleeping(&self) {
        self.word().store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Awake again: producers stop ringing; what they rang is drained.
    pub fn awake(&mut self) {
        self.word().store(0, Ordering::Relaxed);
        drain_pipe(&self.pipe);
    }
}

impl Drop for DaemonWake {
    fn drop(&mut self) {
        for l in &self.links {
            let _ = std::fs::remove_file(l);
        }
    }
}

/// A producer's end: rings a worker only when it sleeps.
pub struct Waker {
    /// Each worker's word and pipe.
    bells: Vec<(*const AtomicU32, File)>,
    /// The one worker [`Waker::kick`] rings, once known ([`Waker::for_worker`]).
    only: Option<usize>,
    _seg: Segment,
}

// SAFETY: as for `DaemonWake`; `kick` takes `&self` and only loads the word and writes the
// pipe, both safe from any thread.
unsafe impl Send for Waker {}
// SAFETY: as above.
unsafe impl Sync for Waker {}

impl Waker {
    /// The waker of the daemon whose runtime directory is `runtime`.
    pub fn open(runtime: &Path) -> Result<Waker, Error> {
        let seg = Segment::open(&runtime.join(WORD_LINK), Some(SegmentKind::Wake))?;
        if seg.data_len() < 64 {
            return Err(Error::Layout);
        }
        // SAFETY: line 0 of the data area (checked long enough, page-aligned).
        let workers =
            unsafe { &*(seg.data().as_ptr() as *const AtomicU32) }.load(Ordering::Acquire);
        let mut bells = Vec::new();
        for w in 0..workers as usize {
            // Write-only and non-blocking: fails (ENXIO) when no daemon holds the pipe.
            let pipe = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(doorbell(runtime, w))?;
            bells.push((word_of(&seg, w)?, pipe));
        }
        if bells.is_empty() {
            return Err(Error::Layout);
        }
        Ok(Waker {
            bells,
            only: None,
            _seg: seg,
        })
    }

    /// This producer's rings are read by `worker` alone (control placed its application
    /// there): [`Waker::kick`] rings only it. A worker the daemon does not have leaves the
    /// waker ringing every one.
    pub fn for_worker(mut self, worker: usize) -> Waker {
        self.only = (worker < self.bells.len()).then_some(worker);
        self
    }

    /// After publishing a ring's producer index: wake the producer's worker if it sleeps
    /// (every worker that sleeps, when which one is not known).
    pub fn kick(&self) {
        fence(Ordering::SeqCst);
        match self.only {
            Some(w) => self.ring(w),
            None => (0..self.bells.len()).for_each(|w| self.ring(w)),
        }
    }

    /// After publishing a ring's producer index that only `worker` reads: wake it if it
    /// sleeps.
    pub fn kick_worker(&self, worker: usize) {
        fence(Ordering::SeqCst);
        self.ring(worker);
    }

    fn ring(&self, w: usize) {
        let Some((word, pipe)) = self.bells.get(w) else {
            return;
        };
        // SAFETY: see `DaemonWake::word`.
        if unsafe { &**word }.load(Ordering::Relaxed) != 0 {
            // A full pipe holds rings enough to wake it: nothing to do on EAGAIN.
            let _ = (&*pipe).write(&[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn wait(fd: RawFd, timeout: Duration) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call.
        unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) > 0 }
    }

    /// A producer thread publishes a counter 20 000 times with a kick after each; the daemon
    /// thread sleeps whenever it has seen everything, with no timeout short enough to hide a
    /// lost wake-up (a lost one leaves it asleep for the whole 5 s, and the test fails).
    #[test]
    fn no_post_is_left_asleep() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("iwarp-wake-test-{}", std::process::id());
        let mut d = DaemonWake::create(&name, dir.path()).unwrap();
        let w = Waker::open(dir.path()).unwrap();
        let head = Arc::new(AtomicU64::new(0));
        const N: u64 = 20_000;
        let producer = {
            let head = head.clone();
            std::thread::spawn(move || {
                for i in 1..=N {
                    head.store(i, Ordering::Release);
                    w.kick();
                    if i % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        };
        let mut seen = 0;
        let mut sleeps = 0;
        while seen < N {
            let h = head.load(Ordering::Acquire);
            if h != seen {
                seen = h;
                continue;
            }
            d.sleeping();
            if head.load(Ordering::Acquire) != seen {
                d.awake();
                continue;
            }
            let t = Instant::now();
            let rang = wait(d.fd(), Duration::from_secs(5));
            assert!(
                rang,
                "asleep {:?} with {seen} of {N} seen: a wake-up was lost",
                t.elapsed()
            );
            d.awake();
            sleeps += 1;
        }
        producer.join().unwrap();
        assert!(
            sleeps > 0,
            "the daemon never slept: the test proved nothing"
        );
    }

    #[test]
    fn a_running_daemon_is_not_rung() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("iwarp-wake-test2-{}", std::process::id());
        let mut d = DaemonWake::create(&name, dir.path()).unwrap();
        let w = Waker::open(dir.path()).unwrap();
        w.kick();
        assert!(!wait(d.fd(), Duration::ZERO), "rang while awake");
        d.sleeping();
        w.kick();
        assert!(wait(d.fd(), Duration::ZERO), "not rung while asleep");
        d.awake();
        assert!(!wait(d.fd(), Duration::ZERO), "the pipe was not drained");
        drop(d);
        assert!(!dir.path().join(WORD_LINK).exists());
        assert!(!dir.path().join(DOORBELL).exists());
        assert!(Waker::open(dir.path()).is_err(), "no daemon, no waker");
    }

    #[test]
    fn a_worker_is_rung_only_when_it_sleeps() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("iwarp-wake-test3-{}", std::process::id());
        let mut ends = DaemonWake::create_workers(&name, dir.path(), 3).unwrap();
        assert!(dir.path().join("doorbell.2").exists());
        let w = Waker::open(dir.path()).unwrap();
        let rung = |ends: &[DaemonWake]| -> Vec<bool> {
            ends.iter().map(|e| wait(e.fd(), Duration::ZERO)).collect()
        };
        ends[1].sleeping();
        w.kick();
        assert_eq!(
            rung(&ends),
            [false, true, false],
            "kick rings the sleepers only"
        );
        ends[1].awake();
        ends[0].sleeping();
        ends[2].sleeping();
        w.kick_worker(2);
        assert_eq!(
            rung(&ends),
            [false, false, true],
            "kick_worker rings that one only"
        );
        let last = ends.pop().unwrap();
        drop(ends);
        assert!(!dir.path().join(WORD_LINK).exists() && !dir.path().join(DOORBELL).exists());
        assert!(
            dir.path().join("doorbell.2").exists(),
            "worker 2's pipe is its own"
        );
        drop(last);
        assert!(!dir.path().join("doorbell.2").exists());
    }
}
