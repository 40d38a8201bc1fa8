//! DCTCP (RFC 8257): the sender estimates the fraction of its octets that met congestion
//! (marked CE, echoed as ECE) over each window of data, and cuts its window in proportion
//! instead of by half. Growth and the reaction to loss are NewReno's ([`super::Window`]).

/// RFC 8257 section 4.2: the estimation gain g = 1/16.
pub const G: f64 = 1.0 / 16.0;

/// DCTCP's congestion estimate.
#[derive(Debug, Clone)]
pub struct Dctcp {
    /// DCTCP.Alpha: the estimated fraction of octets marked.
    pub alpha: f64,
    /// DCTCP.BytesAcked and DCTCP.BytesMarked of the current observation window.
    acked: usize,
    marked: usize,
}

impl Default for Dctcp {
    fn default() -> Dctcp {
        // RFC 8257 section 3.3: alpha starts at 1, the conservative choice.
        Dctcp {
            alpha: 1.0,
            acked: 0,
            marked: 0,
        }
    }
}

impl Dctcp {
    /// RFC 8257 section 3.3 steps 3 to 9: count the octets an ACK acknowledges (and, if it
    /// carries ECE, as marked); at the end of the observation window fold their ratio M into
    /// alpha = (1 - g) * alpha + g * M and start a new window.
    pub fn on_ack(&mut self, acked: usize, ece: bool, window_done: bool) {
        self.acked += acked;
        if ece {
            self.marked += acked;
        }
        if window_done {
            let m = if self.acked == 0 {
                0.0
            } else {
                self.marked as f64 / self.acked as f64
            };
            self.alpha = (1.0 - G) * self.alpha + G * m;
            self.acked = 0;
            self.marked = 0;
        }
    }

    /// RFC 8257 section 3.3 step 10: cwnd = cwnd * (1 - alpha / 2).
    pub fn reduce(&self, cwnd: usize) -> usize {
        (cwnd as f64 * (1.0 - self.alpha / 2.0)) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, Window};
    use super::*;
    use std::time::Duration;

    #[test]
    fn alpha_is_an_ewma_of_the_marked_fraction_per_window() {
        // RFC 8257 section 3.3: alpha = (1 - g) * alpha + g * M, g = 1/16, alpha0 = 1.
        let mut d = Dctcp::default();
        d.on_ack(1000, false, false);
        d.on_ack(1000, false, true);
        assert!((d.alpha - 15.0 / 16.0).abs() < 1e-12, "M = 0");
        d.on_ack(3000, true, false);
        d.on_ack(1000, false, true);
        let expect = 15.0 / 16.0 * 15.0 / 16.0 + 0.75 / 16.0;
        assert!((d.alpha - expect).abs() < 1e-12, "M = 3/4");
        // Unmarked windows make alpha decay geometrically toward 0.
        let mut a = d.alpha;
        for _ in 0..100 {
            d.on_ack(1000, false, true);
            a *= 15.0 / 16.0;
        }
        assert!((d.alpha - a).abs() < 1e-12);
        // Every octet marked, window after window: alpha tends to 1.
        for _ in 0..400 {
            d.on_ack(1000, true, true);
        }
        assert!((d.alpha - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_cut_is_proportional_to_alpha() {
        // RFC 8257 section 3.3: cwnd * (1 - alpha / 2): alpha = 1 halves, alpha = 0.1
        // takes 5 %.
        let mut d = Dctcp::default();
        assert_eq!(d.reduce(100_000), 50_000);
        d.alpha = 0.1;
        assert_eq!(d.reduce(100_000), 95_000);
    }

    #[test]
    fn the_window_cuts_by_alpha_on_ecn_and_halves_on_loss() {
        let mss = 1000;
        let mut w = Window::new(Algorithm::Dctcp, mss, 1 << 30);
        let t = Duration::ZERO;
        let rtt = Duration::from_millis(1);
        for _ in 0..90 {
            w.on_ack(mss, t, rtt);
        }
        assert_eq!(w.cwnd(), 100 * mss);
        // Thirty windows with no mark: alpha = (15/16)^30, about 0.144.
        for _ in 0..30 {
            w.on_dctcp_ack(mss, false, true);
        }
        let alpha = w.dctcp_alpha().unwrap();
        assert!((alpha - (15.0f64 / 16.0).powi(30)).abs() < 1e-12);
        w.on_ecn(100 * mss, t);
        assert_eq!(
            w.cwnd(),
            (100.0 * mss as f64 * (1.0 - alpha / 2.0)) as usize
        );
        assert_eq!(w.ssthresh(), w.cwnd());
        // RFC 8257 section 3.4: a loss is answered as standard TCP does.
        w.on_congestion(80 * mss, t);
        assert_eq!(w.cwnd(), 40 * mss);
    }
}
