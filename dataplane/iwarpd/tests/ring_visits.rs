//! A turn reads the rings that were rung, not every ring: with 256 idle QPs whose rings name
//! their application's doorbell, idle turns visit none of them; a post visits its own QP; a
//! QP without a doorbell slot is read every turn; and an application that sets every bit of
//! its doorbell gets each of its QPs visited once, no more. An RQ with a slot of its own is
//! read when that slot is rung, not when its SQ's is.

use iwarp_abi::command::{reply_status, Command, ShmPath, Upcall, NO_SRQ};
use iwarp_abi::daemon_shm::{ControlSide, DaemonShm};
use iwarp_abi::doorbell::{bell_bytes, with_bell_ref, BellRef, Ringer, BELL_SLOTS};
use iwarp_abi::id::{CqId, PdId, QpId};
use iwarp_abi::notify::cq_segment_bytes;
use iwarp_abi::ring::{self, ring_bytes, Producer};
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use iwarp_abi::wqe::{Cqe, RecvWqe, SendWqe};
use iwarpd::host::service::Host;
use iwarpd::node::{Node, TcpSettings};
use iwarpd::port::memory::MemoryPort;
use std::net::Ipv4Addr;
use std::sync::Arc;

const RUNG_QPS: u32 = 256;
const DEPTH: usize = 16;

struct Daemon {
    host: Host,
    control: ControlSide,
    node: Node<MemoryPort>,
    rnic: iwarp_engine::Rnic,
    _peer: MemoryPort,
    req: u64,
}

impl Daemon {
    fn new() -> Daemon {
        let name = format!("iwarp-ring-visits-{}-{}", std::process::id(), unique());
        let side = DaemonShm::create(&name, None, 64, 64, HugePolicy::Off).unwrap();
        let control = DaemonShm::open(side.path().unwrap(), 1).unwrap();
        let (port, peer) = MemoryPort::pair([2, 0, 0, 0, 0x33, 1], [2, 0, 0, 0, 0x33, 2], 1500);
        let node = Node::new(
            port,
            Ipv4Addr::new(10, 33, 0, 1),
            24,
            TcpSettings::default(),
        );
        Daemon {
            host: Host::new(side, 1460),
            control,
            node,
            rnic: iwarp_engine::Rnic::new(),
            _peer: peer,
            req: 0,
        }
    }

    /// A daemon with PD 1 and CQ 1, and an application's doorbell (its segment and its
    /// ringing end; the CQ's segment kept mapped).
    fn with_doorbell() -> (Daemon, Arc<Segment>, Arc<Segment>, Ringer) {
        let mut d = Daemon::new();
        d.command(Command::AllocPd { pd: PdId(1) });
        let cq_seg = sealed("cq", SegmentKind::CompletionQueue, cq_segment_bytes(256));
        ring::init_segment::<Cqe>(&cq_seg, 256).unwrap();
        d.command(Command::CreateCq {
            cq: CqId(1),
            depth: 256,
            ring: path(&cq_seg),
        });
        let bell_seg = sealed("bell", SegmentKind::Doorbell, bell_bytes(BELL_SLOTS));
        let ringer = Ringer::init_segment(&bell_seg).unwrap();
        (d, cq_seg, bell_seg, ringer)
    }

    /// Sends `c` and serves until its reply comes.
    fn command(&mut self, c: Command) {
        self.req += 1;
        self.control.send_command(0, self.req, &c).unwrap();
        for _ in 0..100 {
            self.host.serve(&mut self.node, &mut self.rnic);
            while let Some(u) = self.control.recv_upcall(0) {
                if let Ok(Upcall::Reply { req_id, status, .. }) = u {
                    if req_id == self.req {
                        assert_eq!(status, reply_status::OK, "{c:?}");
                        return;
                    }
                }
            }
        }
        panic!("no reply to {c:?}");
    }

    /// One turn's ring reading; the visits it made.
    fn turn(&mut self) -> u64 {
        let before = self.host.ring_visits();
        self.host.pump_rings(&mut self.rnic);
        self.host.ring_visits() - before
    }
}

/// A number no other name of this process used: the tests run side by side.
fn unique() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn path(seg: &Segment) -> ShmPath {
    ShmPath::new(seg.path().unwrap()).unwrap()
}

fn sealed(what: &str, kind: SegmentKind, len: usize) -> Arc<Segment> {
    let name = format!(
        "iwarp-ring-visits-{}-{}-{what}",
        std::process::id(),
        unique()
    );
    Arc::new(Segment::create_sealed(&name, kind, len, HugePolicy::Off).unwrap())
}

/// A QP's application side: its segments (kept mapped) and the RQ's writing end.
struct AppQp {
    _sq: Arc<Segment>,
    _rq_seg: Arc<Segment>,
    rq: Producer<RecvWqe>,
}

/// Creates QP `qp` with rings of its own, naming `bell` slot `slot` in its SQ segment when
/// given, and slot `rq_slot` of the same doorbell in its RQ segment when given too.
fn create_qp(
    d: &mut Daemon,
    qp: u32,
    bell: Option<(&Segment, u32)>,
    rq_slot: Option<u32>,
) -> AppQp {
    let sq_len = ring_bytes::<SendWqe>(DEPTH);
    let sq_seg = sealed(
        &format!("sq{qp}"),
        SegmentKind::SendQueue,
        with_bell_ref(sq_len),
    );
    ring::init_segment::<SendWqe>(&sq_seg, DEPTH).unwrap();
    if let Some((b, slot)) = bell {
        let r = BellRef {
            slot,
            path: path(b),
        };
        assert!(r.write(&sq_seg, sq_len));
    }
    let rq_len = ring_bytes::<RecvWqe>(DEPTH);
    let rq_seg = sealed(
        &format!("rq{qp}"),
        SegmentKind::RecvQueue,
        with_bell_ref(rq_len),
    );
    let (rq, _) = ring::init_segment::<RecvWqe>(&rq_seg, DEPTH).unwrap();
    if let (Some((b, _)), Some(slot)) = (bell, rq_slot) {
        let r = BellRef {
            slot,
            path: path(b),
        };
        assert!(r.write(&rq_seg, rq_len));
    }
    d.command(Command::CreateQp {
        qp: QpId(qp),
        pd: PdId(1),
        send_cq: CqId(1),
        recv_cq: CqId(1),
        srq: NO_SRQ,
        sq_depth: DEPTH as u32,
        rq_depth: DEPTH as u32,
        sq: path(&sq_seg),
        rq: path(&rq_seg),
    });
    AppQp {
        _sq: sq_seg,
        _rq_seg: rq_seg,
        rq,
    }
}

/// The daemon took what the RQ ring held.
fn drained(q: &mut AppQp) -> bool {
    q.rq.free_slots() == q.rq.capacity()
}

#[test]
fn a_turn_visits_only_the_rings_that_were_rung() {
    let (mut d, _cq_seg, bell_seg, ringer) = Daemon::with_doorbell();
    let mut qps: Vec<AppQp> = (0..RUNG_QPS)
        .map(|i| create_qp(&mut d, 100 + i, Some((&bell_seg, i)), None))
        .collect();
    // One QP names no doorbell (an older library, or slots run out): read every turn.
    let mut plain = create_qp(&mut d, 999, None, None);

    // Each new QP is visited once after its creation; then idle turns visit the plain QP alone.
    assert_eq!(d.turn(), RUNG_QPS as u64 + 1, "the new QPs, once");
    for _ in 0..100 {
        assert_eq!(
            d.turn(),
            1,
            "an idle turn visits only the QP without a doorbell"
        );
    }

    // A receive on one QP, rung: that QP is visited, and its ring drained.
    let wqe = RecvWqe::new(1, &[]).unwrap();
    qps[7].rq.push(wqe).unwrap();
    ringer.ring(7);
    assert_eq!(d.turn(), 2, "the rung QP and the plain one");
    assert!(
        drained(&mut qps[7]),
        "the rung QP's receive reached the engine"
    );
    assert_eq!(d.turn(), 1, "taken: not visited again");

    // Rung many times before a turn: listed once.
    qps[8].rq.push(wqe).unwrap();
    for _ in 0..5 {
        ringer.ring(8);
    }
    assert_eq!(d.turn(), 2);
    assert!(drained(&mut qps[8]));

    // The plain QP's posts are seen without a doorbell.
    plain.rq.push(wqe).unwrap();
    d.turn();
    assert!(drained(&mut plain));

    // A post not rung: idle turns do not read its ring (the library always rings).
    qps[9].rq.push(wqe).unwrap();
    for _ in 0..10 {
        assert_eq!(d.turn(), 1);
    }
    assert!(
        !drained(&mut qps[9]),
        "read without a doorbell: not what this test expects"
    );
    ringer.ring(9);
    assert_eq!(d.turn(), 2);
    assert!(drained(&mut qps[9]));

    // A hostile application sets every bit of its bitmaps: each of its QPs is visited once,
    // and no slot it has not attached is.
    assert!(bell_seg.write_at(0, &vec![0xff; bell_bytes(BELL_SLOTS)]));
    assert_eq!(
        d.turn(),
        RUNG_QPS as u64 + 1,
        "every QP of its application, once"
    );
    assert_eq!(d.turn(), 1, "and then idle again");

    // Destroyed QPs leave the doorbell's table and the plain list.
    d.command(Command::DestroyQp { qp: QpId(999) });
    d.command(Command::DestroyQp { qp: QpId(100) });
    assert_eq!(d.turn(), 0, "no QP without a doorbell left");
    ringer.ring(0);
    ringer.ring(1);
    assert_eq!(d.turn(), 1, "slot 0 names nothing any more");
}

/// A QP whose RQ names a slot of its own: its SQ's doorbell does not read the RQ's ring (a
/// line the application writes, met cold), the RQ's own does, alone; destroyed, the QP
/// gives the RQ's slot back.
#[test]
fn an_rq_with_a_slot_of_its_own_is_read_only_when_that_slot_is_rung() {
    let (mut d, _cq_seg, bell_seg, ringer) = Daemon::with_doorbell();
    let mut q = create_qp(&mut d, 100, Some((&bell_seg, 0)), Some(1));
    assert_eq!(d.turn(), 1, "the new QP, once");
    assert_eq!(d.turn(), 0);

    let wqe = RecvWqe::new(1, &[]).unwrap();
    q.rq.push(wqe).unwrap();
    ringer.ring(0);
    assert_eq!(d.turn(), 1, "the SQ's doorbell visits the QP");
    assert!(!drained(&mut q), "but does not read its RQ");
    ringer.ring(1);
    assert_eq!(d.turn(), 1, "the RQ's own doorbell: one visit");
    assert!(drained(&mut q), "the receive reached the engine");
    assert_eq!(d.turn(), 0, "taken: not visited again");

    // Both rung in one turn: one visit, both rings read.
    q.rq.push(wqe).unwrap();
    ringer.ring(0);
    ringer.ring(1);
    assert_eq!(d.turn(), 1);
    assert!(drained(&mut q));

    d.command(Command::DestroyQp { qp: QpId(100) });
    ringer.ring(1);
    assert_eq!(d.turn(), 0, "slot 1 names nothing any more");
}
