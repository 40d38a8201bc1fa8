//! One connection's sending side as its segments show it: what smoltcp sends, what the peer
//! acknowledges and selectively acknowledges. smoltcp keeps its own timers and resends by
//! itself; this reads its segments off the wire (as `peer_tcp.rs` reads the peer's) to drive
//! the congestion [`Window`], an RFC 6298 timer of our own, and a gate on smoltcp's
//! retransmissions:
//!
//! - smoltcp's timer has a 1 ms floor (the dilated clock) and no allowance for a peer that
//!   delays its ACK: a resend it makes before our own timer expired is held back (it
//!   retries, its timer doubling, until ours has);
//! - after a timeout smoltcp resends everything unacknowledged; what the peer's SACK blocks
//!   already hold is held back;
//! - on a partial ACK in recovery with the peer holding data above the hole (RFC 6582
//!   section 3.2 step 3: resend the first unacknowledged segment), or when our timer expires
//!   while smoltcp's still runs, [`Sender::wants_nudge`] asks the node to make smoltcp resend
//!   the first unacknowledged segment at once (see `Node::nudge`).
//!
//! Spurious retransmissions are found by the peer's DSACK blocks (RFC 2883): when every
//! segment resent in a recovery episode comes back duplicated, the window reduction is
//! undone (RFC 3708), and the RTT of the first copy teaches the timer the peer's ACK delay.

use super::{Algorithm, RttEstimator, Window};
use iwarp_engine::fifo::TakeFront;
use std::collections::VecDeque;
use std::time::Duration;

/// A TCP sequence number; comparisons are modulo 2^32 (RFC 9293 section 3.4).
pub type Seq = u32;

fn before(a: Seq, b: Seq) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

fn before_eq(a: Seq, b: Seq) -> bool {
    !before(b, a)
}

/// Octets from `a` up to `b` (0 when `b` is not after `a`).
fn dist(a: Seq, b: Seq) -> usize {
    if before(a, b) {
        b.wrapping_sub(a) as usize
    } else {
        0
    }
}

/// Per-connection counters of the sending side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendCounters {
    /// Segments resent (by any cause) that went on the wire.
    pub retransmits: u64,
    /// Resends on three duplicate ACKs or a partial ACK (not a timeout).
    pub fast_retransmits: u64,
    /// Retransmission timeouts that resent something.
    pub rtos: u64,
    /// ACKs that carried ECN-Echo while data of ours was in flight, and received segments
    /// marked CE.
    pub ecn_marks: u64,
    /// Recovery episodes found spurious by DSACK and undone.
    pub spurious: u64,
    /// Resent segments the peer reported receiving twice (a DSACK block, RFC 2883), each
    /// a resend proven unnecessary (RFC 3708 section 2), whether or not its episode was
    /// undone.
    pub dsacked: u64,
    /// smoltcp's resends held back: its timer ran before ours, or the peer held the data;
    /// and timeouts put off while our own port still held frames (see
    /// [`Sender::host_queue_busy`]).
    pub held: u64,
}

/// What the peer's segment says about our data.
#[derive(Debug, Clone, Copy, Default)]
pub struct AckInfo<'a> {
    pub ack: Seq,
    /// The raw window field: a duplicate ACK leaves it unchanged (RFC 5681 section 2).
    pub window: u16,
    /// Octets of data the segment carries (a duplicate ACK carries none).
    pub payload: usize,
    pub ece: bool,
    /// The SACK blocks, as the option lists them (RFC 2018).
    pub sack: &'a [(Seq, Seq)],
}

/// The gate's answer for a segment smoltcp sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// A resend not due yet, or of data the peer holds: not sent (smoltcp believes it was).
    Hold,
    /// A resend not due yet that also carries data never sent: only the octets from this
    /// sequence number on go (the caller cuts the segment down to them).
    From(Seq),
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    start: Seq,
    end: Seq,
    /// When the first copy went out, and the latest (see [`stamp`]): a segment in flight
    /// costs 20 octets, a full default window of them under 4 KiB.
    at: u32,
    last: u32,
    resent: bool,
    /// A DSACK showed the peer got it twice (counted once).
    dsacked: bool,
}

/// A time as the low 32 bits of its microseconds: differences are right (wrapping) for
/// intervals under 71 minutes, far beyond any retransmission timer.
fn stamp(t: Duration) -> u32 {
    t.as_micros() as u32
}

/// How long before `now` the time `stamp` was.
fn since(now: Duration, stamp_: u32) -> Duration {
    Duration::from_micros(u64::from(stamp(now).wrapping_sub(stamp_)))
}

/// A resent segment that was acknowledged, kept a while for the DSACK that may follow.
#[derive(Debug, Clone, Copy)]
struct Acked {
    start: Seq,
    end: Seq,
    first_sent: Duration,
    acked_at: Duration,
}

impl Acked {
    fn of(s: &Sent, now: Duration) -> Acked {
        Acked {
            start: s.start,
            end: s.end,
            first_sent: now.saturating_sub(since(now, s.at)),
            acked_at: now,
        }
    }
}

/// A recovery episode (from the reduction to the ACK of all data sent before it): its
/// resent segments and how many of them the peer reported as duplicates.
#[derive(Debug, Clone, Copy)]
struct Episode {
    resent: u32,
    dsacked: u32,
    /// Recovery is over (its DSACKs may still come).
    ended: bool,
}

/// SACK ranges kept, at most.
const SACK_RANGES: usize = 8;
/// Resent-and-acknowledged segments kept for DSACK, at most.
const ACKED_RESENT: usize = 16;

#[derive(Debug, Clone)]
pub struct Sender {
    pub cc: Window,
    pub rtt: RttEstimator,
    mss: usize,
    /// How long a peer may hold an ACK (its delayed ACK, or a stall of its machine).
    peer_ack_delay: Duration,
    /// The first sequence number seen, once one was.
    started: bool,
    una: Seq,
    nxt: Seq,
    last_window: u16,
    dupacks: u32,
    /// RFC 6582's "recover": the highest octet sent when recovery began.
    recover: Option<Seq>,
    /// Three duplicate ACKs came: smoltcp resends the first unacknowledged segment now.
    fast_due: bool,
    /// The node was asked to make smoltcp resend (and whether for a timeout).
    nudge: Option<bool>,
    nudged: Option<bool>,
    /// When our retransmission timer was (re)started (RFC 6298 section 5).
    timer_at: Duration,
    /// A timeout was let through: smoltcp's resends below this octet belong to it.
    go_back: Option<Seq>,
    sent: VecDeque<Sent>,
    /// The smallest RTT sampled.
    min_rtt: Option<Duration>,
    sacked: Vec<(Seq, Seq)>,
    /// RFC 6675 section 4's pipe, in octets: what is still in the network of what was sent,
    /// as far as the SACK blocks tell (see [`Sender::send_window`]).
    pipe: usize,
    acked_resent: VecDeque<Acked>,
    episode: Option<Episode>,
    /// DCTCP's observation window ends when this octet is acknowledged; ECN-Echo is
    /// answered once per window of data (RFC 3168 section 6.1.2).
    dctcp_end: Seq,
    /// The current round trip ends when this octet is acknowledged (RFC 9406's windowEnd).
    round_end: Seq,
    ecn_until: Option<Seq>,
    /// The window was reduced for an ECN-Echo: the next new data segment carries CWR (RFC
    /// 3168 section 6.1.2).
    cwr_due: bool,
    pub counters: SendCounters,
}

impl Sender {
    /// `initial_rto`: the timeout before any RTT sample; `min_rto`: its floor.
    pub fn new(
        alg: Algorithm,
        mss: usize,
        max_inflight: usize,
        initial_rto: Duration,
        min_rto: Duration,
        peer_ack_delay: Duration,
    ) -> Sender {
        Sender {
            cc: Window::new(alg, mss, max_inflight),
            rtt: RttEstimator::new(initial_rto, min_rto),
            mss: mss.max(1),
            peer_ack_delay,
            started: false,
            una: 0,
            nxt: 0,
            last_window: 0,
            dupacks: 0,
            recover: None,
            fast_due: false,
            nudge: None,
            nudged: None,
            timer_at: Duration::ZERO,
            go_back: None,
            sent: VecDeque::new(),
            min_rtt: None,
            sacked: Vec::new(),
            pipe: 0,
            acked_resent: VecDeque::new(),
            episode: None,
            dctcp_end: 0,
            round_end: 0,
            ecn_until: None,
            cwr_due: false,
            counters: SendCounters::default(),
        }
    }

    /// Octets sent and not acknowledged.
    pub fn in_flight(&self) -> usize {
        dist(self.una, self.nxt)
    }

    pub fn cwnd(&self) -> usize {
        self.cc.cwnd()
    }

    /// How far past the first unacknowledged octet the node may have data queued (sent or
    /// not): the congestion window plus what the peer's SACK blocks show has left the
    /// network. RFC 6675 section 5 sends while cwnd - pipe allows a segment; without the
    /// SACKed octets, a sender in recovery would send nothing until the hole's repair
    /// moved the cumulative ACK (a round trip later) and then its whole window at once,
    /// a burst into the queue that just overflowed. `none` keeps its fixed bound.
    pub fn send_window(&self) -> usize {
        let cwnd = self.cc.cwnd();
        if self.cc.algorithm() == Algorithm::None {
            return cwnd;
        }
        cwnd + self.in_flight().saturating_sub(self.pipe)
    }

    /// RFC 6675 section 4's SetPipe over the segments in flight: each one neither SACKed
    /// nor lost (IsLost: three segments' worth SACKed above it) counts, and each resent one
    /// counts (again).
    fn set_pipe(&mut self) {
        if self.sacked.is_empty() {
            self.pipe = self.in_flight();
            return;
        }
        let (mut pipe, mut above) = (0, 0);
        for s in self.sent.iter().rev() {
            let len = dist(s.start, s.end);
            if self.fully_sacked(s.start, s.end) {
                above += len;
                continue;
            }
            if above < 3 * self.mss {
                pipe += len;
            }
            if s.resent {
                pipe += len;
            }
        }
        self.pipe = pipe;
    }

    /// Our retransmission timeout now: RFC 6298's, and at least the RTT plus the peer's ACK
    /// delay. A receiver may hold the ACK of the last segment of a flight (RFC 5681 section
    /// 4.2 lets it wait for a second one that never comes), and a peer in a virtual machine
    /// stalls its ACKs whenever its CPU waits for the host's; the timer covers the oldest
    /// segment, so either would make it resend data the peer holds. Losses inside a flight
    /// are repaired by SACK and duplicate ACKs long before this timer.
    pub fn rto(&self) -> Duration {
        self.rtt
            .rto()
            .max(self.rtt.srtt().unwrap_or(Duration::ZERO) + self.peer_ack_delay)
    }

    /// When our timer expires, while data is outstanding.
    pub fn deadline(&self) -> Option<Duration> {
        (self.in_flight() > 0).then(|| self.timer_at + self.rto())
    }

    fn in_recovery(&self) -> bool {
        self.recover.is_some()
    }

    fn fully_sacked(&self, start: Seq, end: Seq) -> bool {
        self.sacked
            .iter()
            .any(|&(l, r)| before_eq(l, start) && before_eq(end, r))
    }

    /// A data segment smoltcp sends (`len` counts SYN and FIN too) at `now`: sent or held.
    pub fn on_send(&mut self, seq: Seq, len: usize, now: Duration) -> Verdict {
        if len == 0 {
            return Verdict::Send;
        }
        if !self.started {
            self.started = true;
            self.una = seq;
            self.nxt = seq;
            self.dctcp_end = seq;
            self.round_end = seq;
        }
        let end = seq.wrapping_add(len as u32);
        if before_eq(self.nxt, seq) {
            if self.in_flight() == 0 {
                // RFC 6298 section 5.1.
                self.timer_at = now;
            }
            self.first_sent(seq, end, now);
            return Verdict::Send;
        }
        if before_eq(end, self.una) {
            // Below what the peer acknowledged (its ACK crossed this resend): harmless.
            return Verdict::Send;
        }
        let new_part = before(self.nxt, end);
        if !new_part && self.fully_sacked(seq, end) {
            self.counters.held += 1;
            return Verdict::Hold;
        }
        let at_una = seq == self.una;
        let nudged = self.nudged.take().filter(|_| at_una);
        if at_una && self.fast_due && self.resent_within_rtt(seq, end, now) {
            // The duplicate ACKs' resend went already, from our copy (see `lost_holes`).
            self.fast_due = false;
        }
        if self.go_back.is_some_and(|g| before(seq, g)) {
            // Part of a timeout's resend already let through.
        } else if at_una
            && (self.fast_due || nudged == Some(false))
            && nudged != Some(true)
            && !self.resent_within_rtt(seq, end, now)
        {
            // smoltcp's fast retransmit: on its third duplicate ACK (which ours mirror) or
            // on our nudge.
            self.fast_due = false;
            self.counters.fast_retransmits += 1;
            self.rearm_for_head(now);
        } else if nudged != Some(true) && self.is_lost_hole(seq, end, now) {
            // smoltcp's timeout resends everything from the first unacknowledged octet; in
            // recovery its holes go at once (each at most once an RTT), with no timeout's
            // collapse: every hole of a burst repaired in one round trip.
            self.counters.fast_retransmits += 1;
        } else if nudged == Some(true) || self.deadline().is_none_or(|d| now >= d) {
            self.timeout(now);
            if nudged == Some(true) {
                // smoltcp resends one segment for a nudge, not all: no go-back round.
                self.go_back = None;
            }
        } else if !new_part {
            self.counters.held += 1;
            return Verdict::Hold;
        } else {
            // smoltcp's own timer resent from the first unacknowledged octet and coalesced
            // new data behind it: the old part is not due (a delayed ACK is still on its way),
            // so only the new part goes.
            self.counters.held += 1;
            let from = self.nxt;
            self.first_sent(from, end, now);
            return Verdict::From(from);
        }
        self.counters.retransmits += 1;
        self.mark_resent(seq, end, now);
        if new_part {
            self.first_sent(self.nxt, end, now);
        }
        Verdict::Send
    }

    /// RFC 6675 section 4's IsLost, in recovery: `[start, end)` is not held by the peer,
    /// which holds at least three segments' worth of data sent after it; and it was not
    /// resent within the last RTT (that copy may still be on its way).
    fn is_lost_hole(&self, start: Seq, end: Seq, now: Duration) -> bool {
        if !self.in_recovery() || self.sacked.is_empty() {
            return false;
        }
        let above: usize = self
            .sacked
            .iter()
            .map(|&(l, r)| dist(if before(l, end) { end } else { l }, r))
            .sum();
        if above < 3 * self.mss {
            return false;
        }
        !self.resent_within_rtt(start, end, now)
    }

    /// Whether part of `[start, end)` was resent less than an RTT ago (that copy may still
    /// be on its way).
    fn resent_within_rtt(&self, start: Seq, end: Seq, now: Duration) -> bool {
        // Before any RTT sample, the timer's initial value stands in for it.
        let srtt = self.rtt.srtt().unwrap_or_else(|| self.rtt.rto());
        self.sent.iter().any(|s| {
            before(s.start, end) && before(start, s.end) && s.resent && since(now, s.last) < srtt
        })
    }

    /// RFC 6675 section 5 (NextSeg rule 1), all at once: the segments in flight the peer's
    /// SACK blocks show lost (RFC 6675 section 4's IsLost: three segments' worth held above)
    /// and not yet resent, into `out`. smoltcp resends only the first
    /// unacknowledged one (its fast retransmit) until its own timer runs out; the caller
    /// resends these itself and reports each with [`Sender::resent_below`].
    pub fn lost_holes(&self, out: &mut Vec<(Seq, Seq)>) {
        out.clear();
        if !self.in_recovery() || self.sacked.is_empty() {
            return;
        }
        // IsLost of each segment: a few SACK ranges per segment, not the whole window again.
        for s in &self.sent {
            // Once per recovery (RFC 6675's HighRxt): a resend that is lost in turn is found
            // by RACK's time rule once it is the oldest, or by the timer.
            if s.resent || self.fully_sacked(s.start, s.end) {
                continue;
            }
            let above: usize = self
                .sacked
                .iter()
                .map(|&(l, r)| dist(if before(l, s.end) { s.end } else { l }, r))
                .sum();
            if above >= 3 * self.mss {
                out.push((s.start, s.end));
            }
        }
    }

    /// A segment of [`Sender::lost_holes`] was resent from below smoltcp at `now`.
    pub fn resent_below(&mut self, start: Seq, end: Seq, now: Duration) {
        self.counters.retransmits += 1;
        self.counters.fast_retransmits += 1;
        self.mark_resent(start, end, now);
        if start == self.una {
            self.rearm_for_head(now);
        }
    }

    /// The oldest unacknowledged segment was resent in recovery: our timer starts again
    /// from now, as Linux rearms it. Its ACK comes a round trip after the resend, which
    /// with three duplicate ACKs to wait for first may be later than one RTO after the
    /// last new ACK, and a timeout then would collapse the window for nothing.
    fn rearm_for_head(&mut self, now: Duration) {
        self.timer_at = now;
    }

    /// Our timer expired and a resend goes out: RFC 6298 section 5.5-5.6 and RFC 5681's
    /// loss window; recovery lasts until everything sent so far is acknowledged.
    fn timeout(&mut self, now: Duration) {
        self.counters.rtos += 1;
        self.start_episode();
        self.cc.on_rto(self.in_flight(), now);
        self.rtt.back_off();
        self.timer_at = now;
        self.go_back = Some(self.nxt);
        self.recover = Some(self.nxt);
        self.dupacks = 0;
        self.fast_due = false;
    }

    /// A reduction: part of the episode under way, or the first of a new one (the undo
    /// of the previous one is then given up).
    fn start_episode(&mut self) {
        if self.episode.is_none_or(|e| e.ended) {
            self.cc.commit();
            self.episode = Some(Episode {
                resent: 0,
                dsacked: 0,
                ended: false,
            });
        }
    }

    /// `[start, end)` went out for the first time: it is timed, and the highest sent moves.
    fn first_sent(&mut self, start: Seq, end: Seq, now: Duration) {
        self.sent.push_back(Sent {
            start,
            end,
            at: stamp(now),
            last: stamp(now),
            resent: false,
            dsacked: false,
        });
        self.nxt = end;
        self.pipe += dist(start, end);
    }

    fn mark_resent(&mut self, start: Seq, end: Seq, now: Duration) {
        let mut n = 0;
        for s in self.sent.iter_mut() {
            if before(s.start, end) && before(start, s.end) {
                if !s.resent {
                    n += 1;
                    self.pipe += dist(s.start, s.end);
                }
                s.resent = true;
                s.last = stamp(now);
            }
        }
        if let Some(e) = &mut self.episode {
            e.resent += n.max(1);
        }
    }

    /// A segment from the peer at `now`.
    pub fn on_ack(&mut self, a: &AckInfo, now: Duration) {
        if !self.started {
            return;
        }
        // An ECN-Echo speaks of our data in flight (RFC 3168 section 6.1.2; RFC 8257 section
        // 3.3 counts the octets it acknowledges). With none in flight it repeats a mark
        // already answered: a DCTCP peer echoes its CE state on every segment it sends
        // until our next data segment arrives unmarked, so a connection whose last data
        // segment was marked and that now only receives sees the echo on every segment.
        let echo = a.ece && self.in_flight() > 0;
        if echo {
            self.counters.ecn_marks += 1;
        }
        let dsack = self.dsack(a);
        if dsack.is_none() {
            self.take_sacks(a.ack, a.sack);
        }
        if before(self.una, a.ack) && before_eq(a.ack, self.nxt) {
            self.new_ack(a, now);
        } else if a.ack == self.una
            && a.payload == 0
            && a.window == self.last_window
            && self.in_flight() > 0
        {
            // RFC 5681 section 2's duplicate ACK.
            self.dupacks += 1;
            if self.dupacks == 3 {
                // smoltcp resends the first unacknowledged segment now, in recovery too;
                // the window is reduced once per recovery (RFC 6582).
                if !self.in_recovery() {
                    self.start_episode();
                    self.cc.on_congestion(self.in_flight(), now);
                    self.recover = Some(self.nxt);
                }
                self.fast_due = true;
            }
        }
        self.last_window = a.window;
        self.set_pipe();
        self.detect_by_time(now);
        if let Some((start, end)) = dsack {
            self.on_dsack(start, end);
        }
        if echo && self.ecn_until.is_none_or(|u| before_eq(u, a.ack)) {
            self.cc.on_ecn(self.in_flight(), now);
            self.ecn_until = Some(self.nxt);
            self.cwr_due = true;
        }
    }

    fn new_ack(&mut self, a: &AckInfo, now: Duration) {
        let acked = dist(self.una, a.ack);
        self.una = a.ack;
        self.dupacks = 0;
        self.fast_due = false;
        // RFC 6298 section 5.3: new data acknowledged restarts the timer.
        self.timer_at = now;
        // Karn (RFC 6298 section 3): a sample from the newest segment fully acknowledged
        // and never resent.
        let mut sample = None;
        while let Some(s) = self.sent.front() {
            if !before_eq(s.end, a.ack) {
                break;
            }
            let s = self.sent.take_front().expect("front exists");
            if !s.resent {
                sample = Some(since(now, s.at));
            } else if s.dsacked {
                // Already found spurious.
            } else if self.min_rtt.is_some_and(|m| since(now, s.last) < m / 2) {
                // Acknowledged sooner after the resend than any round trip takes: the ACK
                // is the first copy's (RFC 4015's detection, with the RTT for a clock
                // where there are no timestamps; smoltcp peers send no DSACK).
                self.first_copy_arrived(Acked::of(&s, now));
            } else {
                if self.acked_resent.len() == ACKED_RESENT {
                    self.acked_resent.pop_front();
                }
                self.acked_resent.push_back(Acked::of(&s, now));
            }
        }
        if let Some(r) = sample {
            // The window this ACK ends holds about one ACK per two full segments (RFC 5681
            // section 4.2): that many samples per round trip.
            let per_window = (acked + self.in_flight()).div_ceil(2 * self.mss.max(1));
            self.rtt.sample_of(r, per_window.clamp(1, 1024) as u32);
            self.cc.on_rtt(r);
            self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        }
        self.sacked.retain(|&(_, r)| before(a.ack, r));
        if self.go_back.is_some_and(|g| before_eq(g, a.ack)) {
            self.go_back = None;
        }
        if before_eq(self.round_end, a.ack) {
            self.cc.on_round_end();
            self.round_end = self.nxt;
        }
        let window_done = before(self.dctcp_end, a.ack);
        if window_done {
            self.dctcp_end = self.nxt;
        }
        self.cc.on_dctcp_ack(acked, a.ece, window_done);
        match self.recover {
            Some(recover) if before(a.ack, recover) => {
                // RFC 6582 section 3.2 step 3, a partial ACK: the first unacknowledged
                // segment is resent now, not on a timer. With SACK blocks the peer holds data
                // above it; with none after a timeout (a queue that dropped a whole window),
                // everything above is lost too, and waiting for the backed-off timer would
                // repair one segment per timeout.
                let end = self.sent.front().map_or(a.ack, |s| s.end);
                if !self.resent_within_rtt(a.ack, end, now) {
                    self.nudge = Some(false);
                }
            }
            Some(_) => {
                // Full ACK: recovery ends (RFC 6582 section 3.2 step 3).
                self.recover = None;
                self.go_back = None;
                if let Some(e) = &mut self.episode {
                    e.ended = true;
                }
            }
            None => {
                let srtt = self.rtt.srtt().unwrap_or(Duration::ZERO);
                self.cc.on_ack(acked, now, srtt);
            }
        }
    }

    /// RACK's rule (RFC 8985 section 6.2), for the first unacknowledged segment: the peer
    /// holds data sent after it, and it was (last) sent more than an RTT and a reordering
    /// window (a quarter RTT) ago: lost, whatever the count of duplicate ACKs (a small
    /// window gives fewer than three; a lost resend gives none). It is resent at once (a
    /// nudge) instead of waiting for the timer.
    fn detect_by_time(&mut self, now: Duration) {
        if self.sacked.is_empty() || self.nudge.is_some() || self.fast_due {
            return;
        }
        let (Some(front), Some(srtt)) = (self.sent.front(), self.rtt.srtt()) else {
            return;
        };
        if !self.sacked.iter().any(|&(_, r)| before(front.end, r))
            || since(now, front.last) < srtt + srtt / 4
        {
            return;
        }
        if !self.in_recovery() {
            self.start_episode();
            self.cc.on_congestion(self.in_flight(), now);
            self.recover = Some(self.nxt);
        }
        self.nudge = Some(false);
    }

    /// A DSACK block (RFC 2883 section 4): the first block, below the cumulative ACK or
    /// inside the second block.
    fn dsack(&self, a: &AckInfo) -> Option<(Seq, Seq)> {
        let &(l, r) = a.sack.first()?;
        let below = before_eq(r, a.ack);
        let inside = a
            .sack
            .get(1)
            .is_some_and(|&(l2, r2)| before_eq(l2, l) && before_eq(r, r2));
        (below || inside).then_some((l, r))
    }

    fn take_sacks(&mut self, ack: Seq, blocks: &[(Seq, Seq)]) {
        for &(l, r) in blocks {
            if !before(l, r) || before_eq(r, ack) || before(self.nxt, r) {
                continue;
            }
            let (mut l, mut r) = (l, r);
            // Merge with what overlaps or touches.
            self.sacked.retain(|&(a, b)| {
                if before_eq(a, r) && before_eq(l, b) {
                    if before(a, l) {
                        l = a;
                    }
                    if before(r, b) {
                        r = b;
                    }
                    false
                } else {
                    true
                }
            });
            if self.sacked.len() == SACK_RANGES {
                self.sacked.remove(0);
            }
            self.sacked.push((l, r));
        }
    }

    /// The peer got `[start, end)` twice: each resend in it was spurious.
    fn on_dsack(&mut self, start: Seq, end: Seq) {
        let overlaps = |a: Seq, b: Seq| before(a, end) && before(start, b);
        // Resends acknowledged since: their first copy's round trip teaches the timer.
        while let Some(i) = self
            .acked_resent
            .iter()
            .position(|s| overlaps(s.start, s.end))
        {
            let s = self.acked_resent.remove(i).expect("found");
            self.counters.dsacked += 1;
            self.first_copy_arrived(s);
        }
        // Resends still above a hole (RFC 2883 section 4.2: the block inside the second):
        // proven spurious as well, though not acknowledged yet, so no round trip to take.
        let mut n = 0u32;
        for s in self.sent.iter_mut() {
            if s.resent && !s.dsacked && overlaps(s.start, s.end) {
                s.dsacked = true;
                n += 1;
            }
        }
        self.counters.dsacked += u64::from(n);
        for _ in 0..n {
            self.episode_resend_was_spurious();
        }
    }

    /// The first copy of a resent segment reached the peer: the resend was spurious.
    fn first_copy_arrived(&mut self, s: Acked) {
        // Its ACK's delay is what the timer must allow for (RFC 4015's response: the RTT
        // of the original transmission).
        self.rtt.sample(s.acked_at.saturating_sub(s.first_sent));
        self.episode_resend_was_spurious();
    }

    /// One resend of the episode under way proved unnecessary: when all were, its
    /// reduction is undone.
    fn episode_resend_was_spurious(&mut self) {
        let Some(e) = &mut self.episode else {
            return;
        };
        e.dsacked += 1;
        if e.dsacked >= e.resent {
            // RFC 3708 section 3: every resend of the episode was unnecessary.
            self.episode = None;
            if self.cc.undo() {
                self.counters.spurious += 1;
            }
            if self.recover.is_some_and(|r| before_eq(r, self.una)) || self.in_flight() == 0 {
                self.recover = None;
            }
        }
    }

    /// Whether a segment from `seq` on is a first transmission (data never sent before),
    /// which alone may be ECN-capable (RFC 3168 section 6.1.5).
    pub fn is_new(&self, seq: Seq) -> bool {
        !self.started || before_eq(self.nxt, seq)
    }

    /// Whether this new data segment must carry CWR: the first after a reduction for an
    /// ECN-Echo (RFC 3168 section 6.1.2). Asking clears it.
    pub fn take_cwr(&mut self) -> bool {
        std::mem::take(&mut self.cwr_due)
    }

    /// A received data segment was marked CE (RFC 3168 section 5).
    pub fn on_ce(&mut self) {
        self.counters.ecn_marks += 1;
    }

    /// Our port still holds frames it could not hand on (Linux makes the same check, of a
    /// segment still in the host's queue, before it resends): what is in flight may not
    /// have left yet, and a resend would only queue behind it. A timer due now starts again
    /// from now instead of expiring; once the port drains, a lost segment costs one RTO
    /// more. With thousands of connections sending into a slow peer, the queue's wait
    /// otherwise fires every connection's timer at once, and their resends go behind the
    /// same queue.
    pub fn host_queue_busy(&mut self, now: Duration) {
        if self.deadline().is_some_and(|d| now >= d) && self.go_back.is_none() {
            self.timer_at = now;
            self.counters.held += 1;
        }
    }

    /// Whether smoltcp should be made to resend the first unacknowledged segment now, and
    /// whether as a timeout: a partial ACK with a hole at its edge, or our timer expired.
    /// Asking once clears it; the segment that follows is taken as that resend.
    pub fn wants_nudge(&mut self, now: Duration) -> Option<bool> {
        // RACK's reordering timer (RFC 8985 section 6.2): with the window full and every
        // later segment held by the peer, no ACK comes to run the rule.
        self.detect_by_time(now);
        let due = self.nudge.take().or_else(|| {
            (self.deadline().is_some_and(|d| now >= d) && self.go_back.is_none()).then_some(true)
        });
        if due.is_some() {
            self.nudged = due;
        }
        due
    }

    /// The sequence number the peer acknowledged last.
    pub fn una(&self) -> Seq {
        self.una
    }

    /// The sequence number after the highest we sent; none before anything was sent.
    pub fn nxt(&self) -> Option<Seq> {
        self.started.then_some(self.nxt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn sender(alg: Algorithm) -> Sender {
        Sender::new(alg, MSS, 1 << 20, ms(200), ms(1), ms(40))
    }

    fn ack(a: Seq) -> AckInfo<'static> {
        AckInfo {
            ack: a,
            window: 100,
            ..AckInfo::default()
        }
    }

    /// Sends `n` full segments from `seq` at `t`.
    fn send(s: &mut Sender, seq: Seq, n: usize, t: Duration) {
        for i in 0..n {
            let at = seq.wrapping_add((i * MSS) as u32);
            assert_eq!(s.on_send(at, MSS, t), Verdict::Send);
        }
    }

    #[test]
    fn after_a_timeout_with_the_whole_window_lost_each_partial_ack_resends_the_next() {
        // RFC 6582 section 3.2 step 3: a queue dropped all five segments; the timer resent
        // the first, and its ACK (partial, no SACK blocks) asks for the second at once,
        // not after the backed-off timer.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 5, ms(0));
        let t = ms(1000);
        assert_eq!(s.wants_nudge(t), Some(true), "our timer expired");
        assert_eq!(s.on_send(0, MSS, t), Verdict::Send);
        assert_eq!(s.counters.rtos, 1);
        s.on_ack(&ack(1000), t + ms(5));
        assert_eq!(s.wants_nudge(t + ms(5)), Some(false), "the next hole, now");
        assert_eq!(s.on_send(1000, MSS, t + ms(5)), Verdict::Send);
        assert_eq!(s.counters.rtos, 1, "no second timeout");
    }

    #[test]
    fn a_resend_not_due_carrying_new_data_sends_only_the_new_data() {
        // smoltcp's timeout resends from the first unacknowledged octet up to what the
        // window allows, which may reach past what was ever sent. RFC 6298 section 5: the
        // old part waits for our timer (a delayed ACK may be on its way); the new part goes.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 2, ms(0));
        assert_eq!(s.on_send(0, MSS, ms(1)), Verdict::Hold, "not due");
        assert_eq!(
            s.on_send(1000, 2 * MSS, ms(1)),
            Verdict::From(2000),
            "half of it new"
        );
        assert_eq!(s.in_flight(), 3 * MSS);
        assert_eq!(s.counters.rtos, 0);
        assert_eq!(s.counters.retransmits, 0);
        send(&mut s, 3000, 1, ms(1));
    }

    #[test]
    fn no_timeout_while_our_own_port_still_holds_frames() {
        // Linux resends nothing still in the host's queue (its TSQ check): the segments in
        // flight may not have left, and a resend would queue behind them. The timer waits
        // from the last time the port was found holding frames.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 2, ms(0));
        s.on_ack(&ack(1000), ms(5));
        let rto = s.rto();
        for t in [ms(200), ms(400), ms(600)] {
            s.host_queue_busy(t);
            assert_eq!(s.wants_nudge(t), None, "put off at {t:?}");
            assert_eq!(
                s.on_send(1000, MSS, t),
                Verdict::Hold,
                "smoltcp's own timer"
            );
        }
        assert_eq!(s.counters.rtos, 0);
        assert_eq!(s.wants_nudge(ms(600) + rto / 2), None, "not due yet");
        assert_eq!(s.wants_nudge(ms(600) + rto), Some(true), "the port drained");
        assert_eq!(s.on_send(1000, MSS, ms(600) + rto), Verdict::Send);
        assert_eq!(s.counters.rtos, 1);
    }

    #[test]
    fn rtt_samples_follow_karn() {
        // RFC 6298 section 3: no sample from a resent segment.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 2, ms(0));
        s.on_ack(&ack(2000), ms(5));
        assert_eq!(s.rtt.srtt(), Some(ms(5)));
        send(&mut s, 2000, 1, ms(10));
        // Our timer: lone segment, RTT 5 ms + 40 ms of peer ACK delay.
        assert_eq!(s.rto(), ms(45));
        assert_eq!(s.on_send(2000, MSS, ms(30)), Verdict::Hold, "not due");
        assert_eq!(s.on_send(2000, MSS, ms(56)), Verdict::Send, "due");
        assert_eq!(s.counters.rtos, 1);
        // Acknowledged a round trip after the resend: either copy's, so no sample.
        s.on_ack(&ack(3000), ms(62));
        assert_eq!(s.rtt.srtt(), Some(ms(5)), "no sample from the resent one");
    }

    #[test]
    fn three_duplicate_acks_reduce_once_and_let_the_fast_retransmit_through() {
        // RFC 5681 section 3.2 and RFC 6582: one reduction per window of data.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 10, ms(0));
        s.on_ack(&ack(1000), ms(1));
        let cwnd = s.cwnd();
        for _ in 0..3 {
            s.on_ack(&ack(1000), ms(2));
        }
        assert_eq!(s.cwnd(), 9 * MSS / 2, "half of the 9 segments in flight");
        assert!(cwnd > s.cwnd());
        assert_eq!(s.on_send(1000, MSS, ms(2)), Verdict::Send);
        assert_eq!(s.counters.fast_retransmits, 1);
        assert_eq!(s.counters.rtos, 0);
        for _ in 0..5 {
            s.on_ack(&ack(1000), ms(2));
        }
        assert_eq!(s.cwnd(), 9 * MSS / 2, "no second reduction");
        s.on_ack(&ack(10_000), ms(3));
        assert!(s.recover.is_none(), "full ACK ends recovery");
    }

    #[test]
    fn a_partial_ack_with_sacked_data_above_asks_for_the_next_hole() {
        // RFC 6582 section 3.2 step 3: a partial ACK resends the first unacknowledged segment.
        let mut s = sender(Algorithm::Cubic);
        send(&mut s, 0, 10, ms(0));
        // Segments 1 and 2 lost; the peer holds 3..10.
        let sack = [(3000, 10_000)];
        s.on_ack(&ack(1000), ms(1));
        for _ in 0..3 {
            s.on_ack(
                &AckInfo {
                    sack: &sack,
                    ..ack(1000)
                },
                ms(1),
            );
        }
        assert_eq!(s.on_send(1000, MSS, ms(1)), Verdict::Send);
        assert_eq!(s.wants_nudge(ms(1)), None);
        s.on_ack(
            &AckInfo {
                sack: &sack,
                ..ack(2000)
            },
            ms(2),
        );
        assert_eq!(s.wants_nudge(ms(2)), Some(false));
        assert_eq!(s.on_send(2000, MSS, ms(2)), Verdict::Send);
        assert_eq!(s.counters.fast_retransmits, 2);
        assert_eq!(s.counters.rtos, 0);
    }

    #[test]
    fn in_recovery_smoltcps_go_back_resend_carries_every_hole_and_only_the_holes() {
        // RFC 6675 section 4 (IsLost): a burst of holes repaired in one round trip.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 2, ms(0));
        s.on_ack(&ack(2000), ms(1));
        send(&mut s, 2000, 20, ms(2));
        // Segments 2..7 lost (5 of them), the peer holds 7..22 and says so.
        let held = [(7000, 22_000)];
        for _ in 0..3 {
            s.on_ack(
                &AckInfo {
                    sack: &held,
                    ..ack(2000)
                },
                ms(3),
            );
        }
        assert_eq!(
            s.on_send(2000, MSS, ms(3)),
            Verdict::Send,
            "fast retransmit"
        );
        // smoltcp's own timer (not ours) resends from 2000 on: holes 3..7 go, the held
        // data and the hole just resent do not.
        let t = ms(3) + Duration::from_micros(500);
        assert_eq!(
            s.on_send(2000, MSS, t),
            Verdict::Hold,
            "resent an RTT ago at most"
        );
        for i in 3..7 {
            assert_eq!(s.on_send(i * 1000, MSS, t), Verdict::Send, "hole {i}");
        }
        for i in 7..22 {
            assert_eq!(s.on_send(i * 1000, MSS, t), Verdict::Hold, "held {i}");
        }
        assert_eq!(s.counters.rtos, 0);
        assert_eq!(s.counters.fast_retransmits, 5);
        assert_eq!(s.counters.retransmits, 5);
    }

    #[test]
    fn every_hole_the_sack_blocks_show_lost_is_listed_at_once_and_resent_once_a_round() {
        // RFC 6675 section 5: in recovery, each segment IsLost finds is resent, all of them
        // in the first round trip; not again within an RTT.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 2, ms(0));
        s.on_ack(&ack(2000), ms(10));
        send(&mut s, 2000, 20, ms(20));
        // Segments 2, 6 and 11 lost: three holes apart, the rest held by the peer.
        let held = [(3000, 6000), (7000, 11_000), (12_000, 22_000)];
        let mut out = Vec::new();
        s.lost_holes(&mut out);
        assert!(out.is_empty(), "not in recovery");
        for _ in 0..3 {
            s.on_ack(
                &AckInfo {
                    sack: &held,
                    ..ack(2000)
                },
                ms(30),
            );
        }
        s.lost_holes(&mut out);
        assert_eq!(out, [(2000, 3000), (6000, 7000), (11_000, 12_000)]);
        for &(a, b) in &out {
            s.resent_below(a, b, ms(30));
        }
        let mut again = Vec::new();
        s.lost_holes(&mut again);
        assert!(again.is_empty(), "resent within the RTT");
        assert_eq!(
            s.on_send(2000, MSS, ms(31)),
            Verdict::Hold,
            "smoltcp's fast retransmit of the first hole: already resent"
        );
        assert_eq!(
            (
                s.counters.retransmits,
                s.counters.fast_retransmits,
                s.counters.rtos
            ),
            (3, 3, 0)
        );
        // The first hole filled: a partial ACK, and no nudge for the next, already resent.
        s.on_ack(
            &AckInfo {
                sack: &held[1..],
                ..ack(6000)
            },
            ms(40),
        );
        assert_eq!(s.wants_nudge(ms(40)), None);
        // An RTT on with no word of them: not listed again (RFC 6675 resends a segment once
        // per recovery); the oldest goes by RACK's time rule.
        s.lost_holes(&mut again);
        assert!(again.is_empty());
        assert_eq!(s.wants_nudge(ms(55)), Some(false));
    }

    #[test]
    fn resends_of_sacked_data_are_held_after_a_timeout() {
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 5, ms(0));
        s.on_ack(
            &AckInfo {
                sack: &[(1000, 5000)],
                ..ack(0)
            },
            ms(1),
        );
        // smoltcp's timeout resends everything from the first unacknowledged octet.
        let t = ms(300);
        assert_eq!(s.on_send(0, MSS, t), Verdict::Send);
        assert_eq!(s.counters.rtos, 1);
        for i in 1..5 {
            assert_eq!(s.on_send(i * 1000, MSS, t), Verdict::Hold);
        }
        assert_eq!(s.counters.retransmits, 1);
        assert_eq!(s.counters.held, 4);
        assert_eq!(s.cwnd(), MSS, "the loss window");
    }

    #[test]
    fn in_recovery_what_the_sack_blocks_show_delivered_makes_room_for_new_data() {
        // RFC 6675 sections 4 and 5: new data goes while cwnd - pipe allows a segment,
        // pipe counting the segments neither SACKed nor lost, and the resent ones.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 2, ms(0));
        s.on_ack(&ack(2000), ms(10));
        send(&mut s, 2000, 20, ms(20));
        assert_eq!(
            s.send_window(),
            s.cwnd(),
            "no SACK blocks: the window alone"
        );
        let dup = |s: &mut Sender, sack: &[(Seq, Seq)], t| {
            s.on_ack(&AckInfo { sack, ..ack(2000) }, t);
        };
        for r in [4000, 5000, 6000] {
            dup(&mut s, &[(3000, r)], ms(30));
        }
        // Three duplicate ACKs: cwnd = 20 segments in flight / 2 (RFC 5681 equation (4)).
        assert_eq!((s.cwnd(), s.in_flight()), (10 * MSS, 20 * MSS));
        // pipe: 16 segments above the SACKed three; the one below them is lost.
        assert_eq!(s.pipe, 16 * MSS);
        assert_eq!(
            s.send_window(),
            14 * MSS,
            "still more out than cwnd: nothing new"
        );
        s.resent_below(2000, 3000, ms(30));
        assert_eq!(s.pipe, 17 * MSS, "the resend is in the network");
        // Ten more segments reported delivered: room for three new ones.
        dup(&mut s, &[(3000, 16_000)], ms(32));
        assert_eq!(s.pipe, 7 * MSS);
        assert_eq!(s.send_window() - s.in_flight(), 3 * MSS);
        send(&mut s, 22_000, 3, ms(32));
        assert_eq!(s.send_window(), s.in_flight(), "cwnd full again");
        // The hole repaired: recovery ends with the window at ssthresh and no burst.
        s.on_ack(&ack(22_000), ms(42));
        assert_eq!((s.send_window(), s.in_flight()), (10 * MSS, 3 * MSS));
        // `none` keeps the node's fixed bound.
        let mut n = sender(Algorithm::None);
        send(&mut n, 0, 5, ms(0));
        n.on_ack(
            &AckInfo {
                sack: &[(1000, 5000)],
                ..ack(0)
            },
            ms(1),
        );
        assert_eq!(n.send_window(), 1 << 20);
    }

    #[test]
    fn every_resend_a_dsack_proves_spurious_is_counted_undone_or_not() {
        // RFC 3708 section 2: a DSACK (RFC 2883) for a resent segment shows the resend was
        // unnecessary. Two of three holes resent in one episode come back duplicated: two
        // spurious resends, while the episode (one resend real) is not undone.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 2, ms(0));
        s.on_ack(&ack(2000), ms(10));
        send(&mut s, 2000, 20, ms(20));
        let held = [(3000, 6000), (7000, 11_000), (12_000, 22_000)];
        for _ in 0..3 {
            s.on_ack(
                &AckInfo {
                    sack: &held,
                    ..ack(2000)
                },
                ms(30),
            );
        }
        let mut out = Vec::new();
        s.lost_holes(&mut out);
        assert_eq!(out.len(), 3);
        for &(a, b) in &out {
            s.resent_below(a, b, ms(30));
        }
        let cwnd = s.cwnd();
        // RFC 2883 section 4.2: the duplicate of 6000..7000, still above the hole at 2000,
        // reported as a first block inside the second.
        s.on_ack(
            &AckInfo {
                sack: &[(6000, 7000), (3000, 11_000), (12_000, 22_000)],
                ..ack(2000)
            },
            ms(35),
        );
        assert_eq!((s.counters.dsacked, s.counters.spurious), (1, 0));
        // The hole at 2000 filled by its resend; then section 4.1's DSACK below the
        // cumulative ACK, for 11000..12000 (a first copy that was only late).
        s.on_ack(&ack(22_000), ms(41));
        s.on_ack(
            &AckInfo {
                sack: &[(11_000, 12_000)],
                ..ack(22_000)
            },
            ms(42),
        );
        assert_eq!(s.counters.dsacked, 2);
        assert_eq!(s.counters.spurious, 0, "one resend of three was needed");
        assert_eq!(s.cwnd(), cwnd, "not undone");
        // A repeated report of the same duplicate is not a second resend.
        s.on_ack(
            &AckInfo {
                sack: &[(11_000, 12_000)],
                ..ack(22_000)
            },
            ms(43),
        );
        assert_eq!(s.counters.dsacked, 2);
    }

    #[test]
    fn a_dsack_for_every_resend_undoes_the_reduction_and_teaches_the_timer() {
        // RFC 3708 section 3 and RFC 2883 section 4: a spurious timeout, found and undone.
        let mut s = sender(Algorithm::Cubic);
        send(&mut s, 0, 4, ms(0));
        s.on_ack(&ack(4000), ms(1));
        let cwnd = s.cwnd();
        // A lone small Write whose ACK the peer delays 60 ms (past our 41 ms timer).
        assert_eq!(s.on_send(4000, 64, ms(10)), Verdict::Send);
        assert_eq!(s.on_send(4000, 64, ms(55)), Verdict::Send);
        assert_eq!(s.counters.rtos, 1);
        assert!(s.cwnd() < cwnd);
        s.on_ack(&ack(4064), ms(70));
        s.on_ack(
            &AckInfo {
                sack: &[(4000, 4064)],
                ..ack(4064)
            },
            ms(71),
        );
        assert_eq!(s.counters.spurious, 1);
        assert_eq!(s.counters.dsacked, 1);
        assert_eq!(s.cwnd(), cwnd, "undone");
        // The first copy's ACK took 60 ms: the timer now allows for it.
        assert!(s.rtt.srtt().unwrap() > ms(8));
        assert_eq!(s.on_send(4064, 64, ms(80)), Verdict::Send);
        assert!(s.rto() > ms(60), "{:?}", s.rto());
    }

    #[test]
    fn an_ack_faster_than_any_round_trip_after_a_resend_undoes_it() {
        // RFC 4015 section 3's detection (by the RTT here): the ACK of the first copy.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 4, ms(0));
        s.on_ack(&ack(4000), ms(10));
        let cwnd = s.cwnd();
        // A lone segment whose ACK the peer holds past our timer (10 ms + 40 ms).
        s.on_send(4000, MSS, ms(20));
        assert_eq!(s.on_send(4000, MSS, ms(80)), Verdict::Send);
        assert_eq!((s.counters.rtos, s.cwnd()), (1, MSS));
        // Its ACK 1 ms after the resend: no round trip is that short.
        s.on_ack(&ack(5000), ms(81));
        assert_eq!(s.counters.spurious, 1);
        assert!(s.cwnd() >= cwnd, "undone");
        assert!(
            s.rtt.srtt().unwrap() > ms(10),
            "the 61 ms of the first copy count"
        );
        // An ACK a round trip after a resend says nothing: no undo.
        s.on_send(5000, MSS, ms(100));
        let d = s.deadline().unwrap();
        assert_eq!(s.on_send(5000, MSS, d), Verdict::Send);
        s.on_ack(&ack(6000), d + ms(30));
        assert_eq!(s.counters.spurious, 1);
        assert!(s.cwnd() < cwnd);
    }

    #[test]
    fn our_timer_asks_for_a_resend_when_it_expires() {
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 4, ms(0));
        s.on_ack(&ack(1000), ms(1));
        assert_eq!(s.wants_nudge(ms(2)), None);
        let d = s.deadline().unwrap();
        assert_eq!(s.wants_nudge(d), Some(true));
        assert_eq!(s.on_send(1000, MSS, d), Verdict::Send);
        assert_eq!(s.counters.rtos, 1);
        assert!(s.go_back.is_none(), "one segment, no go-back round");
        assert_eq!(
            s.on_send(2000, MSS, d),
            Verdict::Hold,
            "a second resend waits for the backed-off timer"
        );
    }

    #[test]
    fn a_loss_with_too_few_duplicates_is_found_by_time() {
        // RFC 8985 section 6.2: a segment sent more than an RTT (plus a quarter) before one
        // the peer holds is lost; here a window of 3 gives 2 duplicate ACKs only.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 2, ms(0));
        s.on_ack(&ack(2000), ms(10));
        assert_eq!(s.rtt.srtt(), Some(ms(10)));
        send(&mut s, 2000, 3, ms(20));
        let sack = |l, r| [(l, r)];
        let held = sack(3000, 4000);
        s.on_ack(
            &AckInfo {
                sack: &held,
                ..ack(2000)
            },
            ms(25),
        );
        assert_eq!(
            s.wants_nudge(ms(25)),
            None,
            "within the RTT and its reordering window"
        );
        let held = sack(3000, 5000);
        s.on_ack(
            &AckInfo {
                sack: &held,
                ..ack(2000)
            },
            ms(33),
        );
        assert_eq!(s.wants_nudge(ms(33)), Some(false), "lost: resent at once");
        assert_eq!(s.on_send(2000, MSS, ms(33)), Verdict::Send);
        assert_eq!(s.counters.fast_retransmits, 1);
        assert_eq!(s.counters.rtos, 0);
        // The resend is lost too: found again an RTT later, not by the timer.
        s.on_ack(
            &AckInfo {
                sack: &held,
                ..ack(2000)
            },
            ms(40),
        );
        // That was the third duplicate: smoltcp resends by itself, but our copy went 7 ms
        // ago, less than an RTT: it may still be on its way (RFC 6675 resends a segment
        // once per recovery round), so this one is held.
        assert_eq!(s.on_send(2000, MSS, ms(40)), Verdict::Hold);
        assert_eq!(s.counters.fast_retransmits, 1);
        assert_eq!(s.wants_nudge(ms(45)), None, "within the RTT");
        s.on_ack(
            &AckInfo {
                sack: &held,
                ..ack(2000)
            },
            ms(53),
        );
        assert_eq!(
            s.wants_nudge(ms(53)),
            Some(false),
            "lost again, found by time"
        );
        assert_eq!(s.counters.rtos, 0);
    }

    #[test]
    fn ecn_echo_reduces_once_per_window() {
        // RFC 3168 section 6.1.2.
        let mut s = sender(Algorithm::NewReno);
        send(&mut s, 0, 10, ms(0));
        let ece = |a| AckInfo {
            ece: true,
            ..ack(a)
        };
        s.on_ack(&ece(1000), ms(1));
        let after = s.cwnd();
        assert_eq!(after, 9 * MSS / 2);
        s.on_ack(&ece(2000), ms(1));
        assert_eq!(s.cwnd(), after, "same window of data");
        assert_eq!(s.counters.ecn_marks, 2);
    }

    #[test]
    fn an_ecn_echo_with_nothing_in_flight_is_not_a_mark() {
        // RFC 3168 section 6.1.2, RFC 8257 section 3.3: an echo answers for data in flight.
        // A DCTCP peer whose last segment from us was marked CE echoes it on everything it
        // sends until our next data arrives; with all our data acknowledged, those echoes
        // neither count nor cut the window, again and again.
        let mut s = sender(Algorithm::Dctcp);
        send(&mut s, 0, 2, ms(0));
        s.on_ack(&ack((2 * MSS) as Seq), ms(1));
        assert_eq!(s.in_flight(), 0);
        let (cwnd, marks) = (s.cwnd(), s.counters.ecn_marks);
        let ece = AckInfo {
            ece: true,
            ..ack((2 * MSS) as Seq)
        };
        for t in 2..50 {
            s.on_ack(&ece, ms(t));
        }
        assert_eq!((s.cwnd(), s.counters.ecn_marks), (cwnd, marks));
        assert!(!s.take_cwr(), "no reduction to signal");
        // Data in flight again: its echo counts and is answered.
        send(&mut s, (2 * MSS) as Seq, 4, ms(50));
        s.on_ack(
            &AckInfo {
                ece: true,
                ..ack((3 * MSS) as Seq)
            },
            ms(51),
        );
        assert_eq!(s.counters.ecn_marks, marks + 1);
        assert!(s.take_cwr(), "the reduction is signalled");
    }

    #[test]
    fn after_an_ecn_reduction_one_new_segment_carries_cwr_and_resends_are_not_new() {
        // RFC 3168 section 6.1.2 (CWR on the first new data after the reduction) and
        // section 6.1.5 (no ECT on a retransmission).
        let mut s = sender(Algorithm::Cubic);
        assert!(s.is_new(0), "nothing sent yet");
        send(&mut s, 0, 4, ms(0));
        assert!(!s.take_cwr());
        assert!(!s.is_new(1000) && s.is_new(4000));
        s.on_ack(
            &AckInfo {
                ece: true,
                ..ack(1000)
            },
            ms(1),
        );
        assert!(s.take_cwr());
        assert!(!s.take_cwr(), "once");
        s.on_ack(
            &AckInfo {
                ece: true,
                ..ack(2000)
            },
            ms(1),
        );
        assert!(
            !s.take_cwr(),
            "same window of data: no second reduction, no CWR"
        );
    }

    #[test]
    fn a_full_default_window_of_segments_is_tracked_in_under_4_kib() {
        // The per-connection budget beyond TCP's buffers (4 KiB): 256 KiB of 1460-octet
        // segments.
        let n = (256 << 10) / 1460 + 1;
        println!("{} B per segment in flight", std::mem::size_of::<Sent>());
        assert!(n * std::mem::size_of::<Sent>() < 4096);
    }

    #[test]
    fn timestamps_wrap_after_71_minutes_and_differences_stay_right() {
        let t = Duration::from_micros(u64::from(u32::MAX) - 10);
        let later = t + Duration::from_micros(30);
        assert_eq!(since(later, stamp(t)), Duration::from_micros(30));
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut s = sender(Algorithm::NewReno);
        let base = u32::MAX - 1500;
        send(&mut s, base, 3, ms(0));
        assert_eq!(s.in_flight(), 3 * MSS);
        s.on_ack(&ack(base.wrapping_add(2000)), ms(1));
        assert_eq!(s.in_flight(), MSS);
    }
}
