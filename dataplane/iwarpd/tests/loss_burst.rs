//! A burst of consecutive losses in the middle of a large Write is repaired from the peer's
//! SACK blocks, one hole per round trip, without the retransmission timer.

mod common;

use common::{pair_tcp, segment_dir};
use iwarp_engine::{Access, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::TcpSettings;
use iwarpd::port::lossy::LossyPort;
use iwarpd::port::unix::UnixPort;
use std::time::{Duration, Instant};

#[test]
fn five_consecutive_segments_lost_mid_write_are_repaired_without_a_timeout() {
    let dir = segment_dir("iwarp-burst");
    // A (the receiver) loses 5 consecutive frames from B, some 20000 frames into the
    // transfer: the middle of the 64 MiB Write (about 46000 segments).
    let pa = LossyPort::burst(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 2, 0x0a], 1500).unwrap(),
        20_000,
        5,
    );
    let pb = UnixPort::open(dir.path(), [2, 0, 0, 0, 2, 0x0b], 1500).unwrap();
    // Filling 64 MiB on a loaded machine may pause polling for seconds: beyond the default
    // user timeout, which would end the connection before the Write starts.
    let tcp = TcpSettings {
        user_timeout: std::time::Duration::from_secs(60),
        ..TcpSettings::default()
    };
    let (mut a, mut b) = pair_tcp(pa, pb, Settings::default(), tcp);
    let len = 64 << 20;
    let a_mem = a.mem(len, Access::ALL);
    let b_mem = b.mem(len, Access::ALL);
    b_mem.fill(41);
    let start = Instant::now();
    b.post_write(1, b_mem.sge(0, len), &a_mem, 0);
    // The longest time A's stream went without a new octet: the burst's repair.
    let (mut last_rx, mut last_progress, mut stall) = (0, Instant::now(), Duration::ZERO);
    let mut done = false;
    // Completion at B means handed to TCP; segments are placed in order, so the last 4 KiB
    // arrive last.
    while !(done && a_mem.bytes(len - 4096, 4096) == b_mem.bytes(len - 4096, 4096)) {
        assert!(start.elapsed() < Duration::from_secs(120), "stalled");
        a.node.poll(&mut a.rnic);
        b.node.poll(&mut b.rnic);
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success);
            done = true;
        }
        let rx = a.node.counters().stream_bytes_rx;
        if rx > last_rx {
            stall = stall.max(last_progress.elapsed());
            (last_rx, last_progress) = (rx, Instant::now());
        }
    }
    let took = start.elapsed();
    assert!(
        a_mem.bytes(0, len) == b_mem.bytes(0, len),
        "placed bytes differ"
    );
    assert_eq!(a.node.port().dropped, 5, "the burst happened");
    let tcp = b.node.conn_tcp(b.conn).expect("the sender is tracked");
    println!(
        "64 MiB with 5 consecutive segments lost: {took:?}, longest stall {stall:?}, \
         sender {:?}, srtt {:?}",
        tcp.counters, tcp.srtt
    );
    assert!(tcp.counters.retransmits >= 5, "{:?}", tcp.counters);
    assert!(
        tcp.counters.fast_retransmits >= 5,
        "each hole resent on an ACK: {:?}",
        tcp.counters
    );
    assert_eq!(tcp.counters.rtos, 0, "no timeout: {:?}", tcp.counters);
}
