//! Losses in the middle of a large Write, a burst of consecutive segments or several
//! separated ones in one window, are repaired from the peer's SACK blocks without the
//! retransmission timer.

mod common;

use common::{pair_tcp, segment_dir};
use iwarp_engine::{Access, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnTcp, TcpSettings};
use iwarpd::port::lossy::LossyPort;
use iwarpd::port::unix::UnixPort;
use iwarpd::port::Port;
use std::time::{Duration, Instant};

/// B Writes 64 MiB into A over `pa`/`pb`, which loses `drops` frames; checks the data and
/// prints the longest stall of A's stream. Returns B's sending counters.
fn write_64_mib<P: Port, Q: Port>(pa: P, pb: Q, drops: u64, what: &str) -> ConnTcp {
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
    // The longest time A's stream went without a new octet: the losses' repair.
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
    let tcp = b.node.conn_tcp(b.conn).expect("the sender is tracked");
    assert_eq!(a.node.port().dropped(), drops, "the losses happened");
    println!(
        "64 MiB with {what}: {took:?}, longest stall {stall:?}, sender {:?}, srtt {:?}",
        tcp.counters, tcp.srtt
    );
    tcp
}

#[test]
fn three_separated_segments_lost_in_one_window_are_repaired_without_a_timeout() {
    // RFC 6675 section 5: every hole the scoreboard shows lost is resent in the recovery's
    // first round trip, not one per partial ACK.
    let dir = segment_dir("iwarp-holes");
    // A loses B's frames 20001, 20011 and 20021 (each LossyPort counts what the one inside
    // it passed): three holes nine segments apart, well within one window.
    let pa = LossyPort::burst(
        LossyPort::burst(
            LossyPort::burst(
                UnixPort::open(dir.path(), [2, 0, 0, 0, 2, 0x1a], 1500).unwrap(),
                20_000,
                1,
            ),
            20_009,
            1,
        ),
        20_018,
        1,
    );
    let pb = UnixPort::open(dir.path(), [2, 0, 0, 0, 2, 0x1b], 1500).unwrap();
    let tcp = write_64_mib(pa, pb, 3, "3 separated segments lost");
    assert_eq!(tcp.counters.rtos, 0, "no timeout: {:?}", tcp.counters);
    assert!(tcp.counters.retransmits >= 3, "{:?}", tcp.counters);
    assert!(
        tcp.counters.retransmits <= 3 + 2,
        "only the holes resent: {:?}",
        tcp.counters
    );
}

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
    let tcp = write_64_mib(pa, pb, 5, "5 consecutive segments lost");
    assert!(tcp.counters.retransmits >= 5, "{:?}", tcp.counters);
    assert!(
        tcp.counters.fast_retransmits >= 5,
        "each hole resent on an ACK, none by the timer: {:?}",
        tcp.counters
    );
    assert_eq!(tcp.counters.rtos, 0, "no timeout: {:?}", tcp.counters);
    assert!(
        tcp.counters.retransmits <= 5 + 2,
        "only the holes resent: {:?}",
        tcp.counters
    );
}
