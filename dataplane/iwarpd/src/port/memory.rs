//! An in-memory port pair for tests: what one side transmits the other receives, through
//! two shared queues, with no system call and no file. A point-to-point link: every frame
//! goes to the other side whatever its destination MAC (as a cable does).

use super::Port;
use smoltcp::wire::ETHERNET_HEADER_LEN;
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

type Queue = Arc<Mutex<VecDeque<Vec<u8>>>>;

pub struct MemoryPort {
    mac: [u8; 6],
    mtu: usize,
    rx: Queue,
    tx: Queue,
    /// Frames over the MTU refused by `tx`.
    pub oversize: u64,
    /// The last burst took every frame there was ([`Port::rx_drained`]).
    drained: bool,
}

impl MemoryPort {
    /// Two ports joined by a link.
    pub fn pair(a: [u8; 6], b: [u8; 6], mtu: usize) -> (MemoryPort, MemoryPort) {
        let (ab, ba): (Queue, Queue) = Default::default();
        (
            MemoryPort {
                mac: a,
                mtu,
                rx: Arc::clone(&ba),
                tx: Arc::clone(&ab),
                oversize: 0,
                drained: false,
            },
            MemoryPort {
                mac: b,
                mtu,
                rx: ab,
                tx: ba,
                oversize: 0,
                drained: false,
            },
        )
    }

    /// This end with another MTU: a link whose ends differ, as across a tunnel, so that one
    /// end's TCP advertises a smaller MSS than the other's.
    pub fn with_mtu(mut self, mtu: usize) -> MemoryPort {
        self.mtu = mtu;
        self
    }
}

impl Port for MemoryPort {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn mtu(&self) -> usize {
        self.mtu
    }
    type Frame = Vec<u8>;

    fn rx_burst<F: FnMut(Vec<u8>)>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        let mut q = self
            .rx
            .lock()
            .map_err(|_| io::Error::other("peer panicked"))?;
        let n = q.len().min(max);
        self.drained = n < max;
        for frame in q.drain(..n) {
            f(frame);
        }
        Ok(n)
    }
    fn rx_drained(&self) -> bool {
        self.drained
    }
    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        // An Ethernet header plus at most the MTU.
        if frame.len() > self.mtu + ETHERNET_HEADER_LEN {
            self.oversize += 1;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame over the MTU",
            ));
        }
        self.tx
            .lock()
            .map_err(|_| io::Error::other("peer panicked"))?
            .push_back(frame.to_vec());
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn dropped(&self) -> u64 {
        self.oversize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cross_in_order_and_oversize_is_refused() {
        let (mut a, mut b) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
        a.tx(&[1; 60]).unwrap();
        a.tx(&[2; 1514]).unwrap();
        assert!(a.tx(&[3; 1515]).is_err());
        assert_eq!(a.dropped(), 1);
        let mut got = Vec::new();
        assert_eq!(b.rx_burst(1, |f| got.push(f.to_vec())).unwrap(), 1);
        assert_eq!(b.rx_burst(32, |f| got.push(f.to_vec())).unwrap(), 1);
        assert_eq!(b.rx_burst(32, |_| panic!("nothing left")).unwrap(), 0);
        assert_eq!(got, vec![vec![1; 60], vec![2; 1514]]);
        // Nothing loops back to the sender.
        assert_eq!(a.rx_burst(32, |_| panic!("no loopback")).unwrap(), 0);
    }

    #[test]
    fn a_frame_built_in_place_is_sent_unless_held_back() {
        let (mut a, mut b) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
        let mut scratch = Vec::new();
        let (n, sent) = a.tx_with(64, &mut scratch, |f| {
            f.fill(7);
            (f.len(), true)
        });
        assert_eq!((n, sent), (64, true));
        let (_, sent) = a.tx_with(80, &mut scratch, |f| {
            f.fill(8);
            ((), false)
        });
        assert!(!sent);
        let mut got = Vec::new();
        b.rx_burst(32, |f| got.push(f.to_vec())).unwrap();
        assert_eq!(got, vec![vec![7; 64]], "the held-back frame stayed");
    }
}
