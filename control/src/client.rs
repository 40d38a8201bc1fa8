//! What control has to tell one application, waiting for its socket. Replies and events are
//! queued here and written as far as the non-blocking socket takes them, so an application
//! that stops reading never makes control wait and every other application is still served.
//! The queue is bounded: an application that lets more than the bound pile up is dropped
//! (its caller cleans up after it as after EOF), not buffered without end.

use std::collections::VecDeque;
use std::io::{ErrorKind, Write};

/// Octets that may wait for one application: hundreds of replies and events beyond what its
/// socket buffer holds. A client that reads at all never comes close.
pub const MAX_QUEUED: usize = 256 << 10;

/// Why an application cannot be written to any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwritable {
    /// More than the bound waits: the application does not read.
    Overflow { queued: usize },
    /// The socket failed (the application closed it, or reset it).
    Socket(ErrorKind),
}

impl core::fmt::Display for Unwritable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Unwritable::Overflow { queued } => write!(
                f,
                "it does not read its replies ({queued} octets waiting, at most {MAX_QUEUED})"
            ),
            Unwritable::Socket(k) => write!(f, "its socket failed ({k})"),
        }
    }
}

/// The octets waiting for one application, oldest first.
#[derive(Debug)]
pub struct Outbox {
    queue: VecDeque<u8>,
    limit: usize,
}

impl Default for Outbox {
    fn default() -> Outbox {
        Outbox::new(MAX_QUEUED)
    }
}

impl Outbox {
    /// An empty queue that refuses to hold more than `limit` octets.
    pub fn new(limit: usize) -> Outbox {
        Outbox {
            queue: VecDeque::new(),
            limit,
        }
    }

    /// Queues `msg` (one whole message) behind what waits and writes what `w` takes now.
    pub fn send(&mut self, w: &mut impl Write, msg: &[u8]) -> Result<(), Unwritable> {
        self.queue.extend(msg);
        self.flush(w)?;
        if self.queue.len() > self.limit {
            return Err(Unwritable::Overflow {
                queued: self.queue.len(),
            });
        }
        Ok(())
    }

    /// Writes what waits until `w` would block or the queue is empty.
    pub fn flush(&mut self, w: &mut impl Write) -> Result<(), Unwritable> {
        while !self.queue.is_empty() {
            let (front, _) = self.queue.as_slices();
            match w.write(front) {
                Ok(0) => return Err(Unwritable::Socket(ErrorKind::WriteZero)),
                Ok(n) => {
                    self.queue.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Unwritable::Socket(e.kind())),
            }
        }
        Ok(())
    }

    /// Octets waiting.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that takes `room` octets, then would block, or fails.
    struct Sock {
        got: Vec<u8>,
        room: usize,
        broken: bool,
    }

    impl Write for Sock {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.broken {
                return Err(ErrorKind::BrokenPipe.into());
            }
            // Short writes, as a socket makes them.
            let n = b.len().min(self.room).min(3);
            if n == 0 {
                return Err(ErrorKind::WouldBlock.into());
            }
            self.room -= n;
            self.got.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn waits_in_order_never_blocks_and_refuses_past_the_bound() {
        let mut s = Sock {
            got: Vec::new(),
            room: 5,
            broken: false,
        };
        let mut o = Outbox::new(10);
        o.send(&mut s, b"abcd").unwrap();
        o.send(&mut s, b"efgh").unwrap();
        assert_eq!((s.got.as_slice(), o.queued()), (&b"abcde"[..], 3));
        // The reader makes room: what waited goes first, in order.
        s.room = 100;
        o.send(&mut s, b"ij").unwrap();
        assert_eq!((s.got.as_slice(), o.queued()), (&b"abcdefghij"[..], 0));
        // A reader that stops: the queue grows to the bound, and past it the client is
        // refused.
        s.room = 0;
        o.send(&mut s, b"0123456789").unwrap();
        assert_eq!(
            o.send(&mut s, b"x"),
            Err(Unwritable::Overflow { queued: 11 })
        );
        s.broken = true;
        assert_eq!(
            o.flush(&mut s),
            Err(Unwritable::Socket(ErrorKind::BrokenPipe))
        );
    }
}
