//! `tcp.ack_delay_us`: the ACK of a lone small segment waits for the answer and rides it, so
//! a Write ping-pong costs one frame per message instead of two; a burst of full segments
//! is still acknowledged at once (every second full segment), so bulk data never waits for
//! the delay. Two nodes on one thread over an in-memory link.

mod common;

use common::{pair_tcp, until, End};
use iwarp_engine::{Access, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::TcpSettings;
use iwarpd::port::memory::MemoryPort;
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
        a.node.poll();
        let before = b.node.counters().tx_frames;
        b.node.poll();
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

/// A burst of segments is acknowledged as soon as TCP has taken it in, before the engine
/// works through it (a turn may take in all the sender has in flight; an ACK at the turn's
/// end would keep the sender waiting that long): A's first ACK of B's burst still counts
/// the burst's octets as unread, so it advertises less window than A's ACKs before it.
#[test]
fn a_burst_is_acknowledged_before_the_engine_reads_it() {
    use iwarpd::port::pcap::PcapPort;

    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("a.pcap");
    let a_mac = [2, 0, 0, 0, 3, 5];
    let (pa, pb) = MemoryPort::pair(a_mac, [2, 0, 0, 0, 3, 6], 1500);
    let pa = PcapPort::new(pa, &pcap).unwrap();
    let (mut a, mut b) = pair_tcp(pa, pb, Settings::default(), TcpSettings::default());
    let len = 16 << 10;
    let (ma, mb) = (a.mem(len, Access::ALL), b.mem(len, Access::ALL));
    mb.fill(9);
    b.post_write(1, mb.sge(0, len), &ma, 0);
    // B sends the whole Write in one turn, A takes it all in in one.
    b.node.poll();
    a.node.poll();
    until(&mut a, &mut b, 20, |_, b| !b.wcs().is_empty());
    assert!(ma.bytes(0, len) == mb.bytes(0, len));
    drop(a);

    // In capture order (A's port sees both ways): A's window before B's first data segment
    // of the Write, and in A's first ACK of more than that segment.
    let frames = iwarp_testkit::capture_frames(&pcap);
    let segs: Vec<_> = frames
        .iter()
        .filter_map(|f| iwarp_testkit::tcp_segment(f))
        .collect();
    let from_a = |s: &&iwarp_testkit::TcpSegment| s.src_mac == a_mac;
    let first_data = segs
        .iter()
        .position(|s| !from_a(&s) && s.payload.len() > 1000)
        .expect("B's Write");
    let start = segs[first_data].seq;
    let idle_window = segs[..first_data].iter().rfind(from_a).unwrap().window;
    let burst_window = segs[first_data..]
        .iter()
        .filter(from_a)
        .find(|s| {
            s.ack
                .is_some_and(|ack| ack.wrapping_sub(start) as i32 > 1460)
        })
        .expect("an ACK of the burst")
        .window;
    assert!(
        burst_window < idle_window,
        "the burst's first ACK advertises {burst_window}, less than {idle_window}: bytes unread"
    );
}
