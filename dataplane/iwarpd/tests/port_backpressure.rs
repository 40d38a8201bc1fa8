//! Many streams through one Unix port to a peer that reads more slowly than they send: the
//! port pushes back on TCP instead of queueing or dropping what TCP hands it, so its queue
//! stays a few dozen frames whatever the streams' windows add up to, no frame is dropped,
//! no segment goes twice, and the streams share the port evenly.

mod common;

use common::{End, A_IP, B_IP};
use iwarp_engine::{Access, QpCaps, QpId, SendOp, SendWr, Status};
use iwarpd::node::TcpSettings;
use iwarpd::port::unix::{UnixPort, PAUSE_AT};
use iwarpd::port::Port;
use std::time::{Duration, Instant};

const STREAMS: usize = 24;
/// Writes per stream, each `WRITE` octets, `DEPTH` posted at a time.
const WRITES: usize = 48;
const WRITE: usize = 64 << 10;
const DEPTH: usize = 8;
/// B (the sender) takes this many turns for each of A's.
const SLOWER: usize = 3;

#[test]
fn many_streams_to_a_slow_reader_drop_nothing_resend_nothing_and_share_the_port() {
    let dir = common::segment_dir("iwarp-backpressure");
    let pa = UnixPort::open(dir.path(), [2, 0, 0, 0, 0x24, 1], 1500).unwrap();
    let pb = UnixPort::open(dir.path(), [2, 0, 0, 0, 0x24, 2], 1500).unwrap();
    // The streams' windows together (24 × 256 KiB in flight) are many times what the
    // port's socket buffer holds. A user timeout a loaded machine's pauses cannot reach, and
    // the longest retransmission floor (the peer's socket buffer alone is a few hundred
    // milliseconds of a debug build's reading): a resend here is the port's queue growing
    // with the streams, not the test's speed.
    let tcp = TcpSettings {
        user_timeout: Duration::from_secs(600),
        min_rto_us: 1_000_000,
        ..TcpSettings::default()
    };
    let mut a = End::with_tcp(pa, A_IP, tcp);
    let mut b = End::with_tcp(pb, B_IP, tcp);
    let caps = QpCaps {
        sq_depth: DEPTH,
        rq_depth: 4,
        srq: None,
    };
    let conns = common::connect_many(&mut a, &mut b, STREAMS, caps, 7300, 42000);
    let deadline = Instant::now() + Duration::from_secs(240);

    let a_mem = a.mem(WRITE, Access::ALL);
    let b_mem = b.mem(WRITE, Access::ALL);
    b_mem.fill(7);
    let qp_index = |qp: QpId| conns.iter().position(|c| c.2 == qp).unwrap();
    let mut posted = [0usize; STREAMS];
    let mut done = [0usize; STREAMS];
    // Writes done by every stream when the first stream finished all of its.
    let mut at_first_finish = None;
    let post = |b: &mut End<UnixPort>, i: usize, posted: &mut [usize; STREAMS]| {
        let op = SendOp::Write {
            remote_stag: a_mem.stag,
            remote_to: a_mem.sge(0, 0).to,
        };
        b.rnic
            .post_send(
                conns[i].2,
                SendWr::new(i as u64, op, &[b_mem.sge(0, WRITE)]),
            )
            .unwrap();
        posted[i] += 1;
    };
    for i in 0..STREAMS {
        for _ in 0..DEPTH {
            post(&mut b, i, &mut posted);
        }
    }
    let mut turn = 0usize;
    let mut most_held = 0;
    while done.iter().any(|&d| d < WRITES) {
        assert!(Instant::now() < deadline, "streaming: {done:?}");
        b.node.poll(&mut b.rnic);
        most_held = most_held.max(b.node.port().held());
        turn += 1;
        if turn.is_multiple_of(SLOWER) {
            a.node.poll(&mut a.rnic);
        }
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success);
            let i = qp_index(w.qp);
            assert_eq!(w.wr_id, i as u64);
            done[i] += 1;
            if done[i] == WRITES && at_first_finish.is_none() {
                at_first_finish = Some(done);
            }
            if posted[i] < WRITES {
                post(&mut b, i, &mut posted);
            }
        }
    }
    assert!(a_mem.bytes(0, WRITE) == b_mem.bytes(0, WRITE));

    let resent: u64 = conns
        .iter()
        .map(|c| b.node.conn_tcp(c.1).expect("tracked").counters.retransmits)
        .sum();
    for c in &conns {
        let t = b.node.conn_tcp(c.1).unwrap();
        println!(
            "{:?} srtt {:?} rto {:?} cwnd {}",
            t.counters, t.srtt, t.rto, t.cwnd
        );
    }
    let at_first_finish = at_first_finish.expect("every stream finished");
    println!(
        "{STREAMS} streams × {WRITES} × {WRITE} B: most frames held by the port {most_held}, \
         port drops {}, resent {resent}, Writes done when the first stream finished: \
         {at_first_finish:?}",
        b.node.port().dropped()
    );
    // A round over the sockets opened below the bound adds a segment a stream (two where
    // the device cuts a resend's new part into a segment of its own).
    assert!(
        most_held <= PAUSE_AT + 2 * STREAMS,
        "the port held {most_held} frames"
    );
    assert_eq!(b.node.port().dropped(), 0, "frames dropped by the port");
    assert_eq!(resent, 0, "segments resent");
    // Even sharing: when the first stream is through, every other is at least half way.
    for (i, &d) in at_first_finish.iter().enumerate() {
        assert!(
            d * 2 >= WRITES,
            "stream {i} had {d} of {WRITES} Writes done when the first finished: \
             {at_first_finish:?}"
        );
    }
}
