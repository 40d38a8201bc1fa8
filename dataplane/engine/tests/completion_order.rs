//! Completion order and what posting does in each QP state: a WR that cannot run completes
//! in its turn, never ahead of the WRs posted before it; ORD 0 fails a Read instead of
//! hanging it; posting in Idle, Closing, Terminate and Error follows the state tables.

mod util;

use iwarp_engine::{
    Access, AsyncEvent, ConnParams, QpCaps, QpState, RecvWr, Rnic, SendOp, SendWr, Status,
    VerbsError, WcOpcode, WorkCompletion,
};
use util::{Pair, A, B, MSS};

fn send(wr_id: u64, sgl: &[iwarp_engine::Sge]) -> SendWr {
    SendWr::new(
        wr_id,
        SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        sgl,
    )
}

fn ids_and_status(wcs: &[WorkCompletion]) -> Vec<(u64, Status)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

fn qp_errors(events: &[AsyncEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, AsyncEvent::QpError { .. }))
        .count()
}

/// Verbs section 8.2.2 rule 2 (an SQ's WRs complete in posting order), section 8.3.2 and
/// figure 23 (a local protection error is a completion error that ends the stream),
/// section 6.2.4 (Error flushes the WRs behind it): a Write, a Read whose sink lacks Remote
/// Write (refused by Post Send, then posted as a failed WR), a Write. Nothing completes
/// before the first Write; then the Read with the error, the last Write flushed.
#[test]
fn a_refused_wr_completes_in_its_turn_and_flushes_the_rest() {
    let mut p = Pair::new(false);
    let len = 256 * 1024;
    let src = p.buffer(A, len, Access::LOCAL_WRITE);
    let dst = p.buffer(B, len, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let rsrc = p.buffer(B, 64, Access::REMOTE_READ);
    let bad_sink = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.fill(A, src, len, 5);
    let (wstag, wto) = p.remote(B, dst, 0);
    let write = |id, sge| {
        SendWr::new(
            id,
            SendOp::Write {
                remote_stag: wstag,
                remote_to: wto,
            },
            &[sge],
        )
    };
    p.post_send(A, write(1, p.sge(A, src, 0, len)));
    let (rstag, rto) = p.remote(B, rsrc, 0);
    let read = SendWr::new(
        2,
        SendOp::Read {
            remote_stag: rstag,
            remote_to: rto,
        },
        &[p.sge(A, bad_sink, 0, 64)],
    );
    let e = p.a.rnic.post_send(p.a.qp, read).unwrap_err();
    assert_eq!(e, VerbsError::ReadSinkNeedsRemoteWrite);
    p.a.rnic
        .post_send_failed(p.a.qp, read, Status::LocalProtectionError)
        .unwrap();
    p.post_send(A, write(3, p.sge(A, src, 0, 64)));
    assert!(p.wcs(A).is_empty(), "the failed WR waits for its turn");
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Rts));

    p.drive();
    let wcs = p.wcs(A);
    assert_eq!(
        ids_and_status(&wcs),
        vec![
            (1, Status::Success),
            (2, Status::LocalProtectionError),
            (3, Status::WrFlushed)
        ]
    );
    assert_eq!(
        wcs.iter().map(|w| w.opcode).collect::<Vec<_>>(),
        vec![WcOpcode::Write, WcOpcode::Read, WcOpcode::Write]
    );
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
    assert_eq!(qp_errors(&p.a.events), 1, "one asynchronous event");
    assert_eq!(
        p.bytes(B, dst, len),
        p.bytes(A, src, len),
        "the Write landed"
    );
}

/// Section 8.2.2 rule 2: a failed WR behind an outstanding Read waits for that Read's
/// response, so the Read completes with its own (successful) status, not a flush.
#[test]
fn a_refused_wr_waits_for_the_reads_before_it() {
    let mut p = Pair::new(false);
    let rsrc = p.buffer(B, 64, Access::REMOTE_READ);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    p.fill(B, rsrc, 64, 9);
    let (rstag, rto) = p.remote(B, rsrc, 0);
    let read = SendWr::new(
        1,
        SendOp::Read {
            remote_stag: rstag,
            remote_to: rto,
        },
        &[p.sge(A, sink, 0, 64)],
    );
    p.post_send(A, read);
    // The WR could not be decoded: its stand-in carries the id and the operation.
    p.a.rnic
        .post_send_failed(p.a.qp, send(2, &[]), Status::LocalQpOperationError)
        .unwrap();
    // The Read Request goes out; the failed WR may not run before its response.
    let mut wire = vec![0u8; MSS];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    assert!(p.a.rnic.poll_transmit(p.a.qp, &mut wire[n..]).is_none());
    assert!(p.wcs(A).is_empty());
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    p.drive();
    assert_eq!(
        ids_and_status(&p.wcs(A)),
        vec![(1, Status::Success), (2, Status::LocalQpOperationError)]
    );
    assert_eq!(p.bytes(A, sink, 64), p.bytes(B, rsrc, 64));
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
}

/// Figure 23, "Send Queue Work Request Errors: Zero ORD": with ORD 0 a Read or an atomic
/// completes in error, in its turn, and the QP goes to Error; nothing waits forever.
#[test]
fn ord_zero_fails_reads_and_atomics_instead_of_hanging() {
    for atomic in [false, true] {
        let no_ord = ConnParams::new(true, 8, 0, MSS);
        let mut p = Pair::with(no_ord, ConnParams::new(true, 8, 8, MSS), 64, false);
        let buf = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let rbuf = p.buffer(B, 64, Access::LOCAL_WRITE);
        let target = p.buffer(
            B,
            8,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        );
        let (stag, to) = p.remote(B, target, 0);
        p.post_recv(B, 10, &[p.sge(B, rbuf, 0, 64)]);
        p.post_send(A, send(1, &[p.sge(A, buf, 0, 16)]));
        let op = if atomic {
            SendOp::FetchAdd {
                remote_stag: stag,
                remote_to: to,
                add: 1,
                add_mask: 0,
            }
        } else {
            SendOp::Read {
                remote_stag: stag,
                remote_to: to,
            }
        };
        p.post_send(A, SendWr::new(2, op, &[p.sge(A, buf, 0, 8)]));
        p.post_send(A, send(3, &[p.sge(A, buf, 0, 16)]));
        p.drive();
        let wcs = p.wcs(A);
        assert_eq!(
            ids_and_status(&wcs),
            vec![
                (1, Status::Success),
                (2, Status::LocalQpOperationError),
                (3, Status::WrFlushed)
            ],
            "atomic: {atomic}"
        );
        assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
        assert_eq!(qp_errors(&p.a.events), 1);
        assert_eq!(p.one_wc(B).wr_id, 10, "the Send before it went out");
    }
}

/// Figure 23, Receive Queue "Invalid WQE format": a receive accepted although unusable
/// completes in error when a message consumes it, after the receives before it completed
/// normally; the stream ends with a Terminate (Local Catastrophic Error) and the receives
/// behind it are flushed (section 6.2.4). The same through an S-RQ.
#[test]
fn a_refused_receive_fails_in_its_turn() {
    for srq in [false, true] {
        let mut p = if srq {
            Pair::with_srq()
        } else {
            Pair::new(false)
        };
        let src = p.buffer(A, 64, Access::LOCAL_WRITE);
        let dst = p.buffer(B, 64, Access::LOCAL_WRITE);
        for id in [1u64, 2, 3] {
            let mut wr = RecvWr::new(id, &[p.sge(B, dst, 0, 64)]);
            let b = &mut p.b;
            let r = match (b.srq, id) {
                (Some(s), 2) => b
                    .rnic
                    .post_srq_recv_failed(s, wr, Status::LocalQpOperationError),
                (Some(s), _) => b.rnic.post_srq_recv(s, wr),
                (None, 2) => {
                    wr.num_sge = 0;
                    b.rnic
                        .post_recv_failed(b.qp, wr, Status::LocalQpOperationError)
                }
                (None, _) => b.rnic.post_recv(b.qp, wr),
            };
            r.unwrap();
        }
        for id in [11, 12, 13] {
            p.post_send(A, send(id, &[p.sge(A, src, 0, 8)]));
        }
        p.drive();
        assert_eq!(
            ids_and_status(&p.wcs(B)),
            &[
                (1, Status::Success),
                (2, Status::LocalQpOperationError),
                (3, Status::WrFlushed)
            ][..if srq { 2 } else { 3 }],
            "S-RQ: {srq} (an S-RQ's receives belong to no QP and are not flushed)"
        );
        assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Error));
        assert_eq!(
            p.received_cause(A),
            Some(iwarp_wire::terminate::RDMAP_LOCAL_CATASTROPHIC)
        );
    }
}

/// Figure 7 (Idle): PostSQ and PostRQ enqueue the WQE, which is not processed; Error
/// flushes them in posting order (section 6.2.1.1).
#[test]
fn posting_in_idle_enqueues() {
    let mut rnic = Rnic::new();
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(16);
    let caps = QpCaps {
        sq_depth: 2,
        rq_depth: 2,
        srq: None,
    };
    let qp = rnic.create_qp(pd, cq, cq, caps).unwrap();
    rnic.post_send(qp, send(1, &[])).unwrap();
    rnic.post_send(qp, send(2, &[])).unwrap();
    assert_eq!(
        rnic.post_send(qp, send(3, &[])),
        Err(VerbsError::QueueFull),
        "still an immediate error"
    );
    rnic.post_recv(qp, RecvWr::new(4, &[])).unwrap();
    let mut out = [WorkCompletion::default(); 8];
    assert_eq!(rnic.poll_cq(cq, &mut out).unwrap(), 0, "not processed");
    assert_eq!(rnic.poll_transmit(qp, &mut [0u8; 256]), None);
    rnic.modify_qp(qp, QpState::Error).unwrap();
    let n = rnic.poll_cq(cq, &mut out).unwrap();
    assert_eq!(
        ids_and_status(&out[..n]),
        vec![
            (1, Status::WrFlushed),
            (2, Status::WrFlushed),
            (4, Status::WrFlushed)
        ]
    );
}

/// Figure 11 (Closing): "PostRQ without Immediate Error: Enqueue and flush", the QP stays
/// in Closing; "PostSQ without Immediate Error: Enqueue & Flush, Perform LLP Reset, Create
/// Async Event, Error". The flushes keep posting order.
#[test]
fn posting_in_closing_enqueues_and_flushes() {
    let mut p = Pair::new(false);
    let rsrc = p.buffer(B, 64, Access::REMOTE_READ);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (stag, to) = p.remote(B, rsrc, 0);
    p.post_recv(A, 1, &[]);
    p.post_send(
        A,
        SendWr::new(
            5,
            SendOp::Read {
                remote_stag: stag,
                remote_to: to,
            },
            &[p.sge(A, sink, 0, 64)],
        ),
    );
    // The Read is outstanding: Closing waits for it.
    let mut wire = vec![0u8; MSS];
    p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    p.a.rnic.modify_qp(p.a.qp, QpState::Closing).unwrap();
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Closing));

    p.a.rnic.post_recv(p.a.qp, RecvWr::new(2, &[])).unwrap();
    assert_eq!(
        ids_and_status(&p.wcs(A)),
        vec![(1, Status::WrFlushed), (2, Status::WrFlushed)]
    );
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Closing));

    p.a.rnic.post_send(p.a.qp, send(6, &[])).unwrap();
    assert_eq!(
        ids_and_status(&p.wcs(A)),
        vec![(5, Status::WrFlushed), (6, Status::WrFlushed)]
    );
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
    assert!(matches!(
        p.a.rnic.poll_event(),
        Some(AsyncEvent::QpError { .. })
    ));
}

/// Figure 9 (Terminate): "WQE is present on or added to a Work Queue: WQE is NOT processed
/// and is eventually flushed"; figure 10 (Error): "Post WR: Post WQE, and then Flush it".
#[test]
fn posting_in_terminate_and_error_flushes() {
    let mut p = Pair::new(false);
    let buf = p.buffer(A, 8, Access::LOCAL_WRITE);
    p.a.rnic.modify_qp(p.a.qp, QpState::Terminate).unwrap();
    p.a.rnic
        .post_send(p.a.qp, send(1, &[p.sge(A, buf, 0, 8)]))
        .unwrap();
    p.a.rnic.post_recv(p.a.qp, RecvWr::new(2, &[])).unwrap();
    assert!(p.wcs(A).is_empty());
    p.drive(); // the Terminate goes out, then Error
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
    let mut got = ids_and_status(&p.wcs(A));
    got.sort_by_key(|w| w.0);
    assert_eq!(got, vec![(1, Status::WrFlushed), (2, Status::WrFlushed)]);
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Error), "B got it");

    p.a.rnic.post_send(p.a.qp, send(3, &[])).unwrap();
    p.a.rnic.post_recv(p.a.qp, RecvWr::new(4, &[])).unwrap();
    assert_eq!(
        ids_and_status(&p.wcs(A)),
        vec![(3, Status::WrFlushed), (4, Status::WrFlushed)]
    );
}
