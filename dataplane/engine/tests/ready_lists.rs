//! The ready lists that let a caller's turn visit only the QPs and CQs with work: with a
//! thousand idle QPs, posting on a few lists exactly those, once each.

use iwarp_engine::{ConnParams, CqId, QpCaps, QpId, QpState, Rnic, SendOp, SendWr, WorkCompletion};

fn send(id: u64) -> SendWr {
    SendWr::new(
        id,
        SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        &[],
    )
}

fn drain_tx(rnic: &mut Rnic) -> Vec<QpId> {
    std::iter::from_fn(|| rnic.next_tx_ready()).collect()
}

fn drain_cq(rnic: &mut Rnic) -> Vec<CqId> {
    std::iter::from_fn(|| rnic.next_cq_ready()).collect()
}

/// 1,000 connected QPs, each with its own CQ: after the connects are taken, posting on
/// three of them (one twice) lists those three, in posting order, once each, and the
/// completions of the one that sends list its CQ alone.
#[test]
fn only_qps_with_work_are_listed() {
    let mut rnic = Rnic::new();
    let pd = rnic.alloc_pd();
    let caps = QpCaps {
        sq_depth: 8,
        rq_depth: 8,
        srq: None,
    };
    let mut qps = Vec::new();
    for _ in 0..1000 {
        let cq = rnic.create_cq(16);
        let qp = rnic.create_qp(pd, cq, cq, caps).unwrap();
        rnic.connect(qp, ConnParams::new(false, 4, 4, 1460))
            .unwrap();
        qps.push((qp, cq));
    }
    assert_eq!(
        drain_tx(&mut rnic).len(),
        1000,
        "each connect lists its QP once"
    );
    assert!(drain_tx(&mut rnic).is_empty());
    assert!(drain_cq(&mut rnic).is_empty(), "no completion yet");

    let (a, b, c) = (qps[17], qps[500], qps[999]);
    rnic.post_send(b.0, send(1)).unwrap();
    rnic.post_send(a.0, send(2)).unwrap();
    rnic.post_send(b.0, send(3)).unwrap();
    rnic.modify_qp(c.0, QpState::Closing).unwrap();
    assert_eq!(drain_tx(&mut rnic), vec![b.0, a.0, c.0]);

    let mut wire = [0u8; 1460];
    while rnic.poll_transmit(a.0, &mut wire).is_some() {}
    assert!(drain_tx(&mut rnic).is_empty(), "transmitting marks nothing");
    // A zero-length Send completes once it is on the wire (no ORQ credit to wait for).
    assert_eq!(drain_cq(&mut rnic), vec![a.1]);
    let mut wcs = [WorkCompletion::default(); 4];
    assert_eq!(rnic.poll_cq(a.1, &mut wcs).unwrap(), 1);
    assert!(!rnic.cqs_ready());
    rnic.mark_cq(a.1);
    rnic.mark_cq(a.1);
    assert_eq!(drain_cq(&mut rnic), vec![a.1], "marked again, listed once");
}
