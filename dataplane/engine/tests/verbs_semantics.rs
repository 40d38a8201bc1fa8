//! Completion and error semantics of the Verbs specification (draft-hilland-rddp-verbs-00)
//! and memory protection with windows: every posted WR ends in exactly one completion, a
//! local completion error ends the stream with a Terminate, windows belong to the QP that
//! bound them, and invalidation, Bind and Fast-Register follow the STag state rules.

mod util;

use core::ptr::NonNull;
use iwarp_engine::{
    Access, AsyncEvent, ConnParams, CqId, PdId, QpCaps, QpId, QpState, RecvWr, Rnic, SendOp,
    SendWr, Sge, Status, VerbsError, WcOpcode, WorkCompletion,
};
use iwarp_wire::terminate::{self as t, TermCause};
use util::{Pair, A, B, MSS};

fn send(wr_id: u64, sgl: &[Sge]) -> SendWr {
    SendWr::new(
        wr_id,
        SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        sgl,
    )
}

fn write(wr_id: u64, stag: u32, to: u64, sgl: &[Sge]) -> SendWr {
    SendWr::new(
        wr_id,
        SendOp::Write {
            remote_stag: stag,
            remote_to: to,
        },
        sgl,
    )
}

fn read(wr_id: u64, stag: u32, to: u64, sgl: &[Sge]) -> SendWr {
    SendWr::new(
        wr_id,
        SendOp::Read {
            remote_stag: stag,
            remote_to: to,
        },
        sgl,
    )
}

fn bind(wr_id: u64, mw: u32, mr: u32, to: u64, len: u64, access: Access) -> SendWr {
    SendWr::new(
        wr_id,
        SendOp::BindMw {
            mw,
            mr,
            to,
            len,
            access,
        },
        &[],
    )
}

/// Verbs section 6.2.4: on entry to Error every incomplete WR is flushed, the receive a
/// partly arrived Send was being placed into included (it was taken off the RQ, but is not
/// complete). Every posted receive ends in exactly one completion.
#[test]
fn a_receive_a_send_was_filling_is_flushed_on_error() {
    let mut p = Pair::new(false);
    let src = p.buffer(A, 4000, Access::LOCAL_WRITE);
    let dst = p.buffer(B, 8000, Access::LOCAL_WRITE);
    p.post_recv(B, 1, &[p.sge(B, dst, 0, 4000)]);
    p.post_recv(B, 2, &[p.sge(B, dst, 4000, 4000)]);
    p.post_send(A, send(9, &[p.sge(A, src, 0, 4000)]));
    // Only the first of the Send's three FPDUs reaches B.
    let mut wire = vec![0u8; MSS];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    assert!(p.wcs(B).is_empty(), "the message is not complete");
    p.b.rnic.modify_qp(p.b.qp, QpState::Error).unwrap();
    let wcs = p.wcs(B);
    let got: Vec<(u64, Status)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, vec![(1, Status::WrFlushed), (2, Status::WrFlushed)]);
}

/// The same when the stream ends under the partial message (connection lost).
#[test]
fn a_receive_a_send_was_filling_completes_when_the_connection_is_lost() {
    let mut p = Pair::with_srq();
    let src = p.buffer(A, 4000, Access::LOCAL_WRITE);
    let dst = p.buffer(B, 4000, Access::LOCAL_WRITE);
    let srq = p.b.srq.unwrap();
    let sge = p.sge(B, dst, 0, 4000);
    p.b.rnic.post_srq_recv(srq, RecvWr::new(1, &[sge])).unwrap();
    p.post_send(A, send(9, &[p.sge(A, src, 0, 4000)]));
    let mut wire = vec![0u8; MSS];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    p.b.rnic.connection_lost(p.b.qp, false);
    let wc = p.one_wc(B);
    assert_eq!((wc.wr_id, wc.opcode), (1, WcOpcode::Recv));
    assert_ne!(wc.status, Status::Success);
}

/// Verbs section 6.2.5 and figure 11: "Any attempt to perform a Modify QP in the Closing
/// state MUST return an Immediate Error". A Read outstanding when Closing began still
/// completes, after which the QP goes Idle on its own.
#[test]
fn modify_qp_in_closing_is_refused_and_the_outstanding_read_completes() {
    let mut p = Pair::new(false);
    let src = p.buffer(B, 64, Access::REMOTE_READ);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    p.fill(B, src, 64, 11);
    let (stag, to) = p.remote(B, src, 0);
    p.post_send(A, read(1, stag, to, &[p.sge(A, sink, 0, 64)]));
    let mut wire = vec![0u8; MSS];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    p.a.rnic.modify_qp(p.a.qp, QpState::Closing).unwrap();
    for to_state in [
        QpState::Idle,
        QpState::Error,
        QpState::Rts,
        QpState::Terminate,
        QpState::Closing,
    ] {
        assert_eq!(
            p.a.rnic.modify_qp(p.a.qp, to_state),
            Err(VerbsError::InvalidModify),
            "Closing -> {to_state}"
        );
        assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Closing));
    }
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    p.drive();
    let wc = p.one_wc(A);
    assert_eq!((wc.wr_id, wc.status), (1, Status::Success));
    assert_eq!(p.bytes(A, sink, 64), p.bytes(B, src, 64));
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Idle));
}

/// Verbs figure 23, "SQ Invalidate errors: Invalidate MR STag had Bound MW": a Local
/// Invalidate of a region with a bound window completes in error and the stream ends with
/// a Terminate, local catastrophic error (0x0000). The region and the window stay as they
/// were; nothing is opened onto memory that the consumer meant to close.
#[test]
fn local_invalidate_of_a_region_with_a_bound_window_fails() {
    let mut p = Pair::new(false);
    let region = p.buffer(B, 256, Access::LOCAL_WRITE | Access::BIND);
    let (mr, base) = p.remote(B, region, 0);
    let mw = p.b.rnic.alloc_mw(p.b.pd);
    p.post_send(B, bind(1, mw, mr, base, 128, Access::REMOTE_WRITE));
    p.drive();
    assert_eq!(p.one_wc(B).status, Status::Success);
    p.post_send(B, SendWr::new(2, SendOp::LocalInvalidate { stag: mr }, &[]));
    p.drive();
    let wc = p.one_wc(B);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (2, WcOpcode::LocalInv, Status::LocalProtectionError)
    );
    assert_eq!(p.sent_cause(B), Some(t::RDMAP_LOCAL_CATASTROPHIC));
    assert_eq!(p.received_cause(A), Some(t::RDMAP_LOCAL_CATASTROPHIC));
    // The window still holds the region: it cannot be deregistered.
    assert_eq!(p.b.rnic.deregister_mr(mr), Err(VerbsError::StagInUse));
}

/// Verbs figure 23, "Receive Queue Remote Protection Errors: Invalidate MR STag had Bound
/// MW, 0x0109" (RFC 5040 section 7.2, "STag cannot be invalidated"): a Send with
/// Invalidate of a region with a bound window fails; the receive completes in error and the
/// region stays valid, so the window goes on naming memory of a valid region only.
#[test]
fn send_with_invalidate_of_a_region_with_a_bound_window_fails() {
    let mut p = Pair::new(false);
    // A remote right, so that only the bound window stands in the way (section 7.4.2).
    let region = p.buffer(
        B,
        256,
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::BIND,
    );
    let (mr, base) = p.remote(B, region, 0);
    let mw = p.b.rnic.alloc_mw(p.b.pd);
    p.post_send(B, bind(1, mw, mr, base, 128, Access::REMOTE_WRITE));
    p.drive();
    assert_eq!(p.one_wc(B).status, Status::Success);
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE);
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.post_recv(B, 5, &[p.sge(B, dst, 0, 64)]);
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::Send {
                solicited: false,
                invalidate: Some(mr),
            },
            &[p.sge(A, src, 0, 8)],
        ),
    );
    assert_eq!(p.sent_cause(B), Some(t::RDMAP_PROTECTION_CANNOT_INVALIDATE));
    let wc = p.one_wc(B);
    assert_eq!(
        (wc.wr_id, wc.status, wc.invalidated_stag),
        (5, Status::RemoteAccessError, None)
    );
    assert_eq!(p.b.rnic.deregister_mr(mr), Err(VerbsError::StagInUse));
}

/// Two QPs of one PD on B, each connected to its own peer.
struct TwoQps {
    b: Rnic,
    b_pd: PdId,
    b_cq: CqId,
    b_qp: [QpId; 2],
    peers: [Rnic; 2],
    peer_qp: [QpId; 2],
    peer_pd: [PdId; 2],
    peer_cq: [CqId; 2],
    events: Vec<AsyncEvent>,
}

fn leak(len: usize) -> NonNull<u8> {
    let words = Box::leak(vec![0u64; len.div_ceil(8)].into_boxed_slice());
    NonNull::new(words.as_mut_ptr() as *mut u8).unwrap()
}

/// Registers a fresh VA-based buffer and returns (STag, its address as TO).
fn register(rnic: &mut Rnic, pd: PdId, len: usize, access: Access) -> (u32, u64) {
    let ptr = leak(len);
    let to = ptr.as_ptr() as u64;
    // SAFETY: the buffer is leaked, so it stays valid for the rest of the test.
    let stag = unsafe { rnic.register_mr(pd, ptr, len, access, to) }.expect("valid rights");
    (stag, to)
}

fn bytes(to: u64, len: usize) -> Vec<u8> {
    // SAFETY: `to` is the address of a leaked buffer of at least `len` octets; no engine
    // call runs concurrently.
    unsafe { std::slice::from_raw_parts(to as *const u8, len).to_vec() }
}

impl TwoQps {
    fn new() -> TwoQps {
        let params = ConnParams::new(true, 8, 8, MSS);
        let caps = QpCaps {
            sq_depth: 16,
            rq_depth: 16,
            srq: None,
        };
        let mut b = Rnic::new();
        let b_pd = b.alloc_pd();
        let b_cq = b.create_cq(64);
        let mut b_qp = [QpId::default(); 2];
        for q in &mut b_qp {
            *q = b.create_qp(b_pd, b_cq, b_cq, caps).unwrap();
            b.connect(*q, params).unwrap();
        }
        let mut peers = [Rnic::new(), Rnic::new()];
        let (mut peer_qp, mut peer_pd, mut peer_cq) = (
            [QpId::default(); 2],
            [PdId::default(); 2],
            [CqId::default(); 2],
        );
        for i in 0..2 {
            peer_pd[i] = peers[i].alloc_pd();
            peer_cq[i] = peers[i].create_cq(64);
            peer_qp[i] = peers[i]
                .create_qp(peer_pd[i], peer_cq[i], peer_cq[i], caps)
                .unwrap();
            peers[i].connect(peer_qp[i], params).unwrap();
        }
        TwoQps {
            b,
            b_pd,
            b_cq,
            b_qp,
            peers,
            peer_qp,
            peer_pd,
            peer_cq,
            events: Vec::new(),
        }
    }

    fn drive(&mut self) {
        let mut wire = vec![0u8; MSS];
        loop {
            let mut moved = false;
            for i in 0..2 {
                while let Some(n) = self.peers[i].poll_transmit(self.peer_qp[i], &mut wire) {
                    self.b.handle_stream(self.b_qp[i], &wire[..n]);
                    moved = true;
                }
                while let Some(n) = self.b.poll_transmit(self.b_qp[i], &mut wire) {
                    self.peers[i].handle_stream(self.peer_qp[i], &wire[..n]);
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        while let Some(e) = self.b.poll_event() {
            self.events.push(e);
        }
    }

    fn b_wcs(&mut self) -> Vec<WorkCompletion> {
        let mut out = vec![WorkCompletion::default(); 16];
        let n = self.b.poll_cq(self.b_cq, &mut out).unwrap();
        out.truncate(n);
        out
    }

    fn sent_on(&self, qp: QpId) -> Option<TermCause> {
        self.events.iter().find_map(|e| match e {
            AsyncEvent::TerminateSent { qp: q, cause } if *q == qp => Some(*cause),
            _ => None,
        })
    }
}

/// Verbs section 7.10.2 / 7.10.6.2: "the QP ID associated with the Memory Window MUST be
/// equal to the QP ID of the QP where the incoming RDMA operation arrived". A Write through
/// a window bound on QP 0 that arrives on QP 1 of the same PD is refused with "STag not
/// associated with RDMAP stream" (RFC 5041 section 7.2) and touches no memory; on QP 0 it
/// lands.
#[test]
fn a_window_takes_remote_access_only_on_the_qp_that_bound_it() {
    let mut n = TwoQps::new();
    let (mr, base) = register(&mut n.b, n.b_pd, 256, Access::LOCAL_WRITE | Access::BIND);
    let mw = n.b.alloc_mw(n.b_pd);
    let w = bind(1, mw, mr, base, 256, Access::REMOTE_WRITE);
    n.b.post_send(n.b_qp[0], w).unwrap();
    n.drive();
    assert_eq!(n.b_wcs()[0].status, Status::Success);
    for i in [1, 0] {
        let pd = n.peer_pd[i];
        let (src, src_to) = register(&mut n.peers[i], pd, 64, Access::LOCAL_WRITE);
        // SAFETY: the buffer is leaked and 64 octets long; no engine call runs now.
        unsafe { core::ptr::write_bytes(src_to as *mut u8, 0x40 + i as u8, 64) };
        let sge = Sge {
            stag: src,
            to: src_to,
            len: 64,
        };
        let qp = n.peer_qp[i];
        n.peers[i]
            .post_send(qp, write(2, mw, base + 64 * i as u64, &[sge]))
            .unwrap();
        n.drive();
    }
    assert_eq!(
        n.sent_on(n.b_qp[1]),
        Some(t::DDP_TAGGED_STAG_NOT_ASSOCIATED)
    );
    assert_eq!(n.sent_on(n.b_qp[0]), None);
    assert_eq!(n.b.qp_state(n.b_qp[1]), Some(QpState::Error));
    assert_eq!(bytes(base, 64), vec![0x40; 64], "landed through QP 0");
    assert_eq!(bytes(base + 64, 64), vec![0; 64], "nothing through QP 1");
}

/// Verbs section 7.10.4: a Send with Invalidate of a valid window arriving on a QP other
/// than the one that bound it fails ("STag not Bound to QP", figure 23: 0x0103), and the
/// window stays valid for its own QP.
#[test]
fn a_window_is_invalidated_only_through_the_qp_that_bound_it() {
    let mut n = TwoQps::new();
    let (mr, base) = register(&mut n.b, n.b_pd, 256, Access::LOCAL_WRITE | Access::BIND);
    let (dst, dst_to) = register(&mut n.b, n.b_pd, 64, Access::LOCAL_WRITE);
    let mw = n.b.alloc_mw(n.b_pd);
    let w = bind(1, mw, mr, base, 256, Access::REMOTE_WRITE);
    n.b.post_send(n.b_qp[0], w).unwrap();
    let recv = RecvWr::new(
        3,
        &[Sge {
            stag: dst,
            to: dst_to,
            len: 64,
        }],
    );
    n.b.post_recv(n.b_qp[1], recv).unwrap();
    n.drive();
    n.b_wcs();
    let inv = SendWr::new(
        4,
        SendOp::Send {
            solicited: false,
            invalidate: Some(mw),
        },
        &[],
    );
    n.peers[1].post_send(n.peer_qp[1], inv).unwrap();
    n.drive();
    assert_eq!(n.sent_on(n.b_qp[1]), Some(t::RDMAP_STAG_NOT_ASSOCIATED));
    let wc = n.b_wcs();
    assert_eq!((wc[0].wr_id, wc[0].status), (3, Status::RemoteAccessError));
    // Still valid on QP 0: a Write lands.
    let pd = n.peer_pd[0];
    let (src, src_to) = register(&mut n.peers[0], pd, 8, Access::LOCAL_WRITE);
    // SAFETY: leaked 8-octet buffer.
    unsafe { core::ptr::write_bytes(src_to as *mut u8, 0x77, 8) };
    let sge = Sge {
        stag: src,
        to: src_to,
        len: 8,
    };
    n.peers[0]
        .post_send(n.peer_qp[0], write(5, mw, base, &[sge]))
        .unwrap();
    n.drive();
    assert_eq!(bytes(base, 8), vec![0x77; 8]);
    let mut out = [WorkCompletion::default(); 4];
    let got = n.peers[0].poll_cq(n.peer_cq[0], &mut out).unwrap();
    assert_eq!((got, out[0].status), (1, Status::Success));
}

/// Verbs section 6.1.4: "The RI MUST not allow a QP to be destroyed if there are still
/// Memory Windows Bound to the QP"; once the window is invalidated it may be.
#[test]
fn a_qp_with_a_bound_window_is_not_destroyed() {
    let mut p = Pair::new(false);
    let region = p.buffer(B, 64, Access::LOCAL_WRITE | Access::BIND);
    let (mr, base) = p.remote(B, region, 0);
    let mw = p.b.rnic.alloc_mw(p.b.pd);
    p.post_send(B, bind(1, mw, mr, base, 64, Access::REMOTE_WRITE));
    p.drive();
    assert_eq!(p.one_wc(B).status, Status::Success);
    assert_eq!(p.b.rnic.can_destroy_qp(p.b.qp), Err(VerbsError::StagInUse));
    assert_eq!(p.b.rnic.destroy_qp(p.b.qp), Err(VerbsError::StagInUse));
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Rts), "unchanged");
    p.post_send(B, SendWr::new(2, SendOp::LocalInvalidate { stag: mw }, &[]));
    p.drive();
    assert_eq!(p.one_wc(B).status, Status::Success);
    assert_eq!(p.b.rnic.can_destroy_qp(p.b.qp), Ok(()));
    assert_eq!(p.b.rnic.destroy_qp(p.b.qp), Ok(()));
    assert_eq!(p.b.rnic.can_destroy_qp(p.b.qp), Err(VerbsError::InvalidQp));
}

/// Verbs section 7.10.2 and figure 20: a window with Remote Write needs a region with Local
/// Write; a window needs some remote right; the window must be in the Invalid state
/// (section 7.10.6.1). Each refusal is a completion error (and, figure 23, a Terminate).
#[test]
fn bind_checks_the_window_rights_and_state() {
    let cases: [(Access, Access, bool); 5] = [
        (Access::BIND, Access::REMOTE_WRITE, false),
        (Access::BIND, Access::REMOTE_ATOMIC, false),
        (Access::LOCAL_WRITE | Access::BIND, Access(0), false),
        (Access::BIND, Access::REMOTE_READ, true),
        (
            Access::LOCAL_WRITE | Access::BIND,
            Access::REMOTE_READ | Access::REMOTE_WRITE,
            true,
        ),
    ];
    for (region_access, window_access, ok) in cases {
        let mut p = Pair::new(false);
        let region = p.buffer(B, 64, region_access);
        let (mr, base) = p.remote(B, region, 0);
        let mw = p.b.rnic.alloc_mw(p.b.pd);
        p.post_send(B, bind(1, mw, mr, base, 64, window_access));
        p.drive();
        let wc = p.one_wc(B);
        let want = if ok {
            Status::Success
        } else {
            Status::LocalProtectionError
        };
        assert_eq!(wc.status, want, "{region_access:?} / {window_access:?}");
        if !ok {
            assert_eq!(p.received_cause(A), Some(t::RDMAP_LOCAL_CATASTROPHIC));
        }
    }
    // Binding a window that is already valid: refused.
    let mut p = Pair::new(false);
    let region = p.buffer(B, 128, Access::LOCAL_WRITE | Access::BIND);
    let (mr, base) = p.remote(B, region, 0);
    let mw = p.b.rnic.alloc_mw(p.b.pd);
    p.post_send(B, bind(1, mw, mr, base, 64, Access::REMOTE_WRITE));
    p.post_send(B, bind(2, mw, mr, base + 64, 64, Access::REMOTE_WRITE));
    p.drive();
    let got: Vec<(u64, Status)> = p.wcs(B).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![(1, Status::Success), (2, Status::LocalProtectionError)]
    );
}

/// Verbs section 7.3.2.5 and figure 23 ("STag not in Invalid state"): Fast-Register of a
/// valid STag fails and leaves its mapping; after a Local Invalidate it may be remapped.
#[test]
fn fast_register_needs_an_invalid_stag() {
    let mut p = Pair::new(false);
    let backing = p.buffer(B, 256, Access::LOCAL_WRITE);
    p.fill(B, backing, 256, 1);
    let source = p.remote(B, backing, 0).0;
    let stag = p.b.rnic.alloc_fastreg_stag(p.b.pd);
    let fr = |wr_id, offset| {
        SendWr::new(
            wr_id,
            SendOp::FastRegister {
                stag,
                source,
                offset,
                len: 64,
                access: Access::REMOTE_READ,
                base_to: 0,
            },
            &[],
        )
    };
    p.post_send(B, fr(1, 0));
    p.post_send(B, fr(2, 128));
    p.drive();
    let got: Vec<(u64, Status)> = p.wcs(B).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![(1, Status::Success), (2, Status::LocalProtectionError)]
    );
    assert_eq!(p.received_cause(A), Some(t::RDMAP_LOCAL_CATASTROPHIC));

    // A fresh pair: register, invalidate, register again at another offset.
    let mut p = Pair::new(false);
    let backing = p.buffer(B, 256, Access::LOCAL_WRITE);
    p.fill(B, backing, 256, 1);
    let source = p.remote(B, backing, 0).0;
    let stag = p.b.rnic.alloc_fastreg_stag(p.b.pd);
    let fr = |wr_id, offset| {
        SendWr::new(
            wr_id,
            SendOp::FastRegister {
                stag,
                source,
                offset,
                len: 64,
                access: Access::REMOTE_READ,
                base_to: 0,
            },
            &[],
        )
    };
    p.post_send(B, fr(1, 0));
    p.post_send(B, SendWr::new(2, SendOp::LocalInvalidate { stag }, &[]));
    p.post_send(B, fr(3, 128));
    p.drive();
    assert!(p.wcs(B).iter().all(|w| w.status == Status::Success));
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    p.post_send(A, read(4, stag, 0, &[p.sge(A, sink, 0, 64)]));
    p.drive();
    assert_eq!(p.one_wc(A).status, Status::Success);
    assert_eq!(
        p.bytes(A, sink, 64),
        p.bytes(B, backing, 192)[128..].to_vec()
    );
}

/// Verbs section 8.3.2 and figure 23 ("Local SQ Protection Errors ... 0x0000"): a Send
/// whose SGE names an invalid STag completes with a local protection error, the QP moves to
/// Terminate and the peer is sent a Terminate, local catastrophic error, before the stream
/// ends. The error belongs to the WR that caused it, not to an earlier Read still
/// outstanding, which is flushed.
#[test]
fn a_local_sq_protection_error_sends_a_terminate() {
    let mut p = Pair::new(false);
    let src = p.buffer(B, 64, Access::REMOTE_READ);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (stag, to) = p.remote(B, src, 0);
    p.post_send(A, read(1, stag, to, &[p.sge(A, sink, 0, 64)]));
    let mut wire = vec![0u8; MSS];
    // The Read Request goes out but is never delivered: the Read stays outstanding.
    p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    let bad = Sge {
        stag: 0xdead_0001,
        to: 0,
        len: 8,
    };
    p.post_send(A, send(2, &[bad]));
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    p.drive();
    assert_eq!(p.sent_cause(A), Some(t::RDMAP_LOCAL_CATASTROPHIC));
    assert_eq!(p.received_cause(B), Some(t::RDMAP_LOCAL_CATASTROPHIC));
    let got: Vec<(u64, Status)> = p.wcs(A).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![(1, Status::WrFlushed), (2, Status::LocalProtectionError)]
    );
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Error));
}

/// Verbs section 8.2.2.2: a zero-length RDMA Read "does not even require a valid Data
/// Source STag"; it is the end-to-end fence. The requester may post it with no sink, or a
/// zero-length one, and the responder answers it without checking the STag.
#[test]
fn a_zero_length_read_needs_no_valid_stag() {
    for v2 in [false, true] {
        let mut p = if v2 {
            Pair::v2(false)
        } else {
            Pair::new(false)
        };
        let op = |stag, to| {
            if v2 {
                SendOp::ReadV2 {
                    remote_stag: stag,
                    remote_to: to,
                }
            } else {
                SendOp::Read {
                    remote_stag: stag,
                    remote_to: to,
                }
            }
        };
        let empty = Sge {
            stag: 0x00ab_cd01,
            to: 0x1000,
            len: 0,
        };
        p.post_send(A, SendWr::new(1, op(0xdead_0001, 0), &[]));
        p.post_send(A, SendWr::new(2, op(0, 0), &[empty]));
        p.drive();
        assert_eq!(p.sent_cause(B), None, "v2 {v2}");
        assert_eq!(p.sent_cause(A), None, "v2 {v2}");
        let got: Vec<(u64, WcOpcode, Status, u32)> = p
            .wcs(A)
            .iter()
            .map(|w| (w.wr_id, w.opcode, w.status, w.byte_len))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, WcOpcode::Read, Status::Success, 0),
                (2, WcOpcode::Read, Status::Success, 0)
            ],
            "v2 {v2}"
        );
    }
}

/// A window that is deallocated (Deallocate STag, Verbs section 7.10.4.1) takes no more
/// remote access: "no additional accesses can be performed through that Memory Window".
#[test]
fn a_deallocated_window_takes_no_write() {
    let mut p = Pair::new(false);
    let region = p.buffer(B, 64, Access::LOCAL_WRITE | Access::BIND);
    let (mr, base) = p.remote(B, region, 0);
    let mw = p.b.rnic.alloc_mw(p.b.pd);
    p.post_send(B, bind(1, mw, mr, base, 64, Access::REMOTE_WRITE));
    p.drive();
    assert_eq!(p.one_wc(B).status, Status::Success);
    assert_eq!(p.b.rnic.deregister_mr(mw), Ok(()));
    let src = p.buffer(A, 8, Access::LOCAL_WRITE);
    p.fill(A, src, 8, 9);
    p.post_send(A, write(2, mw, base, &[p.sge(A, src, 0, 8)]));
    p.drive();
    assert_eq!(p.sent_cause(B), Some(t::DDP_TAGGED_INVALID_STAG));
    assert_eq!(p.bytes(B, region, 64), vec![0; 64]);
    // And the region, no longer held by the window, can go.
    assert_eq!(p.b.rnic.deregister_mr(mr), Ok(()));
}

/// Verbs section 7.10.4.1: "Any Remote Operations that are in-process and actively using a
/// Memory Window when it is deallocated MUST fail with a protection error." A Read accepted
/// through a window (or a region) whose STag is then deallocated sends nothing of that
/// memory: the responder's Terminate is an RDMAP remote protection error (invalid STag) and
/// the Read completes with a remote access error.
#[test]
fn an_accepted_read_fails_when_its_source_goes_away() {
    for through_window in [true, false] {
        let mut p = Pair::new(false);
        let region = p.buffer(
            B,
            64,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::BIND,
        );
        p.fill(B, region, 64, 0x31);
        let (mr, base) = p.remote(B, region, 0);
        let stag = if through_window {
            let mw = p.b.rnic.alloc_mw(p.b.pd);
            p.post_send(B, bind(1, mw, mr, base, 64, Access::REMOTE_READ));
            p.drive();
            assert_eq!(p.one_wc(B).status, Status::Success);
            mw
        } else {
            mr
        };
        let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        p.post_send(A, read(2, stag, base, &[p.sge(A, sink, 0, 64)]));
        let mut wire = vec![0u8; MSS];
        let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
        p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
        assert_eq!(p.b.rnic.deregister_mr(stag), Ok(()));
        p.drive();
        assert_eq!(p.sent_cause(B), Some(t::RDMAP_INVALID_STAG));
        let wc = p.one_wc(A);
        assert_eq!((wc.wr_id, wc.status), (2, Status::RemoteAccessError));
        assert_eq!(p.bytes(A, sink, 64), vec![0; 64], "window {through_window}");
    }
}

/// The same for the requester's own memory: an atomic's result region deregistered while
/// the request is outstanding is not written when the response comes; the WR completes
/// with a local protection error and the stream ends with a Terminate (Verbs figure 23,
/// local SQ protection error, 0x0000).
#[test]
fn an_atomic_result_region_deregistered_meanwhile_is_not_written() {
    let mut p = Pair::new(false);
    let target = p.buffer(B, 8, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC);
    p.set_u64(B, target, 0, 41);
    let (stag, to) = p.remote(B, target, 0);
    let result = p.buffer(A, 8, Access::LOCAL_WRITE);
    p.set_u64(A, result, 0, 0x5a5a);
    let op = SendOp::FetchAdd {
        remote_stag: stag,
        remote_to: to,
        add: 1,
        add_mask: 0,
    };
    p.post_send(A, SendWr::new(3, op, &[p.sge(A, result, 0, 8)]));
    let mut wire = vec![0u8; MSS];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    let result_stag = p.remote(A, result, 0).0;
    assert_eq!(p.a.rnic.deregister_mr(result_stag), Ok(()));
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    p.drive();
    assert_eq!(
        p.get_u64(B, target, 0),
        42,
        "the atomic ran at the responder"
    );
    assert_eq!(p.get_u64(A, result, 0), 0x5a5a, "result region untouched");
    let wc = p.one_wc(A);
    assert_eq!((wc.wr_id, wc.status), (3, Status::LocalProtectionError));
    assert_eq!(p.sent_cause(A), Some(t::RDMAP_LOCAL_CATASTROPHIC));
}

/// Verbs section 7.4.2: "The RI MUST NOT allow an STag with only Local Access Rights to be
/// Invalidated by an incoming remote Invalidation operation or a protection error will
/// result" (figure 23: "Invalidate STag Access Rights", 0x0102). The consumer's own Local
/// Invalidate of it succeeds.
#[test]
fn a_peer_cannot_invalidate_an_stag_with_only_local_rights() {
    let mut p = Pair::new(false);
    let private = p.buffer(B, 64, Access::LOCAL_WRITE);
    let stag = p.remote(B, private, 0).0;
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE);
    p.post_recv(B, 5, &[p.sge(B, dst, 0, 64)]);
    let inv = SendWr::new(
        1,
        SendOp::Send {
            solicited: false,
            invalidate: Some(stag),
        },
        &[],
    );
    p.post_send(A, inv);
    assert_eq!(p.sent_cause(B), Some(t::RDMAP_ACCESS_RIGHTS));
    let wc = p.one_wc(B);
    assert_eq!((wc.wr_id, wc.status), (5, Status::RemoteAccessError));

    let mut p = Pair::new(false);
    let private = p.buffer(B, 64, Access::LOCAL_WRITE);
    let stag = p.remote(B, private, 0).0;
    p.post_send(B, SendWr::new(2, SendOp::LocalInvalidate { stag }, &[]));
    p.drive();
    assert_eq!(p.one_wc(B).status, Status::Success);
}

/// Verbs figure 18 ("Read / Write: No", "None / Write: No") and figure 23 ("SQ
/// Fast-Register errors: Invalid Access Rights Specified"): a Fast-Register granting
/// Remote Write or atomics without Local Write completes in error.
#[test]
fn fast_register_refuses_remote_write_without_local_write() {
    for (access, ok) in [
        (Access::REMOTE_WRITE, false),
        (Access::REMOTE_ATOMIC, false),
        (Access::LOCAL_WRITE | Access::REMOTE_WRITE, true),
    ] {
        let mut p = Pair::new(false);
        let backing = p.buffer(B, 64, Access::LOCAL_WRITE);
        let source = p.remote(B, backing, 0).0;
        let stag = p.b.rnic.alloc_fastreg_stag(p.b.pd);
        let op = SendOp::FastRegister {
            stag,
            source,
            offset: 0,
            len: 64,
            access,
            base_to: 0,
        };
        p.post_send(B, SendWr::new(1, op, &[]));
        p.drive();
        let want = if ok {
            Status::Success
        } else {
            Status::LocalProtectionError
        };
        assert_eq!(p.one_wc(B).status, want, "{access:?}");
    }
}

/// Verbs section 7.4.2: "The RI MUST NOT allow the Consumer to assign Remote Write to an MR
/// that has not been assigned Local Write" (figure 18; the atomics write too). Register MR
/// fails with "Invalid Access Rights requested" (section 9.2.6.2), under a chosen STag too.
#[test]
fn register_mr_refuses_remote_write_or_atomic_without_local_write() {
    let mut rnic = Rnic::new();
    let pd = rnic.alloc_pd();
    let ptr = leak(64);
    let to = ptr.as_ptr() as u64;
    for access in [
        Access::REMOTE_WRITE,
        Access::REMOTE_ATOMIC,
        Access::REMOTE_READ | Access::REMOTE_WRITE | Access::BIND,
    ] {
        // SAFETY: the buffer is leaked, so it stays valid for the rest of the test.
        let got = unsafe { rnic.register_mr(pd, ptr, 64, access, to) };
        assert_eq!(got, Err(VerbsError::InvalidAccess), "{access:?}");
        // SAFETY: as above.
        let got = unsafe { rnic.register_mr_at(0x100, pd, ptr, 64, access, to) };
        assert_eq!(got, Err(VerbsError::InvalidAccess), "{access:?}");
    }
    for access in [
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        Access::LOCAL_WRITE | Access::REMOTE_ATOMIC,
        Access::REMOTE_READ,
    ] {
        // SAFETY: as above.
        let got = unsafe { rnic.register_mr(pd, ptr, 64, access, to) };
        assert!(got.is_ok(), "{access:?}");
    }
}

/// Verbs figure 19 and section 7.10.6.1: "If the Consumer attempts to Bind a MW to a
/// Zero-based TO MR, the RI MUST return an error", a Completion Error. The bind completes
/// with a local protection error (figure 23, "SQ Bind errors"), the window stays invalid
/// and a Write through it lands nowhere; the same bind on a VA-based region succeeds.
#[test]
fn a_window_cannot_be_bound_to_a_zero_based_region() {
    let mut p = Pair::new(false);
    let mem = Box::leak(vec![0u64; 8].into_boxed_slice());
    let ptr = NonNull::new(mem.as_mut_ptr() as *mut u8).unwrap();
    let pd = p.b.pd;
    // SAFETY: leaked, valid for the rest of the test.
    let mr = unsafe {
        p.b.rnic
            .register_mr(pd, ptr, 64, Access::LOCAL_WRITE | Access::BIND, 0)
    }
    .unwrap();
    let mw = p.b.rnic.alloc_mw(pd);
    p.post_send(B, bind(1, mw, mr, 0, 64, Access::REMOTE_WRITE));
    p.drive();
    let wc = p.one_wc(B);
    assert_eq!(
        (wc.opcode, wc.status),
        (WcOpcode::BindMw, Status::LocalProtectionError)
    );
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Error));

    let mut p = Pair::new(false);
    let region = p.buffer(B, 64, Access::LOCAL_WRITE | Access::BIND);
    let (mr, base) = p.remote(B, region, 0);
    let mw = p.b.rnic.alloc_mw(p.b.pd);
    p.post_send(B, bind(1, mw, mr, base, 64, Access::REMOTE_WRITE));
    p.drive();
    assert_eq!(p.one_wc(B).status, Status::Success);
}

/// Verbs section 6.2.2.2: when the peer begins an LLP close without a Terminate (a FIN) and
/// every SQ WR and Remote RDMA Read is complete, "the QP MUST transition to the Closing
/// state" with an affiliated asynchronous event, not to Error. With nothing left to do
/// Closing ends in Idle (section 6.2.5), its posted receives flushed.
#[test]
fn a_peer_close_in_rts_with_nothing_outstanding_goes_to_closing_then_idle() {
    let mut p = Pair::new(false);
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    let dst = p.buffer(B, 128, Access::LOCAL_WRITE);
    p.post_recv(B, 1, &[p.sge(B, dst, 0, 64)]);
    p.post_recv(B, 2, &[p.sge(B, dst, 64, 64)]);
    p.post_send(A, send(9, &[p.sge(A, src, 0, 64)]));
    p.drive();
    assert_eq!(p.one_wc(A).status, Status::Success);
    assert_eq!(p.one_wc(B).wr_id, 1);
    p.b.rnic.connection_lost(p.b.qp, true);
    p.drive();
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Idle));
    assert!(p
        .b
        .events
        .contains(&AsyncEvent::ConnectionClosed { qp: p.b.qp }));
    assert_eq!(p.sent_cause(B), None, "a graceful close sends no Terminate");
    let wc = p.one_wc(B);
    assert_eq!((wc.wr_id, wc.status), (2, Status::WrFlushed));
}

/// Verbs sections 6.2.2.2 and 6.2.2.3: a FIN from the peer while a Read of this QP is
/// outstanding moves the QP to Terminate, which sends a Terminate and then ends in Error;
/// the Read is flushed and an asynchronous event reports the transition.
#[test]
fn a_peer_close_in_rts_with_a_read_outstanding_goes_to_terminate() {
    let mut p = Pair::new(false);
    let src = p.buffer(B, 64, Access::REMOTE_READ);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (stag, to) = p.remote(B, src, 0);
    p.post_send(A, read(1, stag, to, &[p.sge(A, sink, 0, 64)]));
    let mut wire = vec![0u8; MSS];
    // The Read Request leaves A, but B's response never comes: B closed.
    p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    p.a.rnic.connection_lost(p.a.qp, true);
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Terminate));
    assert_eq!(p.sent_cause(A), Some(t::RDMAP_LOCAL_CATASTROPHIC));
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
    assert!(p
        .a
        .events
        .contains(&AsyncEvent::ConnectionClosed { qp: p.a.qp }));
    let wc = p.one_wc(A);
    assert_eq!((wc.wr_id, wc.status), (1, Status::WrFlushed));
}
