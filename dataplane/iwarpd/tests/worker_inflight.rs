//! What a node's connections have in flight together stays within `tcp.worker_inflight`,
//! shared fairly, and what a turn sends within one connection's window: every octet in
//! flight is held twice (the sending ring, the resend copy) until acknowledged, and streams
//! that each kept their own full window, or a turn that sent every stream's part at once,
//! held more than the cache, so adding streams lowered the total.

mod common;

use common::streams::{slow_reader, Outcome, Streams};
use common::{End, A_IP, B_IP};
use iwarpd::node::TcpSettings;
use iwarpd::port::memory::MemoryPort;

const STREAMS: usize = 8;
const WRITES: usize = 24;
const SEGMENT: usize = 1460;

/// `streams` streams of 64 KiB Writes from B to an A that reads every `slower`th of B's
/// turns.
fn run_with(worker_inflight: usize, streams: usize, slower: usize) -> Outcome {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 0x25, 1], [2, 0, 0, 0, 0x25, 2], 1500);
    let tcp = TcpSettings {
        worker_inflight,
        ..common::patient_tcp()
    };
    assert_eq!(tcp.max_inflight, 256 << 10);
    let mut a = End::with_tcp(pa, A_IP, tcp);
    let mut b = End::with_tcp(pb, B_IP, tcp);
    let s = Streams {
        streams,
        writes: WRITES,
        write: 64 << 10,
        depth: 8,
        slower,
        port: 7400,
        local_port: 43000,
    };
    slow_reader(&mut a, &mut b, s, |_| 0)
}

/// Eight streams from B to an A that reads every fourth of B's turns, so that
/// acknowledgements come late and every stream would fill its window.
fn run(worker_inflight: usize) -> Outcome {
    run_with(worker_inflight, STREAMS, 4)
}

#[test]
fn streams_share_the_workers_inflight_bound_and_stay_within_it() {
    // Unbounded (the bound at every stream's own window), the streams reach past a
    // quarter of their windows together: what the bound is there to stop.
    let free = run(STREAMS * (256 << 10));
    println!("bound at 2 MiB: {free:?}");
    assert!(
        free.most_in_flight > 512 << 10,
        "unbounded streams had only {} octets in flight",
        free.most_in_flight
    );
    let bound = 256 << 10;
    let out = run(bound);
    println!("bound at 256 KiB: {out:?}");
    // A connection may take what the others leave, and never less than four segments.
    assert!(
        out.most_in_flight <= bound + STREAMS * 4 * SEGMENT,
        "{} octets in flight",
        out.most_in_flight
    );
    assert_eq!(out.resent, 0, "segments resent");
    out.assert_shared_evenly(WRITES);
}

#[test]
fn a_turn_sends_one_connections_window_and_each_of_many_streams_its_equal_part() {
    // Sixteen streams under the default 1 MiB bound, A reading every turn: unbudgeted, each
    // turn would send every stream's 64 KiB part, 1 MiB.
    const MANY: usize = 16;
    let bound = 1 << 20;
    let out = run_with(bound, MANY, 1);
    println!("{MANY} streams: {out:?}");
    // At most `max_inflight` (256 KiB) of FPDUs a turn; on the wire with the frames'
    // headers (66 octets a segment of 1,448 at most) and the ACKs.
    let max_inflight = 256 << 10;
    assert!(
        out.most_sent_a_turn <= max_inflight * 21 / 20,
        "{} octets sent in one turn",
        out.most_sent_a_turn
    );
    // However few a turn reaches, each stream holds its equal part of the bound (and at
    // least four segments), not the larger part a count of the streams that sent lately
    // would give it.
    assert!(
        out.most_in_flight_one <= (bound / MANY).max(4 * SEGMENT) + SEGMENT,
        "a stream had {} octets in flight",
        out.most_in_flight_one
    );
    assert_eq!(out.resent, 0, "segments resent");
    out.assert_shared_evenly(WRITES);
}
