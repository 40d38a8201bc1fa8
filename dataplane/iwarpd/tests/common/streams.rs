//! Many streams from B through one port to an A that reads more slowly than B sends, every
//! byte checked: what a port's back-pressure is tested with.

use super::{connect_many, End};
use iwarp_engine::{Access, QpCaps, QpId, SendOp, SendWr, Status};
use iwarpd::port::Port;
use std::time::{Duration, Instant};

/// The shape of a run.
#[derive(Clone, Copy)]
pub struct Streams {
    pub streams: usize,
    /// Writes per stream, each `write` octets, `depth` posted at a time.
    pub writes: usize,
    pub write: usize,
    pub depth: usize,
    /// B takes this many turns for each of A's.
    pub slower: usize,
    /// A listens from this TCP port on, B connects from `local_port` on.
    pub port: u16,
    pub local_port: u16,
}

/// What a run saw.
#[derive(Debug)]
pub struct Outcome {
    /// The most frames B's port held at once (as `held` reads them).
    pub most_held: usize,
    /// Frames B's port dropped during the run.
    pub dropped: u64,
    /// Segments B's connections sent twice.
    pub resent: u64,
    /// The most octets B's connections had in flight together, seen after each of B's turns.
    pub most_in_flight: usize,
    /// The most octets one of B's connections had in flight, seen after each of B's turns
    /// while every stream had Writes left (fewer streams may each take more).
    pub most_in_flight_one: usize,
    /// The most octets B's port sent in one of B's turns.
    pub most_sent_a_turn: u64,
    /// Writes done by every stream when the first stream finished all of its.
    pub at_first_finish: Vec<usize>,
}

impl Outcome {
    /// Even sharing: when the first stream was through its `writes`, every other was at
    /// least half way.
    pub fn assert_shared_evenly(&self, writes: usize) {
        for (i, &d) in self.at_first_finish.iter().enumerate() {
            assert!(
                d * 2 >= writes,
                "stream {i} had {d} of {writes} Writes done when the first finished: {:?}",
                self.at_first_finish
            );
        }
    }
}

/// Runs `s` from B to A, checking every completion and, at the end, every byte; `held`
/// reads how many frames B's port holds.
pub fn slow_reader<P: Port, Q: Port>(
    a: &mut End<P>,
    b: &mut End<Q>,
    s: Streams,
    held: impl Fn(&Q) -> usize,
) -> Outcome {
    let caps = QpCaps {
        sq_depth: s.depth,
        rq_depth: 4,
        srq: None,
    };
    let conns = connect_many(a, b, s.streams, caps, s.port, s.local_port);
    let dropped_before = b.node.port().dropped();
    let deadline = Instant::now() + Duration::from_secs(240);
    let a_mem = a.mem(s.write, Access::ALL);
    let b_mem = b.mem(s.write, Access::ALL);
    b_mem.fill(7);
    let qp_index = |qp: QpId| conns.iter().position(|c| c.2 == qp).unwrap();
    let mut posted = vec![0usize; s.streams];
    let mut done = vec![0usize; s.streams];
    let mut at_first_finish = None;
    let post = |b: &mut End<Q>, i: usize, posted: &mut [usize]| {
        let op = SendOp::Write {
            remote_stag: a_mem.stag,
            remote_to: a_mem.sge(0, 0).to,
        };
        b.rnic
            .post_send(
                conns[i].2,
                SendWr::new(i as u64, op, &[b_mem.sge(0, s.write)]),
            )
            .unwrap();
        posted[i] += 1;
    };
    for i in 0..s.streams {
        for _ in 0..s.depth {
            post(b, i, &mut posted);
        }
    }
    let mut turn = 0usize;
    let mut most_held = 0;
    let mut most_in_flight = 0;
    let mut most_in_flight_one = 0;
    let mut most_sent_a_turn = 0;
    while done.iter().any(|&d| d < s.writes) {
        assert!(Instant::now() < deadline, "streaming: {done:?}");
        let sent_before = b.node.counters().tx_bytes;
        b.node.poll(&mut b.rnic);
        most_sent_a_turn = most_sent_a_turn.max(b.node.counters().tx_bytes - sent_before);
        most_held = most_held.max(held(b.node.port()));
        let in_flight: Vec<usize> = conns
            .iter()
            .filter_map(|c| b.node.conn_tcp(c.1))
            .map(|t| t.bytes_in_flight)
            .collect();
        most_in_flight = most_in_flight.max(in_flight.iter().sum());
        if at_first_finish.is_none() {
            most_in_flight_one = most_in_flight_one.max(in_flight.into_iter().max().unwrap_or(0));
        }
        turn += 1;
        if turn.is_multiple_of(s.slower) {
            a.node.poll(&mut a.rnic);
        }
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success);
            let i = qp_index(w.qp);
            assert_eq!(w.wr_id, i as u64);
            done[i] += 1;
            if done[i] == s.writes && at_first_finish.is_none() {
                at_first_finish = Some(done.clone());
            }
            if posted[i] < s.writes {
                post(b, i, &mut posted);
            }
        }
    }
    assert!(a_mem.bytes(0, s.write) == b_mem.bytes(0, s.write));
    let resent = conns
        .iter()
        .map(|c| b.node.conn_tcp(c.1).expect("tracked").counters.retransmits)
        .sum();
    Outcome {
        most_held,
        dropped: b.node.port().dropped() - dropped_before,
        resent,
        most_in_flight,
        most_in_flight_one,
        most_sent_a_turn,
        at_first_finish: at_first_finish.expect("every stream finished"),
    }
}
