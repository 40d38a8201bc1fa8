//! Poll-mode cores: a worker thread pinned to one core owns its [`Node`] (port queue, TCP
//! sockets), its engine ([`Rnic`]) and its host side ([`Service`]) side by side, so the fast
//! path takes no lock; [`turn`] runs their steps in order, each part sans-IO and driven by
//! it. The only shared state is the stop flag and the core's [`CoreCounters`], which the
//! worker stores with relaxed atomics after each turn and anyone may read while it runs (the
//! daemon writes them to `<runtime dir>/stats` and logs them on SIGUSR1).
//!
//! Polling is busy (spin without pause: lowest latency, one core at 100 %) or adaptive:
//! after `idle_spins` empty turns the worker sleeps in the kernel until a frame arrives on
//! the port, a process that feeds the service rings its doorbell ([`iwarp_abi::wake`]: an
//! application posted, control sent a command) or smoltcp's next timer is due, whichever
//! comes first. A port without a descriptor to wait on (DPDK), or work that only polling
//! moves on, makes it back off on a timer instead: sleeps doubling on each further empty turn
//! up to `max_sleep`, never past smoltcp's next timer, that a doorbell still ends at once.
//! Any work resets both. On a 2-core
//! machine adaptive keeps the other core usable; the first frame after an idle period costs
//! a wake-up (a few microseconds), or up to `max_sleep` on the timer path.
//!
//! Several workers: each runs its own node and service and shares nothing on the fast path
//! with the others; a port they share steers every frame to the worker that owns its
//! connection ([`crate::port::steer`]), and a worker fed by another sleeps on its inbox.

use crate::node::{Counters, Node};
use crate::port::Port;
use iwarp_abi::wake::DaemonWake;
use iwarp_engine::Rnic;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The longest a sleeping worker stays asleep with nothing to wake it: it looks at the stop
/// flag and beats the heartbeat control watches at least this often.
pub const MAX_BLOCK: Duration = Duration::from_millis(50);

/// How a worker waits when there is nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polling {
    /// Spin without pause.
    Busy,
    /// Spin `idle_spins` empty turns, then sleep until a frame, a doorbell or a timer (a
    /// port without a descriptor: a timed back-off up to `max_sleep`, ended by a doorbell).
    Adaptive {
        idle_spins: u32,
        max_sleep: Duration,
    },
}

/// One core's counters: written by its worker only, read by anyone (relaxed loads; a reader
/// may see one counter a turn ahead of another, never a torn value). Aligned to its own
/// cache lines so a reader does not slow the worker down by false sharing.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CoreCounters {
    pub core: Option<usize>,
    pub rx_frames: AtomicU64,
    pub tx_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub fpdus_tx: AtomicU64,
    pub stream_bytes_rx: AtomicU64,
    pub drops: AtomicU64,
    pub acks_held: AtomicU64,
    pub bad_checksums: AtomicU64,
    pub arp_paced: AtomicU64,
    pub conns_lost: AtomicU64,
    pub connections: AtomicU64,
    pub crc_errors: AtomicU64,
    pub terminates_sent: AtomicU64,
    pub terminates_received: AtomicU64,
    /// TCP's sending side, summed over the connections (see [`Counters`]).
    pub cwnd: AtomicU64,
    pub bytes_in_flight: AtomicU64,
    pub retransmits: AtomicU64,
    pub fast_retransmits: AtomicU64,
    pub rtos: AtomicU64,
    pub ecn_marks: AtomicU64,
    pub spurious_retransmits: AtomicU64,
    pub dsack_spurious: AtomicU64,
    pub resends_held: AtomicU64,
    pub syns_held: AtomicU64,
    /// Stage times (ns, summed over busy turns) when stage timing is on: the bench's
    /// per-stage breakdown reads them from the stats file.
    pub stage_timing: std::sync::atomic::AtomicBool,
    pub stage_port_ns: AtomicU64,
    pub stage_tcp_ns: AtomicU64,
    pub stage_engine_ns: AtomicU64,
    pub stage_ring_ns: AtomicU64,
    /// Turns of the poll loop, and how many of them ended in a sleep.
    pub polls: AtomicU64,
    pub sleeps: AtomicU64,
    /// What ended the sleeps on a descriptor: a frame on the port, a doorbell (an
    /// application or control), a timer (both descriptors can count for one sleep).
    pub wakes_port: AtomicU64,
    pub wakes_doorbell: AtomicU64,
    pub wakes_timer: AtomicU64,
    /// The worker's per-connection TCP lines ([`Node::conn_lines_from`], a slice a turn),
    /// renewed about once a second; the worker never waits for the lock (a reader holding it
    /// delays the renewal).
    pub conns: std::sync::Mutex<String>,
}

impl CoreCounters {
    pub fn new(core: Option<usize>) -> CoreCounters {
        CoreCounters {
            core,
            ..CoreCounters::default()
        }
    }

    /// Publishes a node's counters (called by the owning worker).
    pub fn publish(&self, c: &Counters) {
        let r = Ordering::Relaxed;
        self.rx_frames.store(c.rx_frames, r);
        self.tx_frames.store(c.tx_frames, r);
        self.rx_bytes.store(c.rx_bytes, r);
        self.tx_bytes.store(c.tx_bytes, r);
        self.fpdus_tx.store(c.fpdus_tx, r);
        self.stream_bytes_rx.store(c.stream_bytes_rx, r);
        self.drops.store(c.drops, r);
        self.acks_held.store(c.acks_held, r);
        self.bad_checksums.store(c.bad_checksums, r);
        self.arp_paced.store(c.arp_paced, r);
        self.conns_lost.store(c.conns_lost, r);
        self.connections.store(c.connections, r);
        self.crc_errors.store(c.crc_errors, r);
        self.terminates_sent.store(c.terminates_sent, r);
        self.terminates_received.store(c.terminates_received, r);
        self.cwnd.store(c.cwnd, r);
        self.bytes_in_flight.store(c.bytes_in_flight, r);
        self.retransmits.store(c.retransmits, r);
        self.fast_retransmits.store(c.fast_retransmits, r);
        self.rtos.store(c.rtos, r);
        self.ecn_marks.store(c.ecn_marks, r);
        self.spurious_retransmits.store(c.spurious_retransmits, r);
        self.dsack_spurious.store(c.dsack_spurious, r);
        self.resends_held.store(c.resends_held, r);
        self.syns_held.store(c.syns_held, r);
        if let Some(st) = c.stages {
            self.stage_timing.store(true, r);
            self.stage_port_ns.store(st.port, r);
            self.stage_tcp_ns.store(st.tcp, r);
            self.stage_engine_ns.store(st.engine, r);
        }
    }

    /// The worker's per-connection lines (see [`CoreCounters::conns`]), each naming the core.
    pub fn conn_lines(&self) -> String {
        let core = self.core.map_or("-".to_string(), |c| c.to_string());
        let lines = self.conns.lock().map(|l| l.clone()).unwrap_or_default();
        lines
            .lines()
            .filter_map(|l| l.strip_prefix("conn "))
            .map(|rest| format!("conn core={core} {rest}\n"))
            .collect()
    }

    /// One line, `key=value` pairs, for the stats file and the SIGUSR1 dump.
    pub fn line(&self) -> String {
        let r = Ordering::Relaxed;
        let mut line = self.counters_line();
        for (name, v) in [
            ("cwnd", &self.cwnd),
            ("bytes_in_flight", &self.bytes_in_flight),
            ("retransmits", &self.retransmits),
            ("fast_retransmits", &self.fast_retransmits),
            ("rtos", &self.rtos),
            ("ecn_marks", &self.ecn_marks),
            ("spurious_retransmits", &self.spurious_retransmits),
            ("dsack_spurious", &self.dsack_spurious),
            ("resends_held", &self.resends_held),
            ("syns_held", &self.syns_held),
        ] {
            line.push_str(&format!(" {name}={}", v.load(r)));
        }
        if self.stage_timing.load(r) {
            line.push_str(&format!(
                " stage_port_ns={} stage_tcp_ns={} stage_engine_ns={} stage_ring_ns={}",
                self.stage_port_ns.load(r),
                self.stage_tcp_ns.load(r),
                self.stage_engine_ns.load(r),
                self.stage_ring_ns.load(r),
            ));
        }
        line
    }

    fn counters_line(&self) -> String {
        let r = Ordering::Relaxed;
        format!(
            "core={} rx_frames={} tx_frames={} rx_bytes={} tx_bytes={} fpdus_tx={} \
             stream_bytes_rx={} drops={} acks_held={} bad_checksums={} arp_paced={} connections={} conns_lost={} crc_errors={} \
             terminates_sent={} terminates_received={} polls={} sleeps={} wakes_port={} \
             wakes_doorbell={} wakes_timer={}",
            self.core.map_or("-".to_string(), |c| c.to_string()),
            self.rx_frames.load(r),
            self.tx_frames.load(r),
            self.rx_bytes.load(r),
            self.tx_bytes.load(r),
            self.fpdus_tx.load(r),
            self.stream_bytes_rx.load(r),
            self.drops.load(r),
            self.acks_held.load(r),
            self.bad_checksums.load(r),
            self.arp_paced.load(r),
            self.connections.load(r),
            self.conns_lost.load(r),
            self.crc_errors.load(r),
            self.terminates_sent.load(r),
            self.terminates_received.load(r),
            self.polls.load(r),
            self.sleeps.load(r),
            self.wakes_port.load(r),
            self.wakes_doorbell.load(r),
            self.wakes_timer.load(r),
        )
    }
}

/// Pins the calling thread to `core` when given; returns whether it is pinned.
pub fn pin(core: Option<usize>) -> bool {
    core.is_some_and(|id| core_affinity::set_for_current(core_affinity::CoreId { id }))
}

/// What a poll-mode core serves besides its node's port: the command ring from
/// `iwarp-control`, the SQ/RQ rings of its QPs into the engine, CQEs out. A closure
/// `FnMut(&mut Node<P>, &mut Rnic) -> bool` is a service with only [`Service::serve`].
pub trait Service<P: Port> {
    /// The host's rings into the engine (see [`turn`]); returns whether it did work.
    fn post(&mut self, _rnic: &mut Rnic) -> bool {
        false
    }
    /// After the node transmitted: commands, connection events, completions out. Returns
    /// whether it did work.
    fn serve(&mut self, node: &mut Node<P>, rnic: &mut Rnic) -> bool;
    /// Nanoseconds spent on application rings in busy turns, when stage timing is on.
    fn ring_ns(&self) -> Option<u64> {
        None
    }
    /// The doorbell of the processes that feed the service (applications' rings, control's
    /// commands), rung while the core sleeps; `None` when nothing outside the loop feeds it.
    fn doorbell(&mut self) -> Option<&mut DaemonWake> {
        None
    }
    /// Whether the service may sleep until a frame, a doorbell or a timer: false while it
    /// holds work only polling moves on (completions waiting for room in a full CQ ring).
    fn can_sleep(&self, _rnic: &Rnic) -> bool {
        true
    }
}

impl<P: Port, F: FnMut(&mut Node<P>, &mut Rnic) -> bool> Service<P> for F {
    fn serve(&mut self, node: &mut Node<P>, rnic: &mut Rnic) -> bool {
        self(node, rnic)
    }
}

/// One turn of a poll-mode core, its steps in order. Returns whether any did work.
///
/// 1. The port's receive bursts into TCP, and the ACKs of a stream sent at once
///    ([`Node::receive`]).
/// 2. The host's rings into the engine ([`Service::post`]): the receives first, so that a
///    message that arrived after its receive was posted finds it in step 3; the sends, so
///    that what was posted before the turn leaves in it.
/// 3. TCP's received bytes into the engine and the engine's FPDUs into TCP, for the
///    connections with work ([`Node::exchange`]).
/// 4. TCP's segments onto the port ([`Node::transmit`]).
/// 5. Commands, connection events and completions out ([`Service::serve`]).
///
/// Timers run in the steps that own them: TCP's in smoltcp's polls, the peers' liveness in
/// step 3, the owners of QPs in step 5.
pub fn turn<P: Port, S: Service<P>>(node: &mut Node<P>, rnic: &mut Rnic, service: &mut S) -> bool {
    let mut worked = node.receive();
    worked |= service.post(rnic);
    worked |= node.exchange(rnic);
    node.transmit();
    worked |= service.serve(node, rnic);
    worked
}

/// The worker's per-connection lines ([`CoreCounters::conns`]), renewed about once a second
/// a slice of connections at a time: written all at once, ten thousand connections would
/// stall the turn for milliseconds every second (their state read cold, a line formatted
/// each).
/// A pass starts a second after the last one started, formats [`ConnLines::SLICE`]
/// connections a call (the worker calls it every turn while a pass is on), and publishes
/// the whole text when done; connections moving up the list in between start it again.
#[derive(Default)]
struct ConnLines {
    /// The next connection of the pass in progress.
    next: Option<usize>,
    text: String,
    /// [`Node::conn_moves`] when the pass began.
    moves: u64,
    started: Option<std::time::Instant>,
}

impl ConnLines {
    const SLICE: usize = 128;

    /// Whether a pass is in progress (the worker calls [`ConnLines::renew`] every turn).
    fn in_pass(&self) -> bool {
        self.next.is_some()
    }

    /// One step of the renewal over a list of `count` connections that have moved `moves`
    /// times; `now` is read only to decide whether a pass begins (a turn within a pass reads
    /// no clock); `lines(from, max, text)` formats a slice and returns where the next
    /// begins; `publish` takes the finished text (false: not now, try again).
    fn renew(
        &mut self,
        now: impl FnOnce() -> std::time::Instant,
        count: usize,
        moves: u64,
        lines: impl FnOnce(usize, usize, &mut String) -> usize,
        publish: impl FnOnce(&mut String) -> bool,
    ) {
        let from = match self.next {
            Some(_) if moves != self.moves => 0,
            Some(next) => next,
            None => {
                let now = now();
                if self
                    .started
                    .is_some_and(|t| now - t < Duration::from_secs(1))
                {
                    return;
                }
                self.started = Some(now);
                0
            }
        };
        if from == 0 {
            self.text.clear();
            self.moves = moves;
        }
        let next = if from < count {
            lines(from, Self::SLICE, &mut self.text)
        } else {
            from
        };
        self.next = Some(next);
        if next >= count && publish(&mut self.text) {
            self.next = None;
        }
    }
}

/// One step of the renewal of the worker's per-connection lines (see [`ConnLines`]).
fn publish_conns<P: Port>(node: &Node<P>, counters: &CoreCounters, conns: &mut ConnLines) {
    conns.renew(
        std::time::Instant::now,
        node.conn_slots(),
        node.conn_moves(),
        |from, max, text| node.conn_lines_from(from, max, text),
        |text| match counters.conns.try_lock() {
            Ok(mut lines) => {
                // The old text's buffer is reused for the next pass.
                std::mem::swap(&mut *lines, text);
                true
            }
            Err(_) => false,
        },
    );
}

/// Runs `node` until `stop` is set: the body of a poll-mode core.
pub fn run<P: Port>(
    node: &mut Node<P>,
    rnic: &mut Rnic,
    polling: Polling,
    counters: &CoreCounters,
    stop: &AtomicBool,
) {
    run_with(
        node,
        rnic,
        polling,
        counters,
        stop,
        |_: &mut Node<P>, _: &mut Rnic| false,
    )
}

/// Runs `node` and `service` until `stop` is set. Publishes the counters once at the start,
/// after every turn that did work and before every sleep. On stop, aborts every connection
/// (RST to each peer, QPs to Error) and publishes the final counters.
pub fn run_with<P: Port, S: Service<P>>(
    node: &mut Node<P>,
    rnic: &mut Rnic,
    polling: Polling,
    counters: &CoreCounters,
    stop: &AtomicBool,
    mut service: S,
) {
    if let Polling::Adaptive { .. } = polling {
        // Linux rounds a sleeping thread's wake-up up by its timer slack (50 µs by default),
        // which would turn every short back-off into 50 µs of added latency: ask for none.
        // SAFETY: prctl(PR_SET_TIMERSLACK) takes an integer and affects only this thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    }
    // At once, so that the stats file names every counter this worker keeps from the start
    // (the stage times among them, when on): a busy worker with nothing to do would publish
    // only at its first work, and a reader taking a first reading before that could not
    // tell a stage that took no time from one not timed.
    counters.publish(&node.counters().with_engine(&rnic.stats));
    let mut idle_turns: u32 = 0;
    let mut sleep = Duration::ZERO;
    let mut polls: u64 = 0;
    let mut sleeps: u64 = 0;
    let mut conns = ConnLines::default();
    while !stop.load(Ordering::Relaxed) {
        let worked = turn(node, rnic, &mut service);
        polls += 1;
        if polls & 255 == 0 || conns.in_pass() {
            publish_conns(node, counters, &mut conns);
        }
        if worked {
            idle_turns = 0;
            sleep = Duration::ZERO;
            counters.publish(&node.counters().with_engine(&rnic.stats));
            if let Some(ns) = service.ring_ns() {
                counters.stage_ring_ns.store(ns, Ordering::Relaxed);
            }
            counters.polls.store(polls, Ordering::Relaxed);
            continue;
        }
        let Polling::Adaptive {
            idle_spins,
            max_sleep,
        } = polling
        else {
            // Busy: publish now and then so readers see progress without a store per turn.
            if polls & 1023 == 0 {
                counters.polls.store(polls, Ordering::Relaxed);
            }
            continue;
        };
        idle_turns = idle_turns.saturating_add(1);
        if idle_turns <= idle_spins {
            std::hint::spin_loop();
            continue;
        }
        // On the port's descriptor when it has one and nothing needs polling (until a frame,
        // a doorbell or a timer); otherwise a timed back-off, doubling up to `max_sleep`, that
        // a doorbell still ends at once.
        let port_fd = node.wait_fd().filter(|_| service.can_sleep(rnic));
        let cap = match port_fd {
            Some(_) => MAX_BLOCK,
            None => {
                sleep = (sleep * 2).clamp(Duration::from_micros(1), max_sleep);
                sleep
            }
        };
        counters.publish(&node.counters().with_engine(&rnic.stats));
        // About to sleep: the time is the worker's own, so a pass goes further here (a
        // worker asleep wakes at least every `MAX_BLOCK`), by a few slices only, so that a
        // frame arriving meanwhile waits about a millisecond at most.
        for _ in 0..9 {
            publish_conns(node, counters, &mut conns);
            if !conns.in_pass() {
                break;
            }
        }
        counters.polls.store(polls, Ordering::Relaxed);
        let Some(woke) = sleep_until_woken(node, rnic, &mut service, port_fd, cap) else {
            // The last look found work.
            idle_turns = 0;
            sleep = Duration::ZERO;
            continue;
        };
        sleeps += 1;
        counters.sleeps.store(sleeps, Ordering::Relaxed);
        let r = Ordering::Relaxed;
        for (hit, c) in [
            (woke.port, &counters.wakes_port),
            (woke.doorbell, &counters.wakes_doorbell),
            (!woke.port && !woke.doorbell, &counters.wakes_timer),
        ] {
            if hit {
                c.store(c.load(r) + 1, r);
            }
        }
        if port_fd.is_some() || woke.port || woke.doorbell {
            idle_turns = 0;
            sleep = Duration::ZERO;
        }
    }
    node.shutdown(rnic);
    counters.publish(&node.counters().with_engine(&rnic.stats));
    counters.polls.store(polls, Ordering::Relaxed);
}

/// Which descriptors ended a sleep (neither: a timer, or a signal).
struct Woken {
    /// A frame: on the port, or handed over by another worker.
    port: bool,
    doorbell: bool,
}

/// Announces sleep on the doorbell, takes one more turn (a post may have landed since the
/// last one; the announcement's fence makes the producer ring otherwise), and, finding
/// nothing, sleeps until the port (when given) or the doorbell is readable or smoltcp's next
/// timer, at most `cap`. Returns what woke it, or `None` when that turn found work.
fn sleep_until_woken<P: Port, S: Service<P>>(
    node: &mut Node<P>,
    rnic: &mut Rnic,
    service: &mut S,
    port_fd: Option<RawFd>,
    cap: Duration,
) -> Option<Woken> {
    let bell = service.doorbell().map(|d| {
        d.sleeping();
        d.fd()
    });
    node.set_asleep(true);
    let inbox = node.inbox_fd();
    let worked = turn(node, rnic, service);
    let woken = (!worked).then(|| {
        let timeout = node.poll_delay().map_or(cap, |d| d.min(cap));
        let fds = [port_fd, bell, inbox].map(|fd| fd.unwrap_or(-1));
        let [port, doorbell, handed] = wait_readable(fds, timeout);
        Woken {
            port: port || handed,
            doorbell,
        }
    });
    node.set_asleep(false);
    if let Some(d) = service.doorbell() {
        d.awake();
    }
    woken
}

/// Sleeps until one of `fds` is readable or `timeout` passes (a signal ends it early too);
/// which of them are readable. A negative descriptor is left out (with both left out, a
/// plain sleep).
fn wait_readable<const N: usize>(fds: [RawFd; N], timeout: Duration) -> [bool; N] {
    let mut p = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `p` and `ts` live for the call; ppoll ignores a negative fd; no signal mask.
    let n = unsafe {
        libc::ppoll(
            p.as_mut_ptr(),
            p.len() as libc::nfds_t,
            &ts,
            core::ptr::null(),
        )
    };
    if n <= 0 {
        return [false; N];
    }
    p.map(|q| q.revents & libc::POLLIN != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source of `count` connection lines `line i`, counting what each call formats.
    fn lines_of(
        count: usize,
        formatted: &mut Vec<usize>,
    ) -> impl FnOnce(usize, usize, &mut String) -> usize + '_ {
        move |from, max, text| {
            let to = (from + max).min(count);
            for i in from..to {
                text.push_str(&format!("line {i}\n"));
            }
            formatted.push(to - from);
            to
        }
    }

    /// The per-connection lines are renewed a slice per call, each connection once per pass
    /// and in order, published whole at the pass's end; a pass begins a second after the last
    /// began; connections moving up the list mid-pass start it again; a refused publish is
    /// retried without formatting again.
    #[test]
    fn connection_lines_are_renewed_a_slice_per_call_and_published_whole() {
        let t0 = std::time::Instant::now();
        let count = 1000;
        let mut c = ConnLines::default();
        let mut published: Vec<String> = Vec::new();
        let mut formatted = Vec::new();
        let step = |c: &mut ConnLines,
                    now,
                    moves,
                    formatted: &mut Vec<usize>,
                    published: &mut Vec<String>,
                    ok: bool| {
            c.renew(
                || now,
                count,
                moves,
                lines_of(count, formatted),
                |t| {
                    if ok {
                        published.push(std::mem::take(t));
                    }
                    ok
                },
            );
        };
        let whole: String = (0..count).map(|i| format!("line {i}\n")).collect();
        let calls = count.div_ceil(ConnLines::SLICE);
        for _ in 0..calls {
            step(&mut c, t0, 0, &mut formatted, &mut published, true);
        }
        assert!(
            formatted.iter().all(|&n| n <= ConnLines::SLICE),
            "{formatted:?}"
        );
        assert_eq!(formatted.iter().sum::<usize>(), count);
        assert_eq!(published.len(), 1);
        assert_eq!(published[0], whole);
        assert!(!c.in_pass());

        // Within the second: nothing; a second after the pass began: a new one.
        formatted.clear();
        let almost = t0 + Duration::from_millis(999);
        step(&mut c, almost, 0, &mut formatted, &mut published, true);
        assert!(formatted.is_empty() && !c.in_pass());
        let t1 = t0 + Duration::from_secs(1);
        step(&mut c, t1, 0, &mut formatted, &mut published, true);
        assert_eq!(formatted, [ConnLines::SLICE]);
        assert!(c.in_pass());

        // Connections moved: the pass starts again, so no line is missed or doubled.
        formatted.clear();
        for _ in 0..calls {
            step(&mut c, t1, 1, &mut formatted, &mut published, true);
        }
        assert_eq!(formatted.iter().sum::<usize>(), count);
        assert_eq!(published.len(), 2);
        assert_eq!(published[1], whole);

        // The reader holds the lines: the finished text waits, formatted once.
        let t2 = t0 + Duration::from_secs(2);
        formatted.clear();
        for _ in 0..calls {
            step(&mut c, t2, 1, &mut formatted, &mut published, false);
        }
        assert!(c.in_pass());
        step(&mut c, t2, 1, &mut formatted, &mut published, true);
        assert_eq!(formatted.iter().sum::<usize>(), count);
        assert_eq!(published.len(), 3);
        assert_eq!(published[2], whole);
        assert!(!c.in_pass());
    }

    #[test]
    fn connection_lines_name_their_core() {
        let c = CoreCounters::new(Some(2));
        *c.conns.lock().unwrap() = "conn id=7 cwnd=14600\nconn id=9 cwnd=2920\n".into();
        assert_eq!(
            c.conn_lines(),
            "conn core=2 id=7 cwnd=14600\nconn core=2 id=9 cwnd=2920\n"
        );
    }

    #[test]
    fn counters_line_names_every_counter() {
        let c = CoreCounters::new(Some(3));
        c.publish(&Counters {
            rx_frames: 1,
            tx_frames: 2,
            rx_bytes: 3,
            tx_bytes: 4,
            fpdus_tx: 5,
            stream_bytes_rx: 6,
            drops: 7,
            acks_held: 30,
            arp_paced: 13,
            conns_lost: 8,
            connections: 9,
            crc_errors: 10,
            terminates_sent: 11,
            terminates_received: 12,
            bad_checksums: 14,
            stages: None,
            cwnd: 20,
            bytes_in_flight: 21,
            retransmits: 22,
            fast_retransmits: 23,
            rtos: 24,
            ecn_marks: 25,
            spurious_retransmits: 26,
            dsack_spurious: 29,
            resends_held: 27,
            syns_held: 28,
        });
        let line = c.line();
        for kv in [
            "core=3",
            "rx_frames=1",
            "tx_frames=2",
            "rx_bytes=3",
            "tx_bytes=4",
            "fpdus_tx=5",
            "stream_bytes_rx=6",
            "drops=7",
            "acks_held=30",
            "conns_lost=8",
            "connections=9",
            "crc_errors=10",
            "terminates_sent=11",
            "terminates_received=12",
            "arp_paced=13",
            "bad_checksums=14",
            "cwnd=20",
            "bytes_in_flight=21",
            "retransmits=22",
            "fast_retransmits=23",
            "rtos=24",
            "ecn_marks=25",
            "spurious_retransmits=26",
            "dsack_spurious=29",
            "resends_held=27",
            "syns_held=28",
        ] {
            assert!(line.contains(kv), "{kv} missing from {line}");
        }
    }
}
