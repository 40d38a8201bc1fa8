//! The transports under test, behind two traits:
//!
//! - [`PingPong`]: one exchange in flight. `round_trip` sends one message (or performs one
//!   one-sided operation) and returns when its answer is back; the runner times each call.
//! - [`Stream`]: many in flight. `post` starts message `seq` (sequence numbers count from 0
//!   without gaps), `poll_delivered` reports the messages that have arrived where they were
//!   going, in order; the runner keeps at most a window of them posted but not delivered.
//!
//! A [`Transport`] sets both up for one exchange and size, and tears them down when dropped
//! or on `teardown`. Implementations: [`tcp`] (kernel TCP on loopback), [`shm`] (the floor: two
//! pinned threads, or two processes, through shared memory) and `verbs` (iWARP through the
//! verbs library).
//!
//! "Delivered" means where the data is usable: the receiver's buffer for a message, Send and
//! Write with Immediate (receive completion), the initiator's sink buffer for Read and the
//! atomics; for a plain RDMA Write, which tells the target nothing, the initiator's send
//! completion.

pub mod shm;
pub mod tcp;
pub mod verbs;

use crate::error::Result;
use crate::stages::{DaemonStages, StageTimes};
use crate::workload::{Exchange, TransportKind};

/// What one set-up is for.
#[derive(Debug, Clone)]
pub struct Setup {
    pub exchange: Exchange,
    /// Message (or operation) length in octets.
    pub size: usize,
    /// Messages in flight at most (1 for a ping-pong).
    pub window: usize,
    /// The core the responder / receiver side is pinned to, if any.
    pub responder_core: Option<usize>,
    /// Whether the transport times its stages (adds clock reads to the measured path).
    pub stages: bool,
}

/// One exchange in flight at a time.
pub trait PingPong: Send {
    /// One round trip: returns when the answer is back.
    fn round_trip(&mut self) -> Result<()>;

    /// Accumulated per-stage times since the last `reset_stages` (where `Setup::stages`).
    fn stages(&self) -> StageTimes {
        StageTimes::default()
    }

    /// Forgets the stage times gathered so far (after warm-up).
    fn reset_stages(&mut self) {}

    /// Stops the responder and releases everything; errors the responder saw surface here.
    fn teardown(self: Box<Self>) -> Result<()>;
}

/// Many exchanges in flight.
pub trait Stream: Send {
    /// Starts message `seq`. `Ok(false)`: the transport has no room now (nothing was posted,
    /// try again after polling).
    fn post(&mut self, seq: u64) -> Result<bool>;

    /// Calls `delivered(seq)` for every message delivered since the last call, in order, and
    /// returns how many. Does not block for long.
    fn poll_delivered(&mut self, delivered: &mut dyn FnMut(u64)) -> Result<usize>;

    /// Stops the receiving side and releases everything.
    fn teardown(self: Box<Self>) -> Result<()>;
}

/// A transport: builds ping-pongs and streams.
pub trait Transport: Sync {
    fn kind(&self) -> TransportKind;

    /// Whether it can run `exchange` (baselines run plain messages; verbs runs operations).
    fn supports(&self, exchange: Exchange) -> bool;

    fn ping_pong(&self, setup: &Setup) -> Result<Box<dyn PingPong>>;

    fn stream(&self, setup: &Setup) -> Result<Box<dyn Stream>>;

    /// The daemons' cumulative stage counters (see [`crate::stages`]), for transports that
    /// run through daemons.
    fn daemon_stages(&self) -> Option<DaemonStages> {
        None
    }

    /// The daemons' memory: when they were idle (before any application) and now.
    fn daemon_memory(&self) -> Vec<crate::stages::DaemonMemory> {
        Vec::new()
    }

    /// Releases what the transport holds (daemons it started); errors say what was left.
    fn shutdown(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// Pins the calling thread to `core` when one is given; a failure to pin is reported once per
/// thread on stderr and the measurement goes on unpinned (a container may forbid it).
pub fn pin(core: Option<usize>) {
    if let Some(id) = core {
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            eprintln!("iwarp-bench: warning: could not pin a thread to core {id}");
        }
    }
}

/// A polite busy-wait: spins first (the fast case), then yields the core so that a loaded or
/// oversubscribed machine (fewer cores than busy threads) still makes progress. Spinning long
/// pays only where every busy thread has a core of its own: on a small machine a thread that
/// spins for its full budget holds a core the daemon it waits for needs, so the budget is
/// short there (measured on 2 vCPUs: RDMA Write 8 B p50 264 µs with the long budget, 119 µs
/// with the short one).
#[derive(Debug, Default)]
pub struct Backoff {
    spins: u32,
}

/// Cores from which the long spin budget is used: two benchmark threads and two daemons
/// busy at once, with room for the control planes and the kernel.
const CORES_FOR_LONG_SPINS: usize = 8;

fn spin_limit() -> u32 {
    static LIMIT: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores >= CORES_FOR_LONG_SPINS {
            1 << 12
        } else {
            1 << 6
        }
    })
}

/// Set in a process that shares the machine with many others of its kind (an `--apps`
/// child): see [`Backoff::snooze`].
static CROWDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Waits sleep once they go on (see [`Backoff::snooze`]): for a process that is one of
/// hundreds on the machine.
pub fn crowded() {
    CROWDED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Yields a crowded process makes before it sleeps.
const YIELDS_BEFORE_SLEEP: u32 = 64;
/// A crowded process's longest sleep while it waits: hundreds of applications share the
/// endpoint's throughput, so each waits milliseconds for a window's completions anyway.
const LONGEST_SLEEP: std::time::Duration = std::time::Duration::from_millis(8);

impl Backoff {
    pub fn new() -> Backoff {
        Backoff { spins: 0 }
    }

    /// Spins, then yields; in a [`crowded`] process, then sleeps (50 µs, doubling to 8 ms):
    /// hundreds of processes that only yield leave the daemons they wait for a few
    /// hundredths of the cores (a yielding thread stays runnable), and the daemons'
    /// timers expire.
    pub fn snooze(&mut self) {
        let limit = spin_limit();
        if self.spins < limit {
            self.spins += 1;
            std::hint::spin_loop();
            return;
        }
        if !CROWDED.load(std::sync::atomic::Ordering::Relaxed)
            || self.spins < limit + YIELDS_BEFORE_SLEEP
        {
            self.spins = self.spins.saturating_add(1);
            std::thread::yield_now();
            return;
        }
        let doublings = (self.spins - limit - YIELDS_BEFORE_SLEEP).min(8);
        self.spins = self.spins.saturating_add(1);
        let sleep = std::time::Duration::from_micros(50 << doublings).min(LONGEST_SLEEP);
        std::thread::sleep(sleep);
    }

    pub fn reset(&mut self) {
        self.spins = 0;
    }
}
