//! The QP state table of the Verbs specification (draft-hilland-rddp-verbs-00), walked
//! against the engine: every Modify QP transition from every state, and what Post Send and
//! Post Receive do in each state.

mod util;

use iwarp_engine::{Access, QpState, RecvWr, SendOp, SendWr, Status, VerbsError};
use util::{Pair, A, B, MSS};

use QpState::{Closing, Error, Idle, Rts, Terminate};

const STATES: [QpState; 5] = [Idle, Rts, Closing, Terminate, Error];

/// Figure 4 ("Allowable QP Attribute Modifications") lists the transitions Modify QP
/// accepts: Idle->Idle, Idle->RTS, Idle->Error, RTS->RTS, RTS->CLOSING, RTS->TERM,
/// RTS->Error, Error->Idle. The state sections agree and add the refusals:
/// - 6.2.1: "MUST return an Immediate Error if the Consumer attempts to transition the QP
///   from the Idle state to the Terminate state or to the Closing state."
/// - 6.2.2: "MUST return an Immediate Error ... from the RTS state to the Idle state."
/// - 6.2.3: "Any attempt to perform a Modify QP in the Terminate state MUST return with an
///   Immediate Error."
/// - 6.2.4: "No other state transitions out of Error are supported. Any attempt to
///   transition the QP to a state other than Idle MUST result in an Immediate Error."
/// - 6.2.5: "Any attempt to perform a Modify QP in the Closing state MUST return an
///   Immediate Error."
const FIGURE_4: [(QpState, QpState); 8] = [
    (Idle, Idle),
    (Idle, Rts),
    (Idle, Error),
    (Rts, Rts),
    (Rts, Closing),
    (Rts, Terminate),
    (Rts, Error),
    (Error, Idle),
];

/// A fresh pair whose A-side QP is in `state`. Closing is held open by a Read whose
/// response has not arrived (section 6.2.5: the RI stops only when the outstanding Reads
/// are done); Terminate is entered by Modify QP and held until its Terminate is sent.
fn in_state(state: QpState) -> Pair {
    let mut p = Pair::new(false);
    match state {
        Idle => {
            let pd = p.a.pd;
            let cq = p.a.cq;
            let caps = iwarp_engine::QpCaps {
                sq_depth: 8,
                rq_depth: 8,
                srq: None,
            };
            p.a.qp = p.a.rnic.create_qp(pd, cq, cq, caps).unwrap();
        }
        Rts => {}
        Closing => {
            let src = p.buffer(B, 64, Access::REMOTE_READ);
            let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
            let (stag, to) = p.remote(B, src, 0);
            let wr = SendWr::new(
                100,
                SendOp::Read {
                    remote_stag: stag,
                    remote_to: to,
                },
                &[p.sge(A, sink, 0, 64)],
            );
            p.post_send(A, wr);
            let mut wire = vec![0u8; MSS];
            p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
            p.a.rnic.modify_qp(p.a.qp, Closing).unwrap();
        }
        Terminate | Error => p.a.rnic.modify_qp(p.a.qp, state).unwrap(),
    }
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(state));
    p
}

#[test]
fn modify_qp_follows_figure_4_from_every_state() {
    for from in STATES {
        for to in STATES {
            let listed = FIGURE_4.contains(&(from, to));
            assert_eq!(
                from.transition_allowed(to),
                listed,
                "{from}.transition_allowed({to})"
            );
            let mut p = in_state(from);
            let r = p.a.rnic.modify_qp(p.a.qp, to);
            if (from, to) == (Idle, Rts) {
                // Section 6.2.1.2: Idle -> RTS requires the LLP Stream Handle, which only
                // `connect` supplies; without it "the Modify QP Verb MUST return an
                // Immediate Error".
                assert_eq!(r, Err(VerbsError::InvalidModify));
                let params = iwarp_engine::ConnParams::new(true, 8, 8, MSS);
                assert_eq!(p.a.rnic.connect(p.a.qp, params), Ok(()));
                assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(Rts));
                continue;
            }
            if !listed {
                assert_eq!(r, Err(VerbsError::InvalidModify), "{from} -> {to}");
                // Section 8.3.1: an Immediate Error leaves the QP unchanged.
                assert_eq!(
                    p.a.rnic.qp_state(p.a.qp),
                    Some(from),
                    "{from} -> {to} refused"
                );
                continue;
            }
            assert_eq!(r, Ok(()), "{from} -> {to}");
            let now = p.a.rnic.qp_state(p.a.qp);
            if (from, to) == (Rts, Closing) {
                // Section 6.2.2.2: with no work outstanding the QP "may have already
                // transitioned out of the Closing state", to Idle.
                assert!(matches!(now, Some(Closing | Idle)), "{now:?}");
            } else {
                assert_eq!(now, Some(to), "{from} -> {to}");
            }
        }
    }
}

/// What posting did, seen from the consumer.
#[derive(Debug, PartialEq, Eq)]
enum Posted {
    /// An immediate error (the WR is not on the queue).
    Refused,
    /// Accepted and completed at once, with the flush status.
    Flushed,
    /// Accepted and waiting on the queue, not processed.
    Enqueued,
}

fn post_send(p: &mut Pair) -> Posted {
    let buf = p.buffer(A, 8, Access::LOCAL_WRITE);
    let wr = SendWr::new(
        7,
        SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        &[p.sge(A, buf, 0, 8)],
    );
    let r = p.a.rnic.post_send(p.a.qp, wr);
    outcome(p, r)
}

fn post_recv(p: &mut Pair) -> Posted {
    let buf = p.buffer(A, 8, Access::LOCAL_WRITE);
    let r =
        p.a.rnic
            .post_recv(p.a.qp, RecvWr::new(7, &[p.sge(A, buf, 0, 8)]));
    outcome(p, r)
}

fn outcome(p: &mut Pair, r: Result<(), VerbsError>) -> Posted {
    if r.is_err() {
        return Posted::Refused;
    }
    let wcs = p.wcs(A);
    match wcs.iter().find(|w| w.wr_id == 7) {
        Some(w) if w.status == Status::WrFlushed => Posted::Flushed,
        Some(w) => panic!("a WR posted in this state completed with {:?}", w.status),
        None => Posted::Enqueued,
    }
}

/// Section 6.2.2, figure 8: in RTS "PostSQ, PostRQ: Enqueue WQE".
#[test]
fn posting_in_rts_enqueues() {
    let mut p = in_state(Rts);
    assert_eq!(post_recv(&mut p), Posted::Enqueued);
    // The peer has no receive: the Send is enqueued and processed, not refused.
    assert_ne!(post_send(&mut p), Posted::Refused);
}

/// Section 6.2.1, figure 7: in Idle "PostSQ, PostRQ: Enqueue WQE ... WQE is NOT
/// processed".
#[test]
fn posting_a_receive_in_idle_enqueues() {
    let mut p = in_state(Idle);
    assert_eq!(post_recv(&mut p), Posted::Enqueued);
}

/// Section 6.2.1, figure 7, for the SQ: Post Send in Idle enqueues the WR without
/// processing it.
#[test]
fn posting_a_send_in_idle_enqueues() {
    let mut p = in_state(Idle);
    assert_eq!(post_send(&mut p), Posted::Enqueued);
}

/// Section 6.2.4, figure 10: in Error "Post WR: Post WQE, and then Flush it, OR Return an
/// Immediate Error".
#[test]
fn posting_in_error_flushes_or_is_refused() {
    for post in [post_send, post_recv] {
        let mut p = in_state(Error);
        assert_ne!(post(&mut p), Posted::Enqueued);
    }
}

/// Section 6.2.3, figure 9: in Terminate a posted WR "is NOT processed and is eventually
/// flushed", or posting returns an Immediate Error.
#[test]
fn posting_in_terminate_is_flushed_or_refused() {
    for post in [post_send, post_recv] {
        let mut p = in_state(Terminate);
        let r = post(&mut p);
        if r == Posted::Enqueued {
            p.drive();
            let wcs = p.wcs(A);
            let w = wcs.iter().find(|w| w.wr_id == 7).expect("flushed later");
            assert_eq!(w.status, Status::WrFlushed);
        }
    }
}

/// Section 6.2.5, figure 11: in Closing "PostSQ/PostRQ with Immediate Error: Return an
/// Immediate Error"; "PostRQ without Immediate Error: Enqueue and flush"; "PostSQ without
/// Immediate Error: Enqueue & Flush ... Error". Either way nothing posted is processed.
#[test]
fn posting_in_closing_is_flushed_or_refused() {
    for (post, send) in [
        (post_send as fn(&mut Pair) -> Posted, true),
        (post_recv, false),
    ] {
        let mut p = in_state(Closing);
        match post(&mut p) {
            Posted::Refused | Posted::Flushed => {}
            Posted::Enqueued => {
                p.drive();
                let wcs = p.wcs(A);
                let w = wcs.iter().find(|w| w.wr_id == 7).expect("flushed later");
                assert_eq!(w.status, Status::WrFlushed);
                if send {
                    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(Error));
                }
            }
        }
    }
}
