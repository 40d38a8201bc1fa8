//! The dilated clock smoltcp runs on.
//!
//! smoltcp 0.14 fixes its minimum retransmission timeout at 1000 ms and measures RTT in
//! milliseconds. It has no clock of its own: every poll takes the time from its caller. So
//! we hand it a clock that runs D times faster than real time, D = 1 s / the configured
//! minimum RTO. With min_rto_us = 1000, D = 1000: smoltcp's 1000 ms floor is 1 ms of real
//! time, its 1 ms RTT resolution is 1 µs, its 60 s RTO ceiling is 60 ms. No smoltcp code is
//! copied or patched. Side effects, all scaled by the same D: ARP cache entries would expire
//! after 60 ms of real time (`neighbours.rs` renews them for their real minute), and any
//! timeout or keep-alive we set is given in dilated units (see `real_to_virtual`).

use smoltcp::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct DilatedClock {
    start: std::time::Instant,
    factor: u64,
}

impl DilatedClock {
    /// A clock whose smoltcp-visible 1000 ms minimum RTO lasts `min_rto_us` real microseconds.
    pub fn new(min_rto_us: u64) -> DilatedClock {
        DilatedClock {
            start: std::time::Instant::now(),
            factor: (1_000_000 / min_rto_us.max(1)).max(1),
        }
    }

    pub fn factor(&self) -> u64 {
        self.factor
    }

    /// Now, in smoltcp's (dilated) time.
    pub fn now(&self) -> Instant {
        self.now_and_real().0
    }

    /// Now in smoltcp's time, and the real microseconds since the clock started that it was
    /// made from (for a caller that needs both, without dividing the dilation back out).
    pub fn now_and_real(&self) -> (Instant, u64) {
        let real_us = self.start.elapsed().as_micros() as u64;
        (
            Instant::from_micros(real_us.saturating_mul(self.factor) as i64),
            real_us,
        )
    }

    /// A real duration expressed in dilated time (for smoltcp timeouts we set).
    pub fn real_to_virtual(&self, d: std::time::Duration) -> Duration {
        Duration::from_micros((d.as_micros() as u64).saturating_mul(self.factor))
    }

    /// A dilated duration (e.g. smoltcp's poll delay) in real time.
    pub fn virtual_to_real(&self, d: Duration) -> std::time::Duration {
        std::time::Duration::from_micros(d.total_micros() / self.factor)
    }
}
