//! Taking from the front of a queue kept warm.
//!
//! Each QP and connection holds its queues (SQ, RQ, in-flight WRs, completions, sent
//! segments) as `VecDeque`s sized to the queue's depth, and a stream keeps only a few entries
//! in each. `VecDeque` walks its whole buffer as entries come and go, so with thousands of
//! QPs nearly every new entry lands on a cache line untouched since the buffer's last lap:
//! at 1,024 QPs of 64-deep SQs the engine's SQs alone span 12 MiB. A queue that starts over
//! at its buffer's front each time it empties reuses the same few lines instead.

use std::collections::VecDeque;

/// `VecDeque`'s `pop_front`, rewinding a queue it leaves empty to the start of its buffer.
pub trait TakeFront<T> {
    fn take_front(&mut self) -> Option<T>;
}

impl<T> TakeFront<T> for VecDeque<T> {
    fn take_front(&mut self) -> Option<T> {
        let front = self.pop_front();
        if self.is_empty() {
            // An empty deque's `clear` only moves its head to slot 0.
            self.clear();
        }
        front
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn front_slot(q: &VecDeque<[u8; 200]>, base: usize) -> usize {
        (q.front().expect("an entry") as *const [u8; 200] as usize - base) / 200
    }

    #[test]
    fn a_queue_emptied_by_take_front_reuses_its_first_slots() {
        let mut q: VecDeque<[u8; 200]> = VecDeque::with_capacity(64);
        q.push_back([0; 200]);
        let base = q.front().expect("an entry") as *const [u8; 200] as usize;
        for _ in 0..10 {
            for _ in 0..4 {
                q.push_back([1; 200]);
            }
            while q.len() > 1 {
                q.take_front();
            }
            assert_eq!(front_slot(&q, base), 4);
            q.take_front();
            q.push_back([2; 200]);
            assert_eq!(
                front_slot(&q, base),
                0,
                "an emptied queue starts over at slot 0"
            );
        }
    }

    #[test]
    fn take_front_takes_in_order() {
        let mut q: VecDeque<u32> = (0..5).collect();
        let taken: Vec<u32> = std::iter::from_fn(|| q.take_front()).collect();
        assert_eq!(taken, [0, 1, 2, 3, 4]);
        assert!(q.is_empty());
    }
}
