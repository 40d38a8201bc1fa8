//! The measurement loops, independent of the transport:
//!
//! - [`latency`]: ping-pong on a thread pinned to the initiator core; each round trip timed
//!   into an HdrHistogram (nanoseconds); the warm-up round trips are not recorded.
//! - [`stream`]: closed loop (bandwidth, message rate) or open loop (a set offered rate),
//!   `qps` connections spread over the initiator threads, each keeping at most `window`
//!   messages posted but not delivered. In open loop, message `i` of a connection is due at
//!   `start + i / rate`; its latency runs from that intended time to its delivery, so a stall
//!   that delays later sends is charged to them (no coordinated omission).

use crate::cli::Stop;
use crate::error::{BenchError, Result};
use crate::stages::StageTimes;
use crate::transport::{pin, Backoff, Setup, Stream, Transport};
use hdrhistogram::Histogram;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// A stream that delivers nothing for this long is reported as stalled.
const STALL: Duration = Duration::from_secs(30);

/// Set by SIGINT / SIGTERM (see [`install_interrupt`]): the loops stop with an error, so the
/// transports are torn down and spawned daemons stopped instead of left behind.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Makes Ctrl-C (and SIGTERM) end the run cleanly (for the CLI; a library user keeps its own
/// handlers).
pub fn install_interrupt() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_interrupt` is an `extern "C" fn(c_int)` that only stores to an atomic.
        unsafe { libc::signal(sig, on_interrupt as *const () as libc::sighandler_t) };
    }
}

/// An error once interrupted.
fn check_interrupt() -> Result<()> {
    if INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed) {
        Err(BenchError::Interrupted)
    } else {
        Ok(())
    }
}

/// Progress reporting (the CLI's progress bar; tests pass `&()`).
pub trait Progress: Sync {
    /// `done` exchanges of the current measurement are complete.
    fn advance(&self, done: u64);
}

impl Progress for () {
    fn advance(&self, _: u64) {}
}

impl Progress for indicatif::ProgressBar {
    fn advance(&self, done: u64) {
        self.set_position(done);
    }
}

pub struct LatencyOutcome {
    pub histogram: Histogram<u64>,
    pub stages: StageTimes,
    pub elapsed: Duration,
}

fn new_histogram() -> Histogram<u64> {
    // Auto-resizing, 3 significant digits: 0.1 % resolution at any latency.
    Histogram::<u64>::new(3).expect("3 significant figures is a valid precision")
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    // A zero reading (clock granularity) is recorded as 1 ns; nothing is dropped.
    let ns = (d.as_nanos().min(u64::MAX as u128) as u64).max(1);
    // `record` grows the auto-resizing histogram (`saturating_record` would clamp to its
    // current range instead); it can fail only past u64 range, then clamp.
    if h.record(ns).is_err() {
        h.saturating_record(ns);
    }
}

/// Ping-pong latency of `setup` on `t`.
pub fn latency(
    t: &dyn Transport,
    setup: &Setup,
    initiator_core: Option<usize>,
    warmup: u64,
    stop: Stop,
    progress: &dyn Progress,
) -> Result<LatencyOutcome> {
    std::thread::scope(|s| {
        s.spawn(|| -> Result<LatencyOutcome> {
            pin(initiator_core);
            let mut pp = t.ping_pong(setup)?;
            let run = (|| -> Result<LatencyOutcome> {
                for i in 0..warmup {
                    if i % 1024 == 0 {
                        check_interrupt()?;
                    }
                    pp.round_trip()?;
                }
                pp.reset_stages();
                let mut h = new_histogram();
                let start = Instant::now();
                let mut n: u64 = 0;
                loop {
                    match stop {
                        Stop::Iterations(k) if n >= k => break,
                        Stop::Duration(d) if n > 0 && start.elapsed() >= d => break,
                        _ => {}
                    }
                    let t0 = Instant::now();
                    pp.round_trip()?;
                    record(&mut h, t0.elapsed());
                    n += 1;
                    if n.is_multiple_of(1024) {
                        progress.advance(n);
                        check_interrupt()?;
                    }
                }
                progress.advance(n);
                Ok(LatencyOutcome {
                    histogram: h,
                    stages: pp.stages(),
                    elapsed: start.elapsed(),
                })
            })();
            let down = pp.teardown();
            let out = run?;
            down?;
            Ok(out)
        })
        .join()
        .map_err(|_| BenchError::transport(t.kind().name(), "the initiator thread panicked"))?
    })
}

/// What a stream run measured, summed over its connections.
pub struct StreamOutcome {
    pub messages: u64,
    /// Longest measured time of any initiator thread.
    pub elapsed: Duration,
    /// Open loop: latency from intended send time to delivery, nanoseconds.
    pub histogram: Option<Histogram<u64>>,
}

/// The shape of a stream run.
#[derive(Debug, Clone)]
pub struct StreamPlan {
    pub qps: usize,
    /// One per initiator thread.
    pub initiator_cores: Vec<Option<usize>>,
    /// The responder core of connection `i` is `responder_cores[i % len]`.
    pub responder_cores: Vec<Option<usize>>,
    pub warmup: u64,
    pub stop: Stop,
    /// Open loop: offered messages per second over all connections.
    pub rate: Option<f64>,
}

struct Conn {
    stream: Box<dyn Stream>,
    posted: u64,
    delivered: u64,
}

/// Bandwidth / message rate (closed loop) or open-loop latency of `setup` on `t`.
pub fn stream(
    t: &dyn Transport,
    setup: &Setup,
    plan: &StreamPlan,
    progress: &dyn Progress,
) -> Result<StreamOutcome> {
    let threads = plan.initiator_cores.len().max(1);
    let barrier = Barrier::new(threads);
    let done = std::sync::atomic::AtomicU64::new(0);
    let results: Vec<Result<ThreadOutcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|ti| {
                let barrier = &barrier;
                let done = &done;
                s.spawn(move || {
                    pin(plan.initiator_cores.get(ti).copied().flatten());
                    // This thread's connections: ti, ti + threads, ...
                    let mine: Vec<usize> = (ti..plan.qps).step_by(threads).collect();
                    let mut conns = Vec::new();
                    let mut failed = None;
                    for &i in &mine {
                        let mut su = setup.clone();
                        su.responder_core = if plan.responder_cores.is_empty() {
                            None
                        } else {
                            plan.responder_cores[i % plan.responder_cores.len()]
                        };
                        match t.stream(&su) {
                            Ok(st) => conns.push(Conn {
                                stream: st,
                                posted: 0,
                                delivered: 0,
                            }),
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        }
                    }
                    // Every thread reaches the barriers, failed or not, so none waits
                    // forever; a failure is reported after them.
                    barrier.wait();
                    let r = match failed {
                        Some(e) => {
                            // The barrier after warm-up is owed too.
                            barrier.wait();
                            Err(e)
                        }
                        None => drive(&mut conns, setup.window, plan, barrier, done, progress),
                    };
                    let mut down = Ok(());
                    for c in conns {
                        let d = c.stream.teardown();
                        if down.is_ok() {
                            down = d;
                        }
                    }
                    let out = r?;
                    down?;
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().map_err(|_| {
                    BenchError::transport(t.kind().name(), "an initiator thread panicked")
                })?
            })
            .collect()
    });
    let mut messages = 0;
    let mut elapsed = Duration::ZERO;
    let mut hist: Option<Histogram<u64>> = None;
    for r in results {
        let (m, e, h) = r?;
        messages += m;
        elapsed = elapsed.max(e);
        if let Some(h) = h {
            match &mut hist {
                Some(acc) => acc
                    .add(&h)
                    .map_err(|e| BenchError::transport(t.kind().name(), format!("{e:?}")))?,
                None => hist = Some(h),
            }
        }
    }
    Ok(StreamOutcome {
        messages,
        elapsed,
        histogram: hist,
    })
}

/// Set in an `--apps` child: the measured part waits for the parent's word.
static START_GATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes this process an `--apps` child: it waits politely ([`crate::transport::crowded`]),
/// and after warm-up says `ready` on stdout and starts measuring once a line (or the end)
/// comes on stdin, so that every child measures over the same time.
pub fn app_child() {
    crate::transport::crowded();
    START_GATE.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn wait_for_start() -> Result<()> {
    use std::io::{BufRead, Write};
    let io = |e| BenchError::io("waiting for the start of an --apps run", e);
    let mut out = std::io::stdout().lock();
    out.write_all(b"ready\n").map_err(io)?;
    out.flush().map_err(io)?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(io)?;
    Ok(())
}

/// What one initiator thread measured: messages, its measured time, open-loop latencies.
type ThreadOutcome = (u64, Duration, Option<Histogram<u64>>);

/// One initiator thread: warm-up, the second barrier, then the measured part.
fn drive(
    conns: &mut [Conn],
    window: usize,
    plan: &StreamPlan,
    barrier: &Barrier,
    done: &std::sync::atomic::AtomicU64,
    progress: &dyn Progress,
) -> Result<ThreadOutcome> {
    // Open loop warms up at the offered rate inside its own schedule.
    let warm = match plan.rate {
        None => {
            closed_loop(conns, window, Some(plan.warmup), None, None).and_then(|_| drain(conns))
        }
        Some(_) => Ok(()),
    };
    // Reached by every thread even when warm-up failed, so the others are not left waiting.
    let leader = barrier.wait().is_leader();
    if START_GATE.load(std::sync::atomic::Ordering::Relaxed) {
        let gate = if leader { wait_for_start() } else { Ok(()) };
        barrier.wait();
        gate?;
    }
    warm?;
    // Sequence numbers go on from the warm-up's (the transports see one gap-free sequence);
    // the measured loops count from where each connection stands now.
    match plan.rate {
        None => {
            let start = Instant::now();
            let (count, deadline) = match plan.stop {
                Stop::Iterations(n) => (Some(n), None),
                Stop::Duration(d) => (None, Some(start + d)),
            };
            let n = closed_loop(conns, window, count, deadline, Some((done, progress)))?;
            let elapsed = start.elapsed();
            drain(conns)?;
            Ok((n, elapsed, None))
        }
        Some(rate) => {
            let per_conn = rate / plan.qps as f64;
            let n = match plan.stop {
                Stop::Iterations(n) => n,
                // The schedule is fixed up front: duration x rate messages per connection.
                Stop::Duration(d) => ((d.as_secs_f64() * per_conn).ceil() as u64).max(1),
            };
            let interval = Duration::from_secs_f64(1.0 / per_conn);
            let (h, elapsed) = open_loop(conns, window, plan.warmup, n, interval, done, progress)?;
            Ok((h.len(), elapsed, Some(h)))
        }
    }
}

/// Keeps each connection's window full until it has delivered `count` messages (or until
/// `deadline`); returns the messages delivered.
fn closed_loop(
    conns: &mut [Conn],
    window: usize,
    count: Option<u64>,
    deadline: Option<Instant>,
    progress: Option<(&std::sync::atomic::AtomicU64, &dyn Progress)>,
) -> Result<u64> {
    let count = count.unwrap_or(u64::MAX);
    let base: Vec<u64> = conns.iter().map(|c| c.delivered).collect();
    if count == 0 {
        return Ok(0);
    }
    let mut b = Backoff::new();
    let mut last_progress = Instant::now();
    let mut turns: u64 = 0;
    loop {
        let mut moved = false;
        let mut all_done = true;
        for (c, &b) in conns.iter_mut().zip(&base) {
            let target = b.saturating_add(count);
            while c.posted - c.delivered < window as u64 && c.posted < target {
                if !c.stream.post(c.posted)? {
                    break;
                }
                c.posted += 1;
                moved = true;
            }
            let mut got = 0;
            c.stream.poll_delivered(&mut |_| got += 1)?;
            if got > 0 {
                c.delivered += got;
                moved = true;
                if let Some((done, p)) = progress {
                    let d = done.fetch_add(got, std::sync::atomic::Ordering::Relaxed) + got;
                    if turns.is_multiple_of(64) {
                        p.advance(d);
                    }
                }
            }
            if c.delivered < target {
                all_done = false;
            }
        }
        turns += 1;
        if all_done {
            break;
        }
        if turns.is_multiple_of(1024) {
            check_interrupt()?;
        }
        if let Some(d) = deadline {
            if turns.is_multiple_of(16) && Instant::now() >= d {
                break;
            }
        }
        if moved {
            b.reset();
            last_progress = Instant::now();
        } else {
            if last_progress.elapsed() > STALL {
                return Err(BenchError::transport(
                    "stream",
                    format!("no message delivered for {} s", STALL.as_secs()),
                ));
            }
            b.snooze();
        }
    }
    Ok(conns.iter().zip(&base).map(|(c, b)| c.delivered - b).sum())
}

/// Waits (outside the measurement) for the messages still in flight.
fn drain(conns: &mut [Conn]) -> Result<()> {
    let mut b = Backoff::new();
    let start = Instant::now();
    while conns.iter().any(|c| c.delivered < c.posted) {
        for c in conns.iter_mut() {
            let mut got = 0;
            c.stream.poll_delivered(&mut |_| got += 1)?;
            c.delivered += got;
        }
        if start.elapsed() > STALL {
            return Err(BenchError::transport(
                "stream",
                "messages still in flight after the measurement never arrived",
            ));
        }
        b.snooze();
    }
    Ok(())
}

/// Open loop: message `i` (counting the warm-up ones) is due at `start + i * interval`.
fn open_loop(
    conns: &mut [Conn],
    window: usize,
    warmup: u64,
    n: u64,
    interval: Duration,
    done: &std::sync::atomic::AtomicU64,
    progress: &dyn Progress,
) -> Result<(Histogram<u64>, Duration)> {
    let total = warmup + n;
    let mut h = new_histogram();
    let start = Instant::now();
    let due = |seq: u64| start + interval.mul_f64(seq as f64);
    let mut b = Backoff::new();
    let mut last_progress = Instant::now();
    let mut turns: u64 = 0;
    loop {
        let now = Instant::now();
        let mut moved = false;
        let mut all_done = true;
        for c in conns.iter_mut() {
            while c.posted < total && c.posted - c.delivered < window as u64 && due(c.posted) <= now
            {
                if !c.stream.post(c.posted)? {
                    break;
                }
                c.posted += 1;
                moved = true;
            }
            let at = Instant::now();
            let mut got = 0;
            c.stream.poll_delivered(&mut |seq| {
                got += 1;
                if seq >= warmup {
                    record(&mut h, at.saturating_duration_since(due(seq)));
                }
            })?;
            if got > 0 {
                c.delivered += got;
                moved = true;
                let d = done.fetch_add(got, std::sync::atomic::Ordering::Relaxed) + got;
                if turns.is_multiple_of(64) {
                    progress.advance(d);
                }
            }
            if c.delivered < total {
                all_done = false;
            }
        }
        turns += 1;
        if all_done {
            break;
        }
        if turns.is_multiple_of(1024) {
            check_interrupt()?;
        }
        if moved {
            b.reset();
            last_progress = Instant::now();
        } else if last_progress.elapsed() > STALL + interval {
            return Err(BenchError::transport(
                "stream",
                format!("no message delivered for {} s", STALL.as_secs()),
            ));
        } else {
            // Waiting for the next due time or for deliveries: stay responsive, do not sleep.
            b.snooze();
        }
    }
    let elapsed = start
        .elapsed()
        .saturating_sub(interval.mul_f64(warmup as f64));
    Ok((h, elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::PingPong;
    use crate::workload::{Exchange, TransportKind};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// A stream that delivers a message two polls after its post, refuses every third post,
    /// and records the largest window it saw.
    struct Fake {
        window: u64,
        posted: u64,
        delivered: u64,
        polls: u64,
        max_inflight: Arc<AtomicU64>,
        bad: Arc<AtomicU64>,
    }

    impl Stream for Fake {
        fn post(&mut self, seq: u64) -> Result<bool> {
            self.polls += 1;
            if self.polls.is_multiple_of(3) {
                return Ok(false);
            }
            if seq != self.posted {
                self.bad.fetch_add(1, Ordering::Relaxed);
            }
            self.posted += 1;
            let inflight = self.posted - self.delivered;
            self.max_inflight.fetch_max(inflight, Ordering::Relaxed);
            if inflight > self.window {
                self.bad.fetch_add(1, Ordering::Relaxed);
            }
            Ok(true)
        }

        fn poll_delivered(&mut self, f: &mut dyn FnMut(u64)) -> Result<usize> {
            self.polls += 1;
            if self.polls.is_multiple_of(2) && self.delivered < self.posted {
                f(self.delivered);
                self.delivered += 1;
                return Ok(1);
            }
            Ok(0)
        }

        fn teardown(self: Box<Self>) -> Result<()> {
            if self.delivered != self.posted {
                return Err(BenchError::transport(
                    "fake",
                    "torn down with messages in flight",
                ));
            }
            Ok(())
        }
    }

    struct FakeTransport {
        max_inflight: Arc<AtomicU64>,
        bad: Arc<AtomicU64>,
        streams: AtomicU64,
    }

    impl Transport for FakeTransport {
        fn kind(&self) -> TransportKind {
            TransportKind::Tcp
        }
        fn supports(&self, _: Exchange) -> bool {
            true
        }
        fn ping_pong(&self, _: &Setup) -> Result<Box<dyn PingPong>> {
            Err(BenchError::transport("fake", "no ping-pong"))
        }
        fn stream(&self, s: &Setup) -> Result<Box<dyn Stream>> {
            self.streams.fetch_add(1, Ordering::Relaxed);
            Ok(Box::new(Fake {
                window: s.window as u64,
                posted: 0,
                delivered: 0,
                polls: 0,
                max_inflight: self.max_inflight.clone(),
                bad: self.bad.clone(),
            }))
        }
    }

    fn fake() -> FakeTransport {
        FakeTransport {
            max_inflight: Arc::new(AtomicU64::new(0)),
            bad: Arc::new(AtomicU64::new(0)),
            streams: AtomicU64::new(0),
        }
    }

    fn setup(window: usize) -> Setup {
        Setup {
            exchange: Exchange::Message,
            size: 64,
            window,
            responder_core: None,
            stages: false,
        }
    }

    fn plan(qps: usize, threads: usize, rate: Option<f64>) -> StreamPlan {
        StreamPlan {
            qps,
            initiator_cores: vec![None; threads],
            responder_cores: vec![None],
            warmup: 7,
            stop: Stop::Iterations(100),
            rate,
        }
    }

    #[test]
    fn the_closed_loop_keeps_the_window_and_counts_every_qp() {
        let t = fake();
        let out = stream(&t, &setup(5), &plan(3, 2, None), &()).unwrap();
        assert_eq!(out.messages, 300);
        assert!(out.histogram.is_none());
        assert_eq!(t.streams.load(Ordering::Relaxed), 3);
        assert_eq!(t.bad.load(Ordering::Relaxed), 0, "gaps or window overruns");
        assert_eq!(t.max_inflight.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn the_open_loop_records_one_latency_per_scheduled_message_after_warm_up() {
        let t = fake();
        let out = stream(&t, &setup(4), &plan(2, 1, Some(1e6)), &()).unwrap();
        let h = out.histogram.expect("open loop records latencies");
        assert_eq!(h.len(), 200);
        assert_eq!(out.messages, 200);
        assert!(t.max_inflight.load(Ordering::Relaxed) <= 4);
        assert_eq!(t.bad.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_failing_setup_is_reported_and_no_thread_hangs() {
        let t = fake();
        let out = latency(&t, &setup(1), None, 1, Stop::Iterations(1), &());
        assert!(out.is_err());
    }
}
