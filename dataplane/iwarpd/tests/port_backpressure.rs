//! Many streams through one Unix port to a peer that reads more slowly than they send: the
//! port pushes back on TCP instead of queueing or dropping what TCP hands it, so its queue
//! stays a few dozen frames whatever the streams' windows add up to, no frame is dropped,
//! no segment goes twice, and the streams share the port evenly.

mod common;

use common::streams::{slow_reader, Streams};
use common::{End, A_IP, B_IP};
use iwarpd::port::unix::{UnixPort, PAUSE_AT};
use iwarpd::port::{Port, RxBuf};
use std::io;

const STREAMS: usize = 24;
const WRITES: usize = 48;

#[test]
fn many_streams_to_a_slow_reader_drop_nothing_resend_nothing_and_share_the_port() {
    let dir = common::segment_dir("iwarp-backpressure");
    let pa = UnixPort::open(dir.path(), [2, 0, 0, 0, 0x24, 1], 1500).unwrap();
    let pb = UnixPort::open(dir.path(), [2, 0, 0, 0, 0x24, 2], 1500).unwrap();
    // The streams' windows together (24 × 256 KiB in flight) are many times what the
    // port's socket buffer holds: a resend here is the port's queue growing with the
    // streams.
    let tcp = common::patient_tcp();
    let mut a = End::with_tcp(pa, A_IP, tcp);
    let mut b = End::with_tcp(pb, B_IP, tcp);
    let s = Streams {
        streams: STREAMS,
        writes: WRITES,
        write: 64 << 10,
        depth: 8,
        slower: 3,
        port: 7300,
        local_port: 42000,
    };
    let out = slow_reader(&mut a, &mut b, s, UnixPort::held);
    println!("{STREAMS} streams × {WRITES} × 64 KiB: {out:?}");
    // A round over the sockets opened below the bound adds a segment a stream (two where
    // the device cuts a resend's new part into a segment of its own).
    assert!(
        out.most_held <= PAUSE_AT + 2 * STREAMS,
        "the port held {} frames",
        out.most_held
    );
    assert_eq!(out.dropped, 0, "frames dropped by the port");
    assert_eq!(out.resent, 0, "segments resent");
    out.assert_shared_evenly(WRITES);
}

/// A Unix port whose queue counts as full ([`Port::tx_full`]) a few frames past its pause
/// bound, as a real port's does only with thousands of connections sending.
struct Bounded {
    inner: UnixPort,
    full_at: usize,
}

impl Port for Bounded {
    type Frame = RxBuf;
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn rx_burst<F: FnMut(RxBuf)>(&mut self, max: usize, f: F) -> io::Result<usize> {
        self.inner.rx_burst(max, f)
    }
    fn recycle(&mut self, frame: RxBuf) {
        self.inner.recycle(frame)
    }
    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        self.inner.tx(frame)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
    fn tx_ready(&self) -> bool {
        self.inner.tx_ready()
    }
    fn tx_full(&self) -> bool {
        self.inner.held() >= self.full_at
    }
    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }
}

#[test]
fn a_round_over_more_streams_than_the_port_has_room_for_ends_where_it_is_full() {
    // A round opened below the pause bound gives every sending stream a segment: 24 here,
    // past a queue that is full 8 frames after the bound. The round must end there (the
    // rest of the streams wait a round, their segments kept by TCP), not overflow the queue.
    let dir = common::segment_dir("iwarp-backpressure-full");
    let pa = UnixPort::open(dir.path(), [2, 0, 0, 0, 0x25, 1], 1500).unwrap();
    let pb = UnixPort::open(dir.path(), [2, 0, 0, 0, 0x25, 2], 1500).unwrap();
    let full_at = PAUSE_AT + 8;
    let pb = Bounded { inner: pb, full_at };
    let tcp = common::patient_tcp();
    let mut a = End::with_tcp(pa, A_IP, tcp);
    let mut b = End::with_tcp(pb, B_IP, tcp);
    let s = Streams {
        streams: STREAMS,
        writes: 16,
        write: 64 << 10,
        depth: 8,
        slower: 3,
        port: 7310,
        local_port: 42100,
    };
    let out = slow_reader(&mut a, &mut b, s, |p: &Bounded| p.inner.held());
    println!("{STREAMS} streams, full at {full_at}: {out:?}");
    // The frame that found the queue full, and a cut resend's new part, may follow.
    assert!(
        out.most_held <= full_at + 2,
        "the port held {} frames",
        out.most_held
    );
    assert_eq!(out.dropped, 0, "frames dropped by the port");
    // Cut short where the queue is full, the next round starts with the streams this one
    // did not reach: none waits while others are served round after round.
    out.assert_shared_evenly(s.writes);
}
