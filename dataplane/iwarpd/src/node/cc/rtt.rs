//! The retransmission timeout of RFC 6298, from RTT samples the caller takes (Karn's rule:
//! none from a retransmitted segment, RFC 6298 section 3), in real time at microsecond
//! resolution, with a floor of the caller's.

use std::time::Duration;

/// RFC 6298 section 2: alpha = 1/8, beta = 1/4, K = 4.
const K: u32 = 4;
/// G, the clock granularity: what one poll turn's clock reading resolves.
const G: Duration = Duration::from_micros(10);
/// RFC 6298 section 2.5: a maximum of at least 60 s.
const MAX_RTO: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// RTO before any sample (RFC 6298 section 2.1 says 1 s; see the caller's choice).
    initial: Duration,
    /// RFC 6298 section 2.4's floor (1 s there; the operator's `tcp.min_rto_us` here).
    min: Duration,
    /// Doublings since the last sample (RFC 6298 section 5.5).
    backoff: u32,
    /// The ceiling of the backed-off timeout.
    max: Duration,
}

impl RttEstimator {
    pub fn new(initial: Duration, min: Duration) -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            initial,
            min,
            backoff: 0,
            max: MAX_RTO,
        }
    }

    /// The backed-off timeout stops growing at `max` (at least the floor): a connection
    /// given up after a user timeout gets several resends within it.
    pub fn with_max(mut self, max: Duration) -> RttEstimator {
        self.max = max.max(self.min);
        self
    }

    /// A measurement `r` of a segment sent once (RFC 6298 sections 2.2 and 2.3).
    pub fn sample(&mut self, r: Duration) {
        self.sample_of(r, 1);
    }

    /// A measurement `r`, one of about `per_window` taken in one round trip. RFC 6298's
    /// gains assume one sample per round trip; a sample on every ACK would shrink RTTVAR
    /// within one window to the spread of back-to-back ACKs, and the timer would fire at
    /// the first queueing delay. RFC 7323 appendix G divides alpha and beta by the
    /// samples expected per window, so the estimator moves at its designed pace.
    pub fn sample_of(&mut self, r: Duration, per_window: u32) {
        let n = per_window.max(1);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                // RTTVAR <- (1 - beta') RTTVAR + beta' |SRTT - R'|, beta' = 1/(4n);
                // SRTT <- (1 - alpha') SRTT + alpha' R', alpha' = 1/(8n).
                let diff = srtt.abs_diff(r);
                self.rttvar = (self.rttvar * (4 * n - 1) + diff) / (4 * n);
                self.srtt = Some((srtt * (8 * n - 1) + r) / (8 * n));
            }
        }
        // A new sample ends the back-off: the RTO is computed afresh (section 5.7 keeps the
        // backed-off value only until then).
        self.backoff = 0;
    }

    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// RTO = SRTT + max(G, K * RTTVAR), at least the floor, doubled per back-off, at most
    /// 60 s (RFC 6298 sections 2.2 to 2.5 and 5.5).
    pub fn rto(&self) -> Duration {
        let base = match self.srtt {
            None => self.initial,
            Some(srtt) => srtt + G.max(self.rttvar * K),
        }
        .max(self.min);
        base.saturating_mul(1 << self.backoff.min(20)).min(self.max)
    }

    /// The timer expired: back off (RFC 6298 section 5.5).
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn before_any_sample_the_initial_rto_holds() {
        // RFC 6298 section 2.1.
        let r = RttEstimator::new(Duration::from_secs(1), us(1000));
        assert_eq!(r.rto(), Duration::from_secs(1));
        assert_eq!(r.srtt(), None);
    }

    #[test]
    fn the_first_sample_sets_srtt_and_half_of_it_as_rttvar() {
        // RFC 6298 section 2.2: SRTT = R, RTTVAR = R/2, RTO = SRTT + max(G, 4*RTTVAR).
        let mut r = RttEstimator::new(Duration::from_secs(1), us(100));
        r.sample(us(1000));
        assert_eq!(r.srtt(), Some(us(1000)));
        assert_eq!(r.rttvar(), us(500));
        assert_eq!(r.rto(), us(3000));
    }

    #[test]
    fn later_samples_are_smoothed_with_one_eighth_and_one_quarter() {
        // RFC 6298 section 2.3.
        let mut r = RttEstimator::new(Duration::from_secs(1), us(100));
        r.sample(us(1000));
        r.sample(us(2000));
        // RTTVAR = 3/4 * 500 + 1/4 * |1000 - 2000| = 625; SRTT = 7/8 * 1000 + 1/8 * 2000.
        assert_eq!(r.rttvar(), us(625));
        assert_eq!(r.srtt(), Some(us(1125)));
        assert_eq!(r.rto(), us(1125 + 2500));
    }

    #[test]
    fn samples_of_one_window_move_the_estimate_as_one_sample_would() {
        // RFC 7323 appendix G: with n samples per window, alpha/n and beta/n. Sixteen ACKs
        // of one window that each see the RTT jump leave RTTVAR about where one sample of
        // RFC 6298's gains would, not decayed to the spread between the ACKs.
        let mut per_ack = RttEstimator::new(Duration::from_secs(1), us(1));
        let mut per_window = per_ack.clone();
        per_ack.sample(us(1000));
        per_window.sample(us(1000));
        for _ in 0..16 {
            per_ack.sample(us(1000));
            per_window.sample_of(us(1000), 16);
        }
        // One window of steady samples: RTTVAR 500 decays by (15/16)^16 with the scaled
        // gains (about 178), by (3/4)^16 without (about 5).
        assert!(per_window.rttvar() > us(150), "{:?}", per_window.rttvar());
        assert!(per_ack.rttvar() < us(10), "{:?}", per_ack.rttvar());
    }

    #[test]
    fn a_steady_rtt_converges_and_g_bounds_the_margin() {
        let mut r = RttEstimator::new(Duration::from_secs(1), us(1));
        for _ in 0..200 {
            r.sample(us(50));
        }
        assert_eq!(r.srtt(), Some(us(50)));
        assert_eq!(r.rto(), us(50) + G, "RTTVAR decayed to 0: the margin is G");
    }

    #[test]
    fn the_floor_holds_and_a_timeout_doubles_up_to_60_s() {
        // RFC 6298 sections 2.4, 2.5 and 5.5.
        let mut r = RttEstimator::new(Duration::from_secs(1), us(1000));
        r.sample(us(10));
        assert_eq!(r.rto(), us(1000));
        r.back_off();
        assert_eq!(r.rto(), us(2000));
        r.back_off();
        assert_eq!(r.rto(), us(4000));
        for _ in 0..40 {
            r.back_off();
        }
        assert_eq!(r.rto(), MAX_RTO);
        r.sample(us(10));
        assert_eq!(r.rto(), us(1000), "a new sample ends the back-off");
        let mut r = RttEstimator::new(Duration::from_secs(1), us(1000)).with_max(us(5000));
        r.sample(us(10));
        for _ in 0..10 {
            r.back_off();
        }
        assert_eq!(r.rto(), us(5000), "a lower ceiling of our own");
    }
}
