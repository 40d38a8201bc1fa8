//! CUBIC (RFC 9438): the window as a cubic function of the time since the last reduction,
//! with a Reno-friendly floor. Windows here are in segments (f64), as the RFC writes them;
//! [`super::Window`] keeps octets.

use std::time::Duration;

/// RFC 9438 section 5.1: C = 0.4.
pub const C: f64 = 0.4;
/// RFC 9438 section 5.1: beta_cubic = 0.7.
pub const BETA: f64 = 0.7;
/// RFC 9438 section 4.3: alpha_cubic = 3 * (1 - beta) / (1 + beta).
pub const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

/// CUBIC's state between reductions.
#[derive(Debug, Clone, Default)]
pub struct Cubic {
    /// W_max: the window (segments) before the last reduction, after fast convergence.
    w_max: f64,
    /// cwnd_prior: the window just before the last reduction.
    cwnd_prior: f64,
    /// The current congestion avoidance stage: its start, K and W_est.
    epoch: Option<Epoch>,
}

#[derive(Debug, Clone)]
struct Epoch {
    start: Duration,
    k: f64,
    w_est: f64,
}

/// RFC 9438 equation (2): K = cubic_root((W_max - cwnd_epoch) / C), in seconds.
pub fn k(w_max: f64, cwnd_epoch: f64) -> f64 {
    ((w_max - cwnd_epoch).max(0.0) / C).cbrt()
}

/// RFC 9438 equation (1): W_cubic(t) = C * (t - K)^3 + W_max, t in seconds.
pub fn w_cubic(t: f64, k: f64, w_max: f64) -> f64 {
    C * (t - k).powi(3) + w_max
}

impl Cubic {
    /// A congestion event (RFC 9438 sections 4.6 and 4.7) with the window at `cwnd` octets
    /// and `flight` octets unacknowledged: returns the new (ssthresh, cwnd) in octets.
    pub fn on_congestion(
        &mut self,
        cwnd: usize,
        flight: usize,
        mss: usize,
        _now: Duration,
    ) -> (usize, usize) {
        let segs = cwnd as f64 / mss as f64;
        // Section 4.7, fast convergence: a flow whose window peaked lower than last time
        // releases bandwidth for a newcomer.
        self.w_max = if segs < self.w_max {
            segs * (1.0 + BETA) / 2.0
        } else {
            segs
        };
        self.cwnd_prior = segs;
        self.epoch = None;
        // Section 4.6: ssthresh = flight_size * beta_cubic; cwnd = ssthresh.
        let ssthresh = (flight as f64 * BETA).round() as usize;
        (ssthresh, ssthresh)
    }

    /// Congestion avoidance: `acked` octets acknowledged at `now` with the window at `cwnd`
    /// octets; returns the new window (RFC 9438 sections 4.2 to 4.5).
    pub fn on_ack(
        &mut self,
        cwnd: usize,
        mss: usize,
        acked: usize,
        now: Duration,
        srtt: Duration,
    ) -> usize {
        let mssf = mss as f64;
        let w = cwnd as f64 / mssf;
        let epoch = self.epoch.get_or_insert_with(|| {
            // Section 4.2: a new stage starts with cwnd_epoch = cwnd; W_est starts there
            // too (section 4.3). A window already above W_max (slow start went past it, or
            // none yet) makes it the plateau: K = 0.
            if w > self.w_max {
                self.w_max = w;
            }
            Epoch {
                start: now,
                k: k(self.w_max, w),
                w_est: w,
            }
        });
        let t = now.saturating_sub(epoch.start).as_secs_f64();
        let acked_segs = acked as f64 / mssf;
        // Section 4.3: W_est grows by alpha_cubic segments per window acknowledged, and by
        // one (Reno's rate) once it has reached the window before the last reduction.
        let alpha = if epoch.w_est >= self.cwnd_prior {
            1.0
        } else {
            ALPHA
        };
        epoch.w_est += alpha * acked_segs / w;
        let next = if w_cubic(t, epoch.k, self.w_max) < epoch.w_est {
            // Section 4.3: the Reno-friendly region.
            epoch.w_est
        } else {
            // Sections 4.4 and 4.5: toward W_cubic one RTT ahead, at most 1.5 times the
            // window, by (target - cwnd) / cwnd per segment acknowledged.
            let target = w_cubic(t + srtt.as_secs_f64(), epoch.k, self.w_max).clamp(w, 1.5 * w);
            w + (target - w) / w * acked_segs
        };
        (next.max(w) * mssf) as usize
    }

    pub fn w_max(&self) -> f64 {
        self.w_max
    }

    /// K of the current stage, once it started.
    pub fn current_k(&self) -> Option<f64> {
        self.epoch.as_ref().map(|e| e.k)
    }

    /// W_est of the current stage, once it started.
    pub fn w_est(&self) -> Option<f64> {
        self.epoch.as_ref().map(|e| e.w_est)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, Window};
    use super::*;

    const MSS: usize = 1000;

    #[test]
    fn the_constants_are_the_rfcs() {
        // RFC 9438 section 4.3: alpha_cubic = 3 * (1 - 0.7) / (1 + 0.7).
        assert!((ALPHA - 0.529_411_764_7).abs() < 1e-9);
    }

    #[test]
    fn k_is_the_time_w_cubic_takes_back_to_w_max() {
        // RFC 9438 equations (1) and (2): W_cubic(0) = cwnd_epoch, W_cubic(K) = W_max.
        let (w_max, epoch) = (100.0, 70.0);
        let kk = k(w_max, epoch);
        assert!((kk - 75f64.cbrt()).abs() < 1e-12);
        assert!((kk - 4.217_163).abs() < 1e-6);
        assert!((w_cubic(0.0, kk, w_max) - epoch).abs() < 1e-9);
        assert!((w_cubic(kk, kk, w_max) - w_max).abs() < 1e-12);
        // Concave before K, convex after, symmetric about W_max.
        assert!((w_cubic(kk + 1.0, kk, w_max) - 100.4).abs() < 1e-9);
        assert!((w_cubic(kk - 1.0, kk, w_max) - 99.6).abs() < 1e-9);
        assert_eq!(k(50.0, 60.0), 0.0, "a window above W_max plateaus at once");
    }

    /// One RTT of ACKs from `t`, one per segment, spread evenly across it.
    fn round(w: &mut Window, t: Duration, rtt: Duration) {
        let n = w.cwnd() / MSS;
        for i in 0..n {
            w.on_ack(MSS, t + rtt * i as u32 / n as u32, rtt);
        }
    }

    fn after_loss_at_100_segments(rtt: Duration) -> Window {
        let mut w = Window::new(Algorithm::Cubic, MSS, 1 << 30);
        while w.cwnd() < 100 * MSS {
            w.on_ack(MSS, Duration::ZERO, rtt);
        }
        assert_eq!(w.cwnd(), 100 * MSS);
        w.on_congestion(100 * MSS, Duration::ZERO);
        w
    }

    #[test]
    fn a_loss_multiplies_the_window_by_beta_and_remembers_w_max() {
        // RFC 9438 section 4.6: ssthresh = flight_size * 0.7, cwnd = ssthresh.
        let w = after_loss_at_100_segments(Duration::from_millis(100));
        assert_eq!(w.cwnd(), 70 * MSS);
        assert_eq!(w.ssthresh(), 70 * MSS);
        assert_eq!(w.cubic.w_max(), 100.0);
    }

    #[test]
    fn fast_convergence_lowers_w_max_when_the_window_peaked_lower() {
        // RFC 9438 section 4.7: W_max = cwnd * (1 + beta) / 2 when cwnd < W_max.
        let mut c = Cubic::default();
        let t = Duration::ZERO;
        assert_eq!(
            c.on_congestion(100 * MSS, 100 * MSS, MSS, t),
            (70 * MSS, 70 * MSS)
        );
        assert_eq!(c.w_max(), 100.0);
        assert_eq!(
            c.on_congestion(90 * MSS, 90 * MSS, MSS, t),
            (63 * MSS, 63 * MSS)
        );
        assert!((c.w_max() - 90.0 * 1.7 / 2.0).abs() < 1e-9);
        c.on_congestion(120 * MSS, 120 * MSS, MSS, t);
        assert_eq!(c.w_max(), 120.0, "a higher peak is W_max itself");
    }

    #[test]
    fn the_window_follows_w_cubic_back_to_w_max_at_k() {
        // RFC 9438 sections 4.4 and 4.5, on a 200 ms RTT (Reno-friendly growth stays
        // below W_cubic): the window reaches W_max about K = 4.2 s after the loss, crosses
        // it, and grows convex beyond.
        let rtt = Duration::from_millis(200);
        let mut w = after_loss_at_100_segments(rtt);
        let kk = k(100.0, 70.0);
        let mut t = Duration::ZERO;
        let mut at_k = None;
        while t < Duration::from_millis(6500) {
            round(&mut w, t, rtt);
            t += rtt;
            let segs = w.cwnd() as f64 / MSS as f64;
            // The window is W_cubic one RTT ahead of the acknowledgements that grew it.
            let expect = w_cubic(t.as_secs_f64(), kk, 100.0).max(70.0);
            assert!(
                (segs - expect).abs() <= 2.5,
                "at {t:?}: cwnd {segs:.1} segments, W_cubic {expect:.1}"
            );
            if at_k.is_none() && t.as_secs_f64() >= kk {
                at_k = Some(segs);
            }
        }
        let at_k = at_k.expect("K passed");
        assert!(
            (at_k - 100.0).abs() < 1.5,
            "{at_k} segments at K, W_max 100"
        );
        assert!(w.cwnd() > 103 * MSS, "convex growth past W_max");
        assert!(w.cubic.w_est().unwrap() < 100.0, "not Reno-friendly here");
    }

    #[test]
    fn on_a_short_rtt_the_window_grows_as_w_est() {
        // RFC 9438 section 4.3: W_est grows by alpha_cubic segments per RTT; while it is
        // above W_cubic, cwnd = W_est. With a 1 ms RTT, 20 RTTs are far from K.
        let rtt = Duration::from_millis(1);
        let mut w = after_loss_at_100_segments(rtt);
        let mut t = Duration::ZERO;
        for _ in 0..20 {
            round(&mut w, t, rtt);
            t += rtt;
        }
        let est = 70.0 + 20.0 * ALPHA;
        let segs = w.cwnd() as f64 / MSS as f64;
        assert!((segs - est).abs() < 1.5, "cwnd {segs}, W_est about {est}");
        assert!(w_cubic(t.as_secs_f64(), k(100.0, 70.0), 100.0) < segs);
    }

    #[test]
    fn growth_per_ack_is_at_most_half_a_window_per_rtt() {
        // RFC 9438 section 4.5: the target is at most 1.5 * cwnd.
        let rtt = Duration::from_millis(100);
        let mut w = after_loss_at_100_segments(rtt);
        round(&mut w, Duration::ZERO, rtt);
        // Far past K: W_cubic is huge.
        let t = Duration::from_secs(60);
        let before = w.cwnd();
        round(&mut w, t, rtt);
        assert!(w.cwnd() as f64 <= 1.5 * before as f64 + MSS as f64);
        assert!(w.cwnd() as f64 >= 1.4 * before as f64);
    }

    #[test]
    fn a_timeout_reduces_by_beta_and_restarts_from_one_segment() {
        // RFC 9438 section 4.8: ssthresh as for a loss, cwnd = 1 segment, slow start.
        let mut w = after_loss_at_100_segments(Duration::from_millis(10));
        w.on_rto(70 * MSS, Duration::from_secs(1));
        assert_eq!(w.cwnd(), MSS);
        assert_eq!(w.ssthresh(), 49 * MSS);
    }
}
