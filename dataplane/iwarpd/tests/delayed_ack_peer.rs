//! A peer that delays its ACK of a lone segment (Linux holds it 40 ms and more) must not see
//! our small Writes twice: the retransmission timer of a lone segment allows for the delay.
//! Two nodes on one thread over an in-memory link; the receiver holds its ACKs 20 ms.

mod common;

use common::{pair_tcps, until};
use iwarp_engine::{Access, Status};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::TcpSettings;
use iwarpd::port::memory::MemoryPort;
use std::time::Duration;

const WRITES: u64 = 40;

/// B sends `WRITES` 64 B Writes to A one at a time, each once the last was acknowledged;
/// returns B's segments resent.
fn resent_small_writes(peer_ack_delay: Duration, mac: u8) -> u64 {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 4, mac], [2, 0, 0, 0, 4, mac + 1], 1500);
    let receiver = TcpSettings {
        ack_delay: Duration::from_millis(20),
        ..TcpSettings::default()
    };
    let sender = TcpSettings {
        peer_ack_delay,
        ..TcpSettings::default()
    };
    let (mut a, mut b) = pair_tcps(pa, pb, Settings::default(), receiver, sender);
    let (ma, mb) = (a.mem(128, Access::ALL), b.mem(128, Access::ALL));
    for i in 1..=WRITES {
        let tag = i as u8;
        // SAFETY: the last octet of B's source; no transfer reads it now.
        unsafe { *mb.ptr.as_ptr().add(63) = tag };
        b.post_write(i, mb.sge(0, 64), &ma, 0);
        until(&mut a, &mut b, 20, |a, b| {
            ma.bytes(63, 1)[0] == tag
                && b.node
                    .conn_tcp(b.conn)
                    .is_some_and(|t| t.bytes_in_flight == 0)
                && a.wcs().is_empty()
        });
        assert!(b.wcs().iter().all(|w| w.status == Status::Success));
    }
    let tcp = b.node.conn_tcp(b.conn).unwrap();
    println!("peer ACK delay allowed {peer_ack_delay:?}: {tcp:?}");
    tcp.counters.retransmits
}

#[test]
fn small_writes_to_a_peer_that_delays_its_acks_are_sent_once() {
    // The default allowance (40 ms) covers the peer's 20 ms.
    assert_eq!(
        resent_small_writes(TcpSettings::default().peer_ack_delay, 1),
        0
    );
    // Without one, the timer (RTT plus its variance, over a link of microseconds) expires
    // before the delayed ACK comes: the Writes are resent.
    assert!(resent_small_writes(Duration::ZERO, 3) > 0);
}
