//! Copies of a connection's data segments in flight, as smoltcp sent them, so that the
//! holes the peer's SACK blocks show can all be resent at once from below smoltcp: its fast
//! retransmit resends only the first unacknowledged segment, and its go-back-N resend waits
//! for its own timer. The copies cost one copy of each data segment sent and, at most, the
//! connection's in-flight bound in memory, plus what the peer's SACK blocks show it holds
//! in recovery (see `Sender::send_window`); buffers are reused, so nothing is allocated
//! once the window is warm.

use iwarp_engine::fifo::TakeFront;
use std::collections::VecDeque;

/// A copy of one segment: its sequence range and the whole frame.
#[derive(Debug, Clone)]
struct Copy {
    start: u32,
    end: u32,
    frame: Vec<u8>,
}

#[derive(Debug, Clone, Default)]
pub struct ResendCopies {
    /// In sequence order, oldest first.
    copies: VecDeque<Copy>,
    /// Buffers of acknowledged copies, for the next ones.
    spare: Vec<Vec<u8>>,
}

/// Whether sequence number `a` is at or before `b` (modulo 2^32).
fn at_or_before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

impl ResendCopies {
    /// Keeps a copy of `frame`, the first transmission of `[start, end)`.
    pub fn keep(&mut self, start: u32, end: u32, frame: &[u8]) {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        self.copies.push_back(Copy {
            start,
            end,
            frame: buf,
        });
    }

    /// The peer acknowledged everything before `una`: those copies are dropped.
    pub fn acked(&mut self, una: u32) {
        while let Some(c) = self.copies.front() {
            if !at_or_before(c.end, una) {
                break;
            }
            let c = self.copies.take_front().expect("front exists");
            self.spare.push(c.frame);
        }
    }

    /// The copy of the segment `[start, end)`, if kept.
    pub fn get(&self, start: u32, end: u32) -> Option<&[u8]> {
        self.copies
            .iter()
            .find(|c| c.start == start && c.end == end)
            .map(|c| &c.frame[..])
    }

    /// Copies kept now.
    pub fn len(&self) -> usize {
        self.copies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_go_with_their_acknowledgement_and_buffers_are_reused() {
        let mut r = ResendCopies::default();
        r.keep(u32::MAX - 99, 900, &[1; 1000]);
        r.keep(900, 1900, &[2; 1000]);
        r.keep(1900, 2900, &[3; 1000]);
        assert_eq!(r.get(900, 1900), Some(&[2u8; 1000][..]));
        assert_eq!(r.get(900, 1000), None, "only whole segments");
        r.acked(900);
        assert_eq!(r.len(), 2, "acknowledged across the wrap");
        assert!(r.get(u32::MAX - 99, 900).is_none());
        r.acked(1000);
        assert_eq!(r.len(), 2, "partly acknowledged: kept");
        let reused = r.spare[0].as_ptr();
        r.keep(2900, 3000, &[4; 100]);
        assert_eq!(r.copies.back().unwrap().frame.as_ptr(), reused);
        r.acked(3000);
        assert!(r.is_empty());
    }
}
