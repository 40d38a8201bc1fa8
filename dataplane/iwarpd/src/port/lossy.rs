//! Drops received frames at a fixed rate, deterministically (a seeded xorshift), to test
//! loss recovery where no netem is available.

use super::Port;
use std::io;

pub struct LossyPort<P: Port> {
    inner: P,
    /// Drop one frame in `one_in`.
    one_in: u64,
    state: u64,
    /// A burst instead: the frames received after this many are dropped, `burst` of them.
    burst_after: Option<u64>,
    burst: u64,
    seen: u64,
    pub dropped: u64,
}

impl<P: Port> LossyPort<P> {
    pub fn new(inner: P, one_in: u64, seed: u64) -> LossyPort<P> {
        LossyPort {
            inner,
            one_in: one_in.max(1),
            state: seed | 1,
            burst_after: None,
            burst: 0,
            seen: 0,
            dropped: 0,
        }
    }

    /// Drops `count` consecutive received frames after the first `after`, and no others.
    pub fn burst(inner: P, after: u64, count: u64) -> LossyPort<P> {
        LossyPort {
            burst_after: Some(after),
            burst: count,
            ..LossyPort::new(inner, 1, 1)
        }
    }
}

impl<P: Port> Port for LossyPort<P> {
    forward_to_inner!();
    type Frame = P::Frame;

    fn rx_burst<F: FnMut(P::Frame)>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        let (state, one_in, dropped) = (&mut self.state, self.one_in, &mut self.dropped);
        if let Some(after) = self.burst_after {
            let (seen, burst) = (&mut self.seen, self.burst);
            return self.inner.rx_burst(max, |frame| {
                *seen += 1;
                if *seen > after && *seen <= after + burst {
                    *dropped += 1;
                } else {
                    f(frame)
                }
            });
        }
        self.inner.rx_burst(max, |frame| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            if *state % one_in == 0 {
                *dropped += 1;
            } else {
                f(frame)
            }
        })
    }
    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        self.inner.tx(frame)
    }
    fn dropped(&self) -> u64 {
        self.dropped + self.inner.dropped()
    }
}
