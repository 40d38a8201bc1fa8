//! Relay mode (the control plane runs MPA, the node carries the bytes) over the embedded
//! port: many connections opened and closed leave no state behind in either node.

mod common;

use common::{segment_dir, End, A_IP, B_IP};
use iwarpd::node::NodeEvent;
use iwarpd::port::unix::UnixPort;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

/// Polls both nodes until `done` holds for the events seen so far.
fn until(
    a: &mut End<UnixPort>,
    b: &mut End<UnixPort>,
    seen: &mut Vec<(char, NodeEvent)>,
    done: impl Fn(&[(char, NodeEvent)]) -> bool,
) {
    let t = Instant::now();
    while !done(seen) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "stuck; events {seen:?}"
        );
        a.node.poll();
        b.node.poll();
        seen.extend(a.node.take_events().map(|e| ('a', e)));
        seen.extend(b.node.take_events().map(|e| ('b', e)));
    }
}

#[test]
fn a_hundred_connections_opened_and_closed_leave_nothing_behind() {
    let dir = segment_dir("iwarp-relay");
    let mut a = End::new(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 8, 0x0a], 1500).unwrap(),
        A_IP,
    );
    let mut b = End::new(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 8, 0x0b], 1500).unwrap(),
        B_IP,
    );
    a.node.relay_listen(7200, 4).unwrap();
    for round in 1..=100u32 {
        b.node
            .relay_connect(round, SocketAddrV4::new(A_IP, 7200))
            .unwrap();
        let mut seen = Vec::new();
        until(&mut a, &mut b, &mut seen, |s| {
            s.iter()
                .any(|e| matches!(e, ('a', NodeEvent::Incoming { .. })))
                && s.iter()
                    .any(|e| matches!(e, ('b', NodeEvent::Established { conn }) if *conn == round))
        });
        let incoming = seen
            .iter()
            .find_map(|e| match e {
                ('a', NodeEvent::Incoming { conn, .. }) => Some(*conn),
                _ => None,
            })
            .unwrap();
        // Alternate who closes first; both ends hear the end.
        if round % 2 == 0 {
            b.node.relay_close(round).unwrap();
        } else {
            a.node.relay_close(incoming).unwrap();
        }
        until(&mut a, &mut b, &mut seen, |s| {
            s.iter()
                .any(|e| matches!(e, ('a', NodeEvent::Closed { .. })))
                && s.iter()
                    .any(|e| matches!(e, ('b', NodeEvent::Closed { .. })))
        });
        // The end that did not close first closes its half too (as control does).
        let _ = a.node.relay_close(incoming);
        let _ = b.node.relay_close(round);
    }
    // Every socket is reclaimed and every connection forgotten.
    let t = Instant::now();
    while a.node.tracked_connections() + b.node.tracked_connections() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "still tracked: a {} b {}",
            a.node.tracked_connections(),
            b.node.tracked_connections()
        );
        a.node.poll();
        b.node.poll();
        std::thread::sleep(Duration::from_millis(1));
    }
}
