//! Receive buffers for the ports that receive with a system call (Unix socket, TAP): a frame
//! is read straight into a buffer that then travels to smoltcp and comes back through
//! [`super::Port::recycle`], so receiving allocates nothing once warm and copies nothing.

use std::io;
use std::ops::Deref;

/// A frame received into one of an [`RxPool`]'s buffers.
#[derive(Debug)]
pub struct RxBuf {
    buf: Vec<u8>,
    len: usize,
}

impl Deref for RxBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Buffers as large as the port's largest frame, kept for reuse.
#[derive(Debug)]
pub struct RxPool {
    free: Vec<Vec<u8>>,
    size: usize,
}

impl RxPool {
    /// Buffers kept at most: a burst queued for smoltcp and one being received.
    const KEEP: usize = 2 * super::RX_BURST;

    /// A pool of buffers of `size` octets (a frame longer than that is cut, as a NIC whose
    /// buffer is too small would).
    pub fn new(size: usize) -> RxPool {
        RxPool {
            free: Vec::new(),
            size,
        }
    }

    /// Receives one frame with `recv` (which answers the frame's length) into a free buffer.
    pub fn recv(&mut self, recv: impl FnOnce(&mut [u8]) -> io::Result<usize>) -> io::Result<RxBuf> {
        let mut buf = self.free.pop().unwrap_or_else(|| vec![0; self.size]);
        match recv(&mut buf) {
            Ok(len) => Ok(RxBuf {
                len: len.min(buf.len()),
                buf,
            }),
            Err(e) => {
                self.free.push(buf);
                Err(e)
            }
        }
    }

    /// A free buffer to receive into, for a receive of several frames at once; it comes
    /// back as a frame ([`RxPool::frame`]), or is kept for the next receive.
    pub fn take(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_else(|| vec![0; self.size])
    }

    /// The frame of `len` octets received into `buf` (one of [`RxPool::take`]'s).
    pub fn frame(&self, buf: Vec<u8>, len: usize) -> RxBuf {
        RxBuf {
            len: len.min(buf.len()),
            buf,
        }
    }

    /// `frame` copied into a free buffer (cut to the buffer's length, as a NIC's would).
    pub fn copied(&mut self, frame: &[u8]) -> RxBuf {
        let mut buf = self.take();
        let len = frame.len().min(buf.len());
        buf[..len].copy_from_slice(&frame[..len]);
        self.frame(buf, len)
    }

    /// Takes back a frame's buffer once it has been read.
    pub fn give_back(&mut self, frame: RxBuf) {
        if self.free.len() < Self::KEEP && frame.buf.len() == self.size {
            self.free.push(frame.buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_received_into_again() {
        let mut pool = RxPool::new(16);
        let f = pool
            .recv(|b| {
                b[..3].copy_from_slice(b"abc");
                Ok(3)
            })
            .unwrap();
        assert_eq!(&*f, b"abc");
        let at = f.buf.as_ptr();
        pool.give_back(f);
        let g = pool.recv(|_| Ok(16)).unwrap();
        assert_eq!(g.buf.as_ptr(), at, "the same buffer");
        assert_eq!(g.len(), 16);
        let e = pool.recv(|_| Err(io::ErrorKind::WouldBlock.into()));
        assert!(e.is_err());
        assert_eq!(pool.free.len(), 1, "a failed receive keeps its buffer");
    }
}
