//! Congestion control, sans-IO: a [`Window`] in octets that ACKs, losses, timeouts and ECN
//! echoes move, with the time handed in. No clock, no segments: `sender.rs` reads those off
//! the wire and calls in. The window is what the node keeps in flight per connection, in
//! whole FPDUs, so a first transmission never splits one across segments.
//!
//! - NewReno: RFC 5681 (slow start, congestion avoidance, 3 duplicate ACKs, timeout), with
//!   RFC 6582's recovery point kept by the caller;
//! - CUBIC: RFC 9438 (`cubic.rs`), the default, with HyStart++ (RFC 9406, `hystart.rs`)
//!   for its first slow start, as Linux's CUBIC has HyStart;
//! - DCTCP: RFC 8257 (`dctcp.rs`), NewReno growth with the ECN-proportional cut.
//!
//! The window never exceeds the node's own bound (`TcpSettings::max_inflight`), and
//! [`Algorithm::None`] is that bound alone.

mod cubic;
mod dctcp;
pub mod ecn;
mod hystart;
pub mod resend;
mod rtt;
pub mod sender;

pub use cubic::Cubic;
pub use dctcp::Dctcp;
pub use hystart::HyStart;
pub use rtt::RttEstimator;

use std::time::Duration;

/// Which congestion controller a connection runs (`tcp.congestion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// The node's fixed in-flight bound only: for dedicated links.
    None,
    NewReno,
    #[default]
    Cubic,
    Dctcp,
}

/// RFC 6928 section 2: the initial window, min(10 * MSS, max(2 * MSS, 14600)).
pub fn initial_window(mss: usize) -> usize {
    (10 * mss).min((2 * mss).max(14600))
}

/// What the window keeps for an undo (RFC 3708 / RFC 9438 section 4.9): its state before
/// the reduction that turned out spurious.
#[derive(Debug, Clone)]
struct Prior {
    cwnd: usize,
    ssthresh: usize,
    cubic: Cubic,
}

/// A connection's congestion window in octets.
#[derive(Debug, Clone)]
pub struct Window {
    alg: Algorithm,
    mss: usize,
    /// The node's own bound, which the window never exceeds.
    max: usize,
    cwnd: usize,
    ssthresh: usize,
    /// Octets acknowledged in congestion avoidance not yet turned into window growth
    /// (RFC 5681 section 3.1, byte counting).
    ca_acked: usize,
    cubic: Cubic,
    dctcp: Dctcp,
    hystart: HyStart,
    prior: Option<Prior>,
}

impl Window {
    pub fn new(alg: Algorithm, mss: usize, max: usize) -> Window {
        let mss = mss.max(1);
        let max = max.max(mss);
        Window {
            alg,
            mss,
            max,
            cwnd: initial_window(mss).min(max),
            // RFC 5681 section 3.1: arbitrarily high at first.
            ssthresh: usize::MAX,
            ca_acked: 0,
            cubic: Cubic::default(),
            dctcp: Dctcp::default(),
            hystart: if alg == Algorithm::Cubic {
                HyStart::default()
            } else {
                HyStart::off()
            },
            prior: None,
        }
    }

    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// Octets the connection may have unacknowledged.
    pub fn cwnd(&self) -> usize {
        match self.alg {
            Algorithm::None => self.max,
            _ => self.cwnd,
        }
    }

    pub fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    /// DCTCP's estimate of the fraction of marked octets (RFC 8257 section 3.3), if DCTCP.
    pub fn dctcp_alpha(&self) -> Option<f64> {
        (self.alg == Algorithm::Dctcp).then_some(self.dctcp.alpha)
    }

    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// The floor of a reduced window: two segments (RFC 5681 equation (4)).
    fn two(&self) -> usize {
        2 * self.mss
    }

    fn clamp(&mut self) {
        self.cwnd = self.cwnd.clamp(self.mss, self.max);
    }

    /// `acked` new octets acknowledged outside loss recovery, at `now`, the smoothed RTT
    /// `srtt` (CUBIC's W_cubic looks one RTT ahead).
    pub fn on_ack(&mut self, acked: usize, now: Duration, srtt: Duration) {
        if self.alg == Algorithm::None || acked == 0 {
            return;
        }
        let mut acked = acked;
        if self.in_slow_start() {
            // RFC 5681 section 3.1 grows by at most one SMSS per ACK; our peers acknowledge
            // up to a burst (32 frames) at once, so the octets acknowledged count whole
            // (RFC 3465 byte counting, as Linux does; RFC 9406's limit L of 8 segments per
            // ACK is left out for the same reason), up to ssthresh. In HyStart++'s
            // Conservative Slow Start, a quarter of that (RFC 9406 section 4.3).
            let grow = acked.min(self.ssthresh - self.cwnd);
            self.cwnd += grow / self.hystart.divisor();
            acked -= grow;
            self.clamp();
            if acked == 0 || self.cwnd >= self.max {
                return;
            }
        }
        match self.alg {
            Algorithm::Cubic => {
                self.cwnd = self.cubic.on_ack(self.cwnd, self.mss, acked, now, srtt);
            }
            _ => {
                // RFC 5681 section 3.1: about one SMSS per RTT, counted in octets.
                self.ca_acked += acked;
                while self.ca_acked >= self.cwnd {
                    self.ca_acked -= self.cwnd;
                    self.cwnd += self.mss;
                }
            }
        }
        self.clamp();
    }

    /// An RTT sample (RFC 6298's rules), for HyStart++ while in its slow start.
    pub fn on_rtt(&mut self, rtt: Duration) {
        if self.in_slow_start() {
            self.hystart.on_rtt(rtt);
        }
    }

    /// A round trip ended: the data sent when the last one ended is acknowledged. After
    /// HyStart++'s last round of Conservative Slow Start, congestion avoidance begins
    /// (RFC 9406 section 4.3: ssthresh = cwnd).
    pub fn on_round_end(&mut self) {
        if self.hystart.on_round_end() == hystart::RoundEnd::ToAvoidance && self.in_slow_start() {
            self.ssthresh = self.cwnd;
        }
    }

    /// Whether HyStart++ has ended slow start and runs its conservative growth.
    pub fn in_css(&self) -> bool {
        self.hystart.in_css()
    }

    /// Loss found by three duplicate ACKs (or an ECN echo, for all but DCTCP: RFC 3168
    /// section 6.1.2 treats it as a loss), once per window of data. `flight`: octets
    /// unacknowledged.
    pub fn on_congestion(&mut self, flight: usize, now: Duration) {
        if self.alg == Algorithm::None {
            return;
        }
        self.save_prior();
        self.hystart.stop();
        match self.alg {
            Algorithm::Cubic => {
                let (ssthresh, cwnd) = self.cubic.on_congestion(self.cwnd, flight, self.mss, now);
                self.ssthresh = ssthresh.max(self.two());
                self.cwnd = cwnd.max(self.two());
            }
            _ => {
                // RFC 5681 equation (4).
                self.ssthresh = (flight / 2).max(self.two());
                self.cwnd = self.ssthresh;
            }
        }
        self.ca_acked = 0;
        self.clamp();
    }

    /// The retransmission timer expired: RFC 5681 section 3.1 equation (4) for ssthresh
    /// (RFC 9438 section 4.8: CUBIC's own reduction), and the loss window, one segment.
    pub fn on_rto(&mut self, flight: usize, now: Duration) {
        if self.alg == Algorithm::None {
            return;
        }
        self.save_prior();
        self.hystart.stop();
        self.ssthresh = match self.alg {
            Algorithm::Cubic => self.cubic.on_congestion(self.cwnd, flight, self.mss, now).0,
            _ => flight / 2,
        }
        .max(self.two());
        self.cwnd = self.mss;
        self.ca_acked = 0;
    }

    /// An ACK that echoes congestion (ECE), once per window of data (the caller's limit):
    /// DCTCP cuts the window by alpha/2 (RFC 8257 section 3.3); the others react as to a
    /// loss (RFC 3168 section 6.1.2).
    pub fn on_ecn(&mut self, flight: usize, now: Duration) {
        match self.alg {
            Algorithm::None => {}
            Algorithm::Dctcp => {
                self.save_prior();
                self.cwnd = self.dctcp.reduce(self.cwnd).max(self.two());
                self.ssthresh = self.cwnd;
                self.clamp();
            }
            _ => self.on_congestion(flight, now),
        }
    }

    /// DCTCP's per-ACK accounting (RFC 8257 section 3.3 steps 3-9): `acked` octets, of which
    /// all or none carried ECE; `window_done` when this ACK ends the observation window.
    pub fn on_dctcp_ack(&mut self, acked: usize, ece: bool, window_done: bool) {
        if self.alg == Algorithm::Dctcp {
            self.dctcp.on_ack(acked, ece, window_done);
        }
    }

    /// Keeps the window from before the first reduction of an episode (until
    /// [`Window::commit`]).
    fn save_prior(&mut self) {
        if self.prior.is_some() {
            return;
        }
        self.prior = Some(Prior {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            cubic: self.cubic.clone(),
        });
    }

    /// The last reduction was spurious (DSACK, RFC 3708): the window before it comes back.
    /// Returns whether there was one to undo.
    pub fn undo(&mut self) -> bool {
        let Some(p) = self.prior.take() else {
            return false;
        };
        self.cwnd = self.cwnd.max(p.cwnd);
        self.ssthresh = p.ssthresh;
        self.cubic = p.cubic;
        self.clamp();
        true
    }

    /// Forgets what an undo would restore (the episode it belonged to is over).
    pub fn commit(&mut self) {
        self.prior = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;
    const MAX: usize = 1 << 30;
    const RTT: Duration = Duration::from_millis(10);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_initial_window_follows_rfc_6928() {
        // RFC 6928 section 2: min(10*MSS, max(2*MSS, 14600)).
        assert_eq!(initial_window(1460), 14600);
        assert_eq!(initial_window(1000), 10000);
        assert_eq!(initial_window(8960), 17920);
        assert_eq!(initial_window(536), 5360);
        let w = Window::new(Algorithm::NewReno, 1460, MAX);
        assert_eq!(w.cwnd(), 14600);
        assert_eq!(
            Window::new(Algorithm::Cubic, 1460, 4380).cwnd(),
            4380,
            "capped"
        );
    }

    #[test]
    fn none_is_the_fixed_bound_whatever_happens() {
        let mut w = Window::new(Algorithm::None, MSS, 256_000);
        w.on_congestion(100_000, ms(1));
        w.on_rto(100_000, ms(2));
        w.on_ecn(100_000, ms(3));
        w.on_ack(5000, ms(4), RTT);
        assert_eq!(w.cwnd(), 256_000);
    }

    #[test]
    fn slow_start_doubles_the_window_each_round_trip() {
        // RFC 5681 section 3.1: in slow start cwnd grows by what is acknowledged.
        let mut w = Window::new(Algorithm::NewReno, MSS, MAX);
        let mut t = ms(0);
        for round in 0..5 {
            let before = w.cwnd();
            assert_eq!(before, (10 * MSS) << round);
            // A round trip: the whole window acknowledged, a segment at a time.
            for _ in 0..before / MSS {
                w.on_ack(MSS, t, RTT);
            }
            t += RTT;
            assert_eq!(w.cwnd(), 2 * before);
        }
    }

    #[test]
    fn slow_start_stops_at_ssthresh_and_avoidance_adds_one_segment_per_window() {
        // RFC 5681 section 3.1: cwnd += SMSS*SMSS/cwnd per ACK, about one SMSS per RTT.
        let mut w = Window::new(Algorithm::NewReno, MSS, MAX);
        w.on_congestion(40 * MSS, ms(0));
        assert_eq!(w.cwnd(), 20 * MSS);
        assert_eq!(w.ssthresh(), 20 * MSS);
        assert!(!w.in_slow_start());
        for _ in 0..20 {
            w.on_ack(MSS, ms(1), RTT);
        }
        assert_eq!(
            w.cwnd(),
            21 * MSS,
            "one window acknowledged, one segment more"
        );
        for _ in 0..20 {
            w.on_ack(MSS, ms(2), RTT);
        }
        assert_eq!(w.cwnd(), 21 * MSS, "21 segments are one window now");
        w.on_ack(MSS, ms(3), RTT);
        assert_eq!(w.cwnd(), 22 * MSS);
    }

    #[test]
    fn three_duplicate_acks_halve_the_flight_and_never_below_two_segments() {
        // RFC 5681 section 3.2 step 2 and equation (4): ssthresh = max(FlightSize / 2, 2*SMSS).
        let mut w = Window::new(Algorithm::NewReno, MSS, MAX);
        w.on_congestion(30 * MSS, ms(0));
        assert_eq!((w.ssthresh(), w.cwnd()), (15 * MSS, 15 * MSS));
        w.on_congestion(3 * MSS, ms(1));
        assert_eq!((w.ssthresh(), w.cwnd()), (2 * MSS, 2 * MSS));
    }

    #[test]
    fn a_timeout_collapses_the_window_to_one_segment_and_slow_starts_again() {
        // RFC 5681 section 3.1: ssthresh per equation (4), cwnd = LW = 1 SMSS.
        let mut w = Window::new(Algorithm::NewReno, MSS, MAX);
        w.on_rto(64 * MSS, ms(0));
        assert_eq!(w.cwnd(), MSS);
        assert_eq!(w.ssthresh(), 32 * MSS);
        assert!(w.in_slow_start());
        w.on_ack(MSS, ms(1), RTT);
        assert_eq!(w.cwnd(), 2 * MSS);
    }

    #[test]
    fn an_undo_restores_the_window_before_a_spurious_reduction() {
        // RFC 3708 section 3 / RFC 9438 section 4.9: a reduction found spurious is undone.
        for alg in [Algorithm::NewReno, Algorithm::Cubic, Algorithm::Dctcp] {
            let mut w = Window::new(alg, MSS, MAX);
            for _ in 0..30 {
                w.on_ack(MSS, ms(1), RTT);
            }
            let (cwnd, ssthresh) = (w.cwnd(), w.ssthresh());
            w.on_rto(cwnd, ms(2));
            assert!(w.cwnd() < cwnd);
            assert!(w.undo(), "{alg:?}");
            assert_eq!((w.cwnd(), w.ssthresh()), (cwnd, ssthresh), "{alg:?}");
            assert!(!w.undo(), "only once");
            w.commit();
            w.on_congestion(cwnd, ms(3));
            w.commit();
            assert!(!w.undo(), "committed");
        }
    }

    #[test]
    fn cubic_leaves_its_first_slow_start_by_hystart_and_newreno_does_not() {
        // RFC 9406 section 4.3 (RFC 9438 section 4.10): a round whose minimum RTT is 4 ms
        // above the last one's ends slow start; CSS grows by a quarter of slow start for 5
        // rounds, then congestion avoidance with ssthresh = cwnd.
        let rounds = |alg| {
            let mut w = Window::new(alg, MSS, MAX);
            let mut t = ms(0);
            let mut sizes = Vec::new();
            for r in 0..8u64 {
                // The queue fills from the third round: 1 ms, 1 ms, then 10 ms.
                let rtt = if r < 2 { ms(1) } else { ms(10) };
                let n = w.cwnd() / MSS;
                for _ in 0..n {
                    w.on_rtt(rtt);
                    w.on_ack(MSS, t, rtt);
                }
                w.on_round_end();
                t += rtt;
                sizes.push((w.cwnd() / MSS, w.in_css(), w.in_slow_start()));
            }
            sizes
        };
        let cubic = rounds(Algorithm::Cubic);
        // Slow start doubles twice, then the round at 10 ms turns to CSS after 8 samples.
        assert_eq!(cubic[0], (20, false, true));
        assert_eq!(cubic[1], (40, false, true));
        assert!(cubic[2].1 && cubic[2].0 < 80, "{:?}", cubic[2]);
        // CSS: +25 % a round.
        let growth = cubic[3].0 as f64 / cubic[2].0 as f64;
        assert!((growth - 1.25).abs() < 0.03, "{cubic:?}");
        assert!(cubic[5].1, "{cubic:?}");
        assert!(
            !cubic[6].1 && !cubic[6].2,
            "avoidance after 5 rounds: {cubic:?}"
        );
        let newreno = rounds(Algorithm::NewReno);
        assert_eq!(newreno[4], (320, false, true), "plain slow start");
    }

    #[test]
    fn the_window_stays_within_the_nodes_bound() {
        let mut w = Window::new(Algorithm::Cubic, MSS, 50 * MSS);
        for i in 0..10_000 {
            w.on_ack(MSS, ms(i), RTT);
        }
        assert_eq!(w.cwnd(), 50 * MSS);
    }

    #[test]
    fn ecn_echo_is_a_loss_for_newreno_and_cubic() {
        // RFC 3168 section 6.1.2: the same reduction as for a dropped packet.
        let mut w = Window::new(Algorithm::NewReno, MSS, MAX);
        w.on_ecn(20 * MSS, ms(0));
        assert_eq!(w.cwnd(), 10 * MSS);
        let mut c = Window::new(Algorithm::Cubic, MSS, MAX);
        c.on_ecn(10 * MSS, ms(0));
        assert_eq!(c.cwnd(), 7 * MSS, "beta_cubic = 0.7");
    }
}
