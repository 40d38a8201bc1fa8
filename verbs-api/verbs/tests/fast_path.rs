//! The fast path against a simulated daemon end: the test holds the other ends of the SQ, RQ
//! and CQ rings (in real shared-memory segments) and plays iwarpd.

use iwarp_abi::ring::{init_segment, ring_bytes, Consumer, Producer};
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use iwarp_abi::wqe::{cqe_flags, send_flags, Cqe, RecvWqe, SendOpcode, SendWqe};
use iwarp_verbs::{
    CompletionQueue, Error, MemoryRegion, QueuePair, RecvWr, SendWr, Sg, WcOpcode, WcStatus,
    WrOpcode,
};
use iwarp_verbs::{CqId, QpId, Stag};
use std::sync::Arc;

fn ring<T: iwarp_abi::ring::Slot>(
    name: &str,
    kind: SegmentKind,
    cap: usize,
) -> (Producer<T>, Consumer<T>) {
    let seg = Arc::new(
        Segment::create_anonymous(name, kind, ring_bytes::<T>(cap), HugePolicy::Off).unwrap(),
    );
    init_segment::<T>(&seg, cap).unwrap()
}

struct Daemon {
    sq: Consumer<SendWqe>,
    rq: Consumer<RecvWqe>,
    cq: Producer<Cqe>,
}

fn setup(sq_cap: usize) -> (QueuePair, Arc<CompletionQueue>, Daemon) {
    let (sq_p, sq_c) = ring::<SendWqe>("t-sq", SegmentKind::SendQueue, sq_cap);
    let (rq_p, rq_c) = ring::<RecvWqe>("t-rq", SegmentKind::RecvQueue, 8);
    let (cq_p, cq_c) = ring::<Cqe>("t-cq", SegmentKind::CompletionQueue, 16);
    let cq = Arc::new(CompletionQueue::from_ring(CqId(3), cq_c));
    let qp = QueuePair::from_rings(QpId(7), sq_p, Some(rq_p), cq.clone(), cq.clone(), 2, 16);
    (
        qp,
        cq,
        Daemon {
            sq: sq_c,
            rq: rq_c,
            cq: cq_p,
        },
    )
}

fn cqe(wr_id: u64, op: WcOpcode, status: WcStatus) -> Cqe {
    Cqe {
        wr_id,
        qp_num: 7,
        opcode: op as u8,
        status: status as u8,
        byte_len: 8,
        ..Cqe::default()
    }
}

#[test]
fn a_batch_rings_the_doorbell_once_and_encodes_every_operation() {
    let (qp, _cq, mut d) = setup(16);
    let mr = MemoryRegion::from_registration(Stag(0x100), 0x1000, 4096);
    let sg = [Sg {
        mr: &mr,
        offset: 8,
        len: 8,
    }];
    let ops = [
        WrOpcode::Send,
        WrOpcode::SendWithImm { imm: 5 },
        WrOpcode::RdmaWrite {
            rkey: Stag(9),
            remote_addr: 64,
        },
        WrOpcode::RdmaWriteWithImm {
            rkey: Stag(9),
            remote_addr: 64,
            imm: 6,
        },
        WrOpcode::RdmaRead {
            rkey: Stag(9),
            remote_addr: 128,
        },
        WrOpcode::FetchAdd {
            rkey: Stag(9),
            remote_addr: 0,
            add: 3,
        },
        WrOpcode::CmpSwap {
            rkey: Stag(9),
            remote_addr: 0,
            compare: 1,
            swap: 2,
        },
    ];
    let mut b = qp.batch();
    for (i, op) in ops.iter().enumerate() {
        b.send(&SendWr::new(i as u64, *op, &sg)).unwrap();
    }
    assert!(d.sq.is_empty(), "nothing visible before submit");
    b.submit().unwrap();
    assert_eq!(d.sq.len(), ops.len());
    assert_eq!(mr.posted(), ops.len() as u64);
    let want = [
        SendOpcode::Send,
        SendOpcode::SendImm,
        SendOpcode::Write,
        SendOpcode::WriteImm,
        SendOpcode::Read,
        SendOpcode::FetchAdd,
        SendOpcode::CmpSwap,
    ];
    for (i, op) in want.iter().enumerate() {
        let w = d.sq.pop().unwrap();
        assert_eq!(w.validate().unwrap(), *op);
        assert_eq!(w.wr_id, i as u64);
        assert!(w.has(send_flags::SIGNALED));
        assert_eq!(w.sgl()[0].to, 0x1008, "VA-based: base + offset");
        assert_eq!(w.sgl()[0].stag, 0x100);
        if i >= 2 {
            assert_eq!(w.remote_stag, 9);
        }
        if *op == SendOpcode::CmpSwap {
            assert_eq!(
                (w.compare_add, w.swap, w.compare_add_mask),
                (1, 2, u64::MAX)
            );
        }
    }
}

#[test]
fn a_region_cannot_be_deregistered_while_posted_work_uses_it() {
    let (qp, cq, mut d) = setup(16);
    let mr = MemoryRegion::from_registration(Stag(0x200), 0, 64);
    let sg = [Sg {
        mr: &mr,
        offset: 0,
        len: 64,
    }];
    let mut unsignaled = SendWr::new(1, WrOpcode::Send, &sg);
    unsignaled.signaled = false;
    qp.post_send(&unsignaled).unwrap();
    qp.post_send(&SendWr::new(2, WrOpcode::Send, &sg)).unwrap();
    qp.post_recv(&RecvWr {
        wr_id: 10,
        sg_list: &sg,
    })
    .unwrap();
    assert_eq!(d.rq.pop().unwrap().wr_id, 10);
    // Verbs section 8.1.3.1: only the signaled WR asks the daemon for a completion.
    let flags: Vec<(u64, bool)> = (0..2)
        .map(|_| d.sq.pop().unwrap())
        .map(|w| (w.wr_id, w.flags & send_flags::SIGNALED != 0))
        .collect();
    assert_eq!(flags, [(1, false), (2, true)]);
    assert_eq!(mr.posted(), 3);
    let (mr, e) = mr.deregister().unwrap_err();
    assert!(matches!(e, Error::MrInUse { posted: 3, .. }), "{e}");
    // The daemon completes wr 2 (which also retires unsignaled wr 1, in queue order) and the
    // receive.
    d.cq.push(cqe(2, WcOpcode::Send, WcStatus::Success))
        .unwrap();
    let mut r = cqe(10, WcOpcode::RecvImm, WcStatus::Success);
    r.flags = cqe_flags::IMM;
    r.imm = 77;
    d.cq.push(r).unwrap();
    let wc = cq.poll_one().unwrap().unwrap();
    assert_eq!((wc.wr_id, wc.status, wc.qp_num), (2, WcStatus::Success, 7));
    assert_eq!(mr.posted(), 1, "the receive still holds it");
    let wc = cq.poll_one().unwrap().unwrap();
    assert_eq!((wc.opcode, wc.imm_data), (WcOpcode::RecvImm, Some(77)));
    assert!(cq.poll_one().unwrap().is_none());
    mr.deregister().unwrap();
}

#[test]
fn failed_completions_are_data_and_corrupt_ones_are_errors() {
    let (_qp, cq, mut d) = setup(16);
    d.cq.push(cqe(4, WcOpcode::Write, WcStatus::WrFlushed))
        .unwrap();
    let wc = cq.poll_one().unwrap().unwrap();
    assert_eq!(wc.status, WcStatus::WrFlushed);
    let mut bad = cqe(5, WcOpcode::Send, WcStatus::Success);
    bad.status = 200;
    d.cq.push(bad).unwrap();
    assert!(matches!(cq.poll_one(), Err(Error::Abi(_))));
}

#[test]
fn bad_work_requests_are_refused_before_touching_the_ring() {
    let (qp, _cq, mut d) = setup(2);
    let mr = MemoryRegion::from_registration(Stag(0x300), 0, 64);
    let past = [Sg {
        mr: &mr,
        offset: 60,
        len: 8,
    }];
    assert!(matches!(
        qp.post_send(&SendWr::new(1, WrOpcode::Send, &past)),
        Err(Error::InvalidLength { .. })
    ));
    let one = Sg {
        mr: &mr,
        offset: 0,
        len: 4,
    };
    assert!(matches!(
        qp.post_send(&SendWr::new(1, WrOpcode::Send, &[one, one, one])),
        Err(Error::InvalidSgeCount { count: 3, max: 2 })
    ));
    let fa = WrOpcode::FetchAdd {
        rkey: Stag(1),
        remote_addr: 0,
        add: 1,
    };
    assert!(matches!(
        qp.post_send(&SendWr::new(1, fa, &[one])),
        Err(Error::InvalidWrOpcode)
    ));
    let mut wr = SendWr::new(1, WrOpcode::Send, &[]);
    wr.inline = Some(&[0; 17]);
    assert!(matches!(
        qp.post_send(&wr),
        Err(Error::InvalidInlineLength { len: 17, max: 16 })
    ));
    // Verbs section 9.3.1.1: a Read's Local Address is one buffer ("Invalid Scatter/Gather
    // list length"); inline data only where the WR carries a payload ("Invalid Modifier").
    let read = WrOpcode::RdmaRead {
        rkey: Stag(1),
        remote_addr: 0,
    };
    assert!(matches!(
        qp.post_send(&SendWr::new(1, read, &[one, one])),
        Err(Error::InvalidSgeCount { count: 2, max: 1 })
    ));
    let single = [one];
    let mut wr = SendWr::new(1, read, &single);
    wr.inline = Some(&[0; 4]);
    assert!(matches!(qp.post_send(&wr), Err(Error::InvalidWrOpcode)));
    // A batch larger than the free room is refused whole.
    let mut b = qp.batch();
    for i in 0..3 {
        b.send(&SendWr::new(i, WrOpcode::Send, &[one])).unwrap();
    }
    assert!(matches!(b.submit(), Err(Error::QueueFull)));
    assert!(d.sq.is_empty());
    assert_eq!(mr.posted(), 0);
}
