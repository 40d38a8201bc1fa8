//! A burst of consecutive losses in the middle of a large Write is repaired from the peer's
//! SACK blocks, one hole per round trip, without the retransmission timer.

mod common;

use common::{pair_tcp, segment_dir, write_b_to_a};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::TcpSettings;
use iwarpd::port::lossy::LossyPort;
use iwarpd::port::unix::UnixPort;

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
    let start = std::time::Instant::now();
    write_b_to_a(&mut a, &mut b, 64 << 20, 41);
    let took = start.elapsed();
    assert_eq!(a.node.port().dropped, 5, "the burst happened");
    let tcp = b.node.conn_tcp(b.conn).expect("the sender is tracked");
    println!(
        "64 MiB with 5 consecutive segments lost: {took:?}, sender {:?}, srtt {:?}",
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
