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

/// On a port several workers share, a worker that stops listening keeps the frames of the
/// connections it accepted there (they would otherwise go to worker 0, whose stack knows
/// nothing of them): after `relay_unlisten`, bytes still arrive on the accepted connection.
#[test]
fn an_accepted_connection_outlives_its_listener_on_a_shared_port() {
    use iwarpd::port::steer::Steering;
    let dir = segment_dir("iwarp-relay-steer");
    // A's two workers on one socket, as the daemon runs them: worker 0 receives and steers,
    // worker 1 sends on its own handle and listens. A frame steered to worker 0 meets a
    // stack that knows nothing of the connection and answers with a reset.
    let port = UnixPort::open(dir.path(), [2, 0, 0, 0, 8, 0x1a], 1500).unwrap();
    let sender = port.sender().unwrap();
    let mut views = Steering::share(vec![port, sender], false).unwrap();
    let mut a = End::new(views.pop().unwrap(), A_IP);
    let mut a0 = End::new(views.pop().unwrap(), A_IP);
    let mut b = End::new(
        UnixPort::open(dir.path(), [2, 0, 0, 0, 8, 0x1b], 1500).unwrap(),
        B_IP,
    );
    a.node.relay_listen(7201, 1).unwrap();
    b.node
        .relay_connect(1, SocketAddrV4::new(A_IP, 7201))
        .unwrap();
    let t = Instant::now();
    let mut incoming = None;
    let mut established = false;
    while incoming.is_none() || !established {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no connection: a0 {:?} a1 {:?} b {:?}",
            a0.node.counters(),
            a.node.counters(),
            b.node.counters()
        );
        a0.node.poll();
        a.node.poll();
        b.node.poll();
        for e in a.node.take_events() {
            if let NodeEvent::Incoming { conn, .. } = e {
                incoming = Some(conn);
            }
        }
        established |= b
            .node
            .take_events()
            .any(|e| matches!(e, NodeEvent::Established { conn: 1 }));
    }
    assert!(a.node.relay_unlisten(7201));
    // An MPA Request (RFC 5044 section 7.1: the key, flags with C set, revision 1, no private
    // data), which the relay hands up whole.
    let mut request = b"MPA ID Req Frame".to_vec();
    request.extend([0x40, 1, 0, 0]);
    b.node.relay_send(1, &request).unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    while got.len() < request.len() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the accepted connection lost its frames with its listener ({got:?})"
        );
        a0.node.poll();
        a.node.poll();
        b.node.poll();
        for e in a.node.take_events() {
            if let NodeEvent::Bytes { data, .. } = e {
                got.extend(data);
            }
        }
    }
    assert_eq!(got, request);
}
