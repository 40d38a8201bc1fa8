//! A turn's receive step reads the port until it is empty, and no further. A port that
//! knows a short burst emptied it (the Unix port and TAP, where each look is a system call
//! a source) is read once for a lone frame, not a second time for nothing; a port that
//! cannot tell (a NIC's driver may hand over fewer frames than it holds) is read until a
//! burst brings none.

mod common;

use common::{pair, End};
use iwarp_engine::Access;
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::port::memory::MemoryPort;
use iwarpd::port::Port;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A port that counts the bursts asked of it, and says whether one emptied it only when
/// `knows`.
struct Counting<P> {
    inner: P,
    bursts: Arc<AtomicUsize>,
    knows: bool,
}

impl<P: Port> Port for Counting<P> {
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    type Frame = P::Frame;
    fn rx_burst<F: FnMut(P::Frame)>(&mut self, max: usize, f: F) -> io::Result<usize> {
        self.bursts.fetch_add(1, Ordering::Relaxed);
        self.inner.rx_burst(max, f)
    }
    fn recycle(&mut self, frame: P::Frame) {
        self.inner.recycle(frame)
    }
    fn rx_drained(&self) -> bool {
        self.knows && self.inner.rx_drained()
    }
    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        self.inner.tx(frame)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Bursts B's one turn asks for after A's Write reached its port.
fn bursts_for_one_write(knows: bool, mac: u8) -> usize {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 5, mac], [2, 0, 0, 0, 5, mac + 1], 1500);
    let bursts = Arc::new(AtomicUsize::new(0));
    let pb = Counting {
        inner: pb,
        bursts: Arc::clone(&bursts),
        knows,
    };
    let (mut a, mut b): (End<MemoryPort>, End<Counting<MemoryPort>>) =
        pair(pa, pb, Settings::default());
    let (ma, mb) = (a.mem(64, Access::ALL), b.mem(64, Access::ALL));
    // Whatever the setup left in flight settles.
    for _ in 0..100 {
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
    }
    ma.fill(7);
    a.post_write(1, ma.sge(0, 64), &mb, 0);
    a.node.poll(&mut a.rnic);
    bursts.store(0, Ordering::Relaxed);
    b.node.poll(&mut b.rnic);
    // The Write arrived in that turn.
    assert_eq!(mb.bytes(0, 64), ma.bytes(0, 64));
    bursts.load(Ordering::Relaxed)
}

#[test]
fn a_lone_frame_is_read_in_one_burst_when_the_port_knows_it_is_drained() {
    assert_eq!(bursts_for_one_write(true, 1), 1);
    // A port that cannot tell is asked again, and its empty answer ends the step.
    assert_eq!(bursts_for_one_write(false, 3), 2);
}
