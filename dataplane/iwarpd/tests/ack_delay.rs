//! `tcp.ack_delay_us`: the ACK of a lone small segment waits for the answer and rides it, so
//! a Write ping-pong costs one frame per message instead of two; a burst of full segments
//! is still acknowledged at once (every second full segment), so bulk data never waits for
//! the delay. Two nodes on one thread over an in-memory link.

mod common;

use common::{pair_tcp, until, End};
use iwarp_engine::{Access, SendOp, SendWr, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::TcpSettings;
use iwarpd::port::memory::MemoryPort;
use iwarpd::port::Port;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

const ROUNDS: u64 = 200;

/// A's frames sent per round trip of a 64 B Write ping-pong.
fn frames_per_round_trip(ack_delay: Duration) -> f64 {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 3, 1], [2, 0, 0, 0, 3, 2], 1500);
    let tcp = TcpSettings {
        ack_delay,
        ..TcpSettings::default()
    };
    let (mut a, mut b) = pair_tcp(pa, pb, Settings::default(), tcp);
    let (ma, mb) = (a.mem(128, Access::ALL), b.mem(128, Access::ALL));
    let write = |from: &mut End<MemoryPort>, src: &common::Mem, dst: &common::Mem, id| {
        from.post_write(id, src.sge(0, 64), dst, 64)
    };
    let before = a.node.counters().tx_frames;
    for i in 1..=ROUNDS {
        let tag = (i % 250) as u8 + 1;
        // SAFETY: the last octet of A's source half; no transfer reads it now.
        unsafe { *ma.ptr.as_ptr().add(63) = tag };
        write(&mut a, &ma, &mb, i);
        until(&mut a, &mut b, 20, |_, _| mb.bytes(127, 1)[0] == tag);
        // SAFETY: as above, B's source half.
        unsafe { *mb.ptr.as_ptr().add(63) = tag };
        write(&mut b, &mb, &ma, i);
        until(&mut a, &mut b, 20, |_, _| ma.bytes(127, 1)[0] == tag);
        assert!(a
            .wcs()
            .iter()
            .chain(&b.wcs())
            .all(|w| w.status == Status::Success));
    }
    (a.node.counters().tx_frames - before) as f64 / ROUNDS as f64
}

#[test]
fn a_held_ack_rides_the_answer() {
    let immediate = frames_per_round_trip(Duration::ZERO);
    // The longest delay the configuration allows: an unoptimised build answers well within.
    let held = frames_per_round_trip(Duration::from_millis(1));
    assert!(
        immediate >= 1.9,
        "without a delay each Write is acknowledged alone: {immediate}"
    );
    assert!(
        held <= 1.1,
        "with one the ACK rides the answer: {held} frames per round trip"
    );
}

#[test]
fn a_lone_small_segment_waits_for_its_ack_a_burst_of_full_ones_does_not() {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 3, 3], [2, 0, 0, 0, 3, 4], 1500);
    let tcp = TcpSettings {
        ack_delay: Duration::from_millis(1),
        ..TcpSettings::default()
    };
    let (mut a, mut b) = pair_tcp(pa, pb, Settings::default(), tcp);
    let (ma, mb) = (a.mem(8192, Access::ALL), b.mem(8192, Access::ALL));
    ma.fill(5);
    let mut write = |a: &mut End<MemoryPort>, id: u64, len: usize| {
        a.post_write(id, ma.sge(0, len), &mb, 0);
        // A sends everything in one turn, B takes it all in in one turn.
        a.node.poll(&mut a.rnic);
        let before = b.node.counters().tx_frames;
        b.node.poll(&mut b.rnic);
        b.node.counters().tx_frames - before
    };
    // One 64 B segment: placed, and its ACK held for an answer to ride.
    assert_eq!(
        write(&mut a, 1, 64),
        0,
        "a lone small segment's ACK went out alone"
    );
    assert_eq!(mb.bytes(0, 64), ma.bytes(0, 64));
    // Three full segments (4 KiB in MSS-sized FPDUs): acknowledged in the same turn
    // (RFC 5681: at least every second full-sized segment), so bulk never waits for the timer.
    assert_eq!(
        write(&mut a, 2, 4096),
        1,
        "a burst of full segments was not acknowledged"
    );
    assert_eq!(mb.bytes(0, 4096), ma.bytes(0, 4096));
}

/// A port that holds what is sent until `flush`, as DPDK's does (a burst per flush), and
/// logs each flush's frames.
struct Batching {
    inner: MemoryPort,
    held: Vec<Vec<u8>>,
    flushes: Rc<RefCell<Vec<Vec<Vec<u8>>>>>,
}

impl Port for Batching {
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    type Frame = Vec<u8>;
    fn rx_burst<F: FnMut(Vec<u8>)>(&mut self, max: usize, f: F) -> std::io::Result<usize> {
        self.inner.rx_burst(max, f)
    }
    fn tx(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.held.push(frame.to_vec());
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        for f in &self.held {
            self.inner.tx(f)?;
        }
        self.flushes
            .borrow_mut()
            .push(std::mem::take(&mut self.held));
        Ok(())
    }
}

/// A burst of segments is acknowledged, and the ACK sent, as soon as TCP has taken the
/// burst in, before the engine works through it (a turn may take in all the sender has in
/// flight; an ACK at the turn's end kept the sender waiting that long). B sends an 8 KiB
/// RDMA Write and a Read Request in one turn (within the initial congestion window); in A's one turn that takes them in, a pure ACK
/// leaves the port first, on a flush of its own, and the Read Response after it.
#[test]
fn a_burst_is_acknowledged_before_the_engine_works_through_it() {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 3, 5], [2, 0, 0, 0, 3, 6], 1500);
    let flushes = Rc::new(RefCell::new(Vec::new()));
    let pa = Batching {
        inner: pa,
        held: Vec::new(),
        flushes: flushes.clone(),
    };
    let (mut a, mut b) = pair_tcp(pa, pb, Settings::default(), TcpSettings::default());
    let len = 8 << 10;
    let (ma, mb) = (a.mem(len, Access::ALL), b.mem(len + 8, Access::ALL));
    mb.fill(9);
    b.post_write(1, mb.sge(0, len), &ma, 0);
    let read = SendOp::Read {
        remote_stag: ma.stag,
        remote_to: ma.sge(0, 0).to,
    };
    let wr = SendWr::new(2, read, &[mb.sge(len, 8)]);
    b.rnic.post_send(b.qp, wr).unwrap();
    b.node.poll(&mut b.rnic);
    flushes.borrow_mut().clear();
    a.node.poll(&mut a.rnic);
    let turn: Vec<Vec<usize>> = flushes
        .borrow()
        .iter()
        .map(|batch| {
            let payload = |f: &Vec<u8>| iwarp_testkit::tcp_segment(f).map(|s| s.payload.len());
            batch.iter().filter_map(payload).collect()
        })
        .collect();
    assert!(
        turn.len() >= 2 && turn[0].iter().all(|&n| n == 0),
        "TCP payload octets per frame of each flush of A's turn: {turn:?}"
    );
    assert!(turn[1..].iter().flatten().any(|&n| n > 0), "{turn:?}");
    until(&mut a, &mut b, 20, |_, b| {
        b.wcs()
            .iter()
            .any(|w| w.wr_id == 2 && w.status == Status::Success)
    });
    assert!(ma.bytes(0, len) == mb.bytes(0, len));
    assert_eq!(
        mb.bytes(len, 8),
        mb.bytes(0, 8),
        "the Read brought back the Write"
    );
}
