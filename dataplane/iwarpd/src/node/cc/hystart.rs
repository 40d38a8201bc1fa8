//! HyStart++ (RFC 9406), the slow start CUBIC may use (RFC 9438 section 4.10) and Linux's
//! CUBIC does: the first slow start ends when the round trip's minimum RTT has grown by a
//! threshold (a queue is filling), then five rounds of Conservative Slow Start (a quarter
//! of slow start's growth) before congestion avoidance. Plain slow start overshoots the
//! queue by up to its whole window, and two flows that start together leave it at
//! whatever windows the losses happen to hit, which CUBIC then takes many seconds to even.
//! Rounds and RTT samples are the caller's (`sender.rs`); the window's growth is
//! [`super::Window`]'s.

use std::time::Duration;

/// RFC 9406 section 4.3's constants.
pub const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
pub const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
pub const MIN_RTT_DIVISOR: u32 = 8;
pub const N_RTT_SAMPLE: u32 = 8;
pub const CSS_GROWTH_DIVISOR: usize = 4;
pub const CSS_ROUNDS: u32 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    SlowStart,
    /// Conservative Slow Start: the rounds completed in it, and the minimum RTT of the
    /// round that ended slow start.
    Css {
        rounds: u32,
        baseline: Duration,
    },
    /// Congestion avoidance reached, or a loss came first: standard slow start from now on
    /// (RFC 9406 section 4.3: HyStart++ only in the initial slow start).
    Done,
}

/// What a round's end means for the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundEnd {
    Nothing,
    /// CSS_ROUNDS rounds of CSS done: ssthresh = cwnd, congestion avoidance.
    ToAvoidance,
}

#[derive(Debug, Clone)]
pub struct HyStart {
    phase: Phase,
    last_round_min: Option<Duration>,
    round_min: Option<Duration>,
    samples: u32,
}

impl Default for HyStart {
    fn default() -> HyStart {
        HyStart {
            phase: Phase::SlowStart,
            last_round_min: None,
            round_min: None,
            samples: 0,
        }
    }
}

impl HyStart {
    /// The same, off: standard slow start throughout.
    pub fn off() -> HyStart {
        HyStart {
            phase: Phase::Done,
            ..HyStart::default()
        }
    }

    /// What slow start's growth is divided by now: 1, or CSS_GROWTH_DIVISOR in CSS.
    pub fn divisor(&self) -> usize {
        match self.phase {
            Phase::Css { .. } => CSS_GROWTH_DIVISOR,
            _ => 1,
        }
    }

    pub fn in_css(&self) -> bool {
        matches!(self.phase, Phase::Css { .. })
    }

    /// Whether it still watches the RTT.
    pub fn active(&self) -> bool {
        self.phase != Phase::Done
    }

    /// A loss, an ECN echo or a timeout: congestion avoidance takes over, for good.
    pub fn stop(&mut self) {
        self.phase = Phase::Done;
    }

    /// An RTT sample in slow start or CSS (RFC 9406 section 4.3).
    pub fn on_rtt(&mut self, rtt: Duration) {
        if self.phase == Phase::Done {
            return;
        }
        self.round_min = Some(self.round_min.map_or(rtt, |m| m.min(rtt)));
        self.samples += 1;
        if self.phase != Phase::SlowStart || self.samples < N_RTT_SAMPLE {
            return;
        }
        let (Some(cur), Some(last)) = (self.round_min, self.last_round_min) else {
            return;
        };
        let thresh = (last / MIN_RTT_DIVISOR).clamp(MIN_RTT_THRESH, MAX_RTT_THRESH);
        if cur >= last + thresh {
            self.phase = Phase::Css {
                rounds: 0,
                baseline: cur,
            };
        }
    }

    /// A round ended (the ACK of the data sent when it began arrived) and the next begins.
    pub fn on_round_end(&mut self) -> RoundEnd {
        let mut out = RoundEnd::Nothing;
        if let Phase::Css { rounds, baseline } = self.phase {
            if self.samples >= N_RTT_SAMPLE && self.round_min.is_some_and(|m| m < baseline) {
                // The RTT came back down: the exit was spurious (jitter); slow start again.
                self.phase = Phase::SlowStart;
            } else if rounds + 1 >= CSS_ROUNDS {
                self.phase = Phase::Done;
                out = RoundEnd::ToAvoidance;
            } else {
                self.phase = Phase::Css {
                    rounds: rounds + 1,
                    baseline,
                };
            }
        }
        self.last_round_min = self.round_min;
        self.round_min = None;
        self.samples = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A round of `n` samples of `rtt`.
    fn round(h: &mut HyStart, n: u32, rtt: Duration) -> RoundEnd {
        for _ in 0..n {
            h.on_rtt(rtt);
        }
        h.on_round_end()
    }

    #[test]
    fn a_minimum_rtt_grown_by_the_threshold_ends_slow_start_then_five_css_rounds() {
        // RFC 9406 section 4.3: RttThresh = max(4 ms, min(lastRoundMinRTT / 8, 16 ms)).
        let mut h = HyStart::default();
        round(&mut h, 10, ms(1));
        round(&mut h, 10, ms(4));
        assert_eq!(h.divisor(), 1, "3 ms more: below the 4 ms floor");
        for _ in 0..7 {
            h.on_rtt(ms(8));
        }
        assert!(!h.in_css(), "fewer than N_RTT_SAMPLE samples");
        h.on_rtt(ms(8));
        assert!(h.in_css(), "4 ms above the last round's minimum");
        assert_eq!(h.divisor(), CSS_GROWTH_DIVISOR);
        let mut ends = Vec::new();
        for _ in 0..CSS_ROUNDS {
            ends.push(round(&mut h, 10, ms(9)));
        }
        assert_eq!(ends.last(), Some(&RoundEnd::ToAvoidance));
        assert!(ends[..4].iter().all(|e| *e == RoundEnd::Nothing));
        assert!(!h.active());
    }

    #[test]
    fn the_threshold_is_an_eighth_of_the_last_minimum_within_4_and_16_ms() {
        // RFC 9406 section 4.3: RttThresh = max(4 ms, min(lastRoundMinRTT / 8, 16 ms)).
        for (last, cur, exits) in [
            (80, 89, false),
            (80, 90, true),
            (200, 215, false),
            (200, 216, true),
            (10, 13, false),
            (10, 14, true),
        ] {
            let mut h = HyStart::default();
            round(&mut h, 8, ms(last));
            round(&mut h, 8, ms(cur));
            assert_eq!(h.in_css(), exits, "{last} ms, then {cur} ms");
        }
    }

    #[test]
    fn a_css_round_whose_rtt_falls_below_the_baseline_resumes_slow_start() {
        // RFC 9406 section 4.3: the exit was spurious.
        let mut h = HyStart::default();
        round(&mut h, 8, ms(1));
        round(&mut h, 8, ms(6));
        assert!(h.in_css());
        round(&mut h, 8, ms(2));
        assert!(!h.in_css() && h.active(), "back in slow start");
    }

    #[test]
    fn once_stopped_it_stays_off() {
        let mut h = HyStart::default();
        h.stop();
        round(&mut h, 8, ms(1));
        round(&mut h, 8, ms(30));
        assert!(!h.active() && !h.in_css());
        assert!(!HyStart::off().active());
    }
}
