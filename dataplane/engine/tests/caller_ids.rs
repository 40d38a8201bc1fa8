//! The engine keys QPs, CQs and S-RQs by the caller's ids (the daemon passes iwarp-control's)
//! and names them so in completions and events.

use iwarp_engine::{
    AsyncEvent, ConnParams, CqId, PdId, QpCaps, QpId, QpState, RecvWr, Rnic, SrqId, Status,
    VerbsError, WorkCompletion,
};

fn caps(srq: Option<SrqId>) -> QpCaps {
    QpCaps {
        sq_depth: 4,
        rq_depth: 4,
        srq,
    }
}

fn events(rnic: &mut Rnic) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| rnic.poll_event()).collect()
}

#[test]
fn completions_and_events_carry_the_callers_ids() {
    let mut rnic = Rnic::new();
    let (pd, cq, qp) = (PdId(77), CqId(0x00ab_cdef), QpId(0x1234_5678));
    rnic.create_cq_at(cq, 2).unwrap();
    assert_eq!(
        rnic.create_cq_at(cq, 2),
        Err(VerbsError::InvalidCq),
        "id in use"
    );
    rnic.create_qp_at(qp, pd, cq, cq, caps(None)).unwrap();
    assert_eq!(
        rnic.create_qp_at(qp, pd, cq, cq, caps(None)),
        Err(VerbsError::InvalidQp),
        "id in use"
    );
    assert_eq!(
        rnic.create_qp_at(QpId(5), pd, CqId(1), cq, caps(None)),
        Err(VerbsError::InvalidCq),
        "no such CQ"
    );
    rnic.connect(qp, ConnParams::new(false, 4, 4, 1460))
        .unwrap();
    for wr_id in 0..3 {
        rnic.post_recv(qp, RecvWr::new(wr_id, &[])).unwrap();
    }
    rnic.modify_qp(qp, QpState::Error).unwrap();
    let mut wcs = [WorkCompletion::default(); 4];
    let n = rnic.poll_cq(cq, &mut wcs).unwrap();
    assert_eq!(n, 2, "the CQ holds two");
    assert!(wcs[..n]
        .iter()
        .all(|w| w.qp == qp && w.status == Status::WrFlushed));
    // The third flushed receive overflowed the CQ (Verbs section 8.3.3).
    assert_eq!(
        events(&mut rnic),
        [AsyncEvent::CqOverflow { cq }, AsyncEvent::QpError { qp }]
    );
}

#[test]
fn a_destroyed_id_is_gone_and_its_slot_serves_another() {
    let mut rnic = Rnic::new();
    let (pd, cq) = (PdId(1), CqId(9));
    rnic.create_cq_at(cq, 16).unwrap();
    rnic.create_qp_at(QpId(100), pd, cq, cq, caps(None))
        .unwrap();
    rnic.destroy_qp(QpId(100)).unwrap();
    assert_eq!(rnic.qp_state(QpId(100)), None);
    assert_eq!(
        rnic.post_recv(QpId(100), RecvWr::new(1, &[])),
        Err(VerbsError::InvalidQp)
    );
    rnic.create_qp_at(QpId(101), pd, cq, cq, caps(None))
        .unwrap();
    assert_eq!(rnic.qp_state(QpId(101)), Some(QpState::Idle));
    assert_eq!(
        rnic.qp_state(QpId(100)),
        None,
        "the reused slot is not the old id"
    );
    // An id freed may be given again.
    rnic.create_qp_at(QpId(100), pd, cq, cq, caps(None))
        .unwrap();
    assert_eq!(
        rnic.destroy_cq(cq),
        Err(VerbsError::InvalidCq),
        "QPs use it"
    );
}

#[test]
fn srqs_are_named_by_the_callers_id() {
    let mut rnic = Rnic::new();
    let (pd, cq, srq, qp) = (PdId(3), CqId(4), SrqId(0xfeed), QpId(6));
    rnic.create_cq_at(cq, 16).unwrap();
    rnic.create_srq_at(srq, pd, 8).unwrap();
    assert_eq!(
        rnic.create_qp_at(qp, PdId(99), cq, cq, caps(Some(srq))),
        Err(VerbsError::InvalidSrq),
        "an S-RQ of another PD"
    );
    rnic.create_qp_at(qp, pd, cq, cq, caps(Some(srq))).unwrap();
    assert_eq!(rnic.destroy_srq(srq), Err(VerbsError::InvalidSrq), "in use");
    rnic.post_srq_recv(srq, RecvWr::new(1, &[])).unwrap();
    rnic.arm_srq_limit(srq, 1).unwrap();
    assert_eq!(rnic.arm_srq_limit(SrqId(1), 1), Err(VerbsError::InvalidSrq));
    rnic.destroy_qp(qp).unwrap();
    rnic.destroy_srq(srq).unwrap();
    assert_eq!(
        rnic.post_srq_recv(srq, RecvWr::new(2, &[])),
        Err(VerbsError::InvalidSrq)
    );
}
