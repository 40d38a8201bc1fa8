//! One test per remote access violation: the Terminate's layer/type/code, memory untouched,
//! the requester's completion status, and both QPs' states.
//!
//! An RDMA Write completes at the requester once it is handed to the LLP (there is no
//! acknowledgement in iWARP), so a Write that the responder refuses has already completed
//! with success; the requester learns of the violation from the Terminate (an asynchronous
//! event) and its QP enters Error. Reads and atomics wait for their response, so they
//! complete with the remote error.

mod util;

use iwarp_engine::{Access, ConnParams, QpState, SendOp, SendWr, Status, WcOpcode};
use iwarp_wire::ddp::Buffer;
use iwarp_wire::mpa::{FpduEmitter, MpaParams};
use iwarp_wire::rdmap::{self, AOpCode, AtomicRequest, Opcode, RdmapHeader, SegmentRepr};
use iwarp_wire::terminate::{self as t, TermCause};
use util::{Pair, A, B, MSS};

const CANARY: u64 = 0x0123_4567_89ab_cdef;

/// Runs `op` from A against B's 64-byte buffer (registered with `access`, filled with the
/// canary) and checks everything a violation must do.
fn violation(access: Access, op: impl Fn(u32, u64) -> SendOp, expect: TermCause, status: Status) {
    let mut p = Pair::new(false);
    let target = p.buffer(B, 64, access);
    for off in (0..64).step_by(8) {
        p.set_u64(B, target, off, CANARY);
    }
    let (stag, addr) = p.remote(B, target, 0);
    let local = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let op = op(stag, addr);
    let sgl = match op {
        SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. } => vec![p.sge(A, local, 0, 8)],
        _ => vec![p.sge(A, local, 0, 16)],
    };
    p.post_send(A, SendWr::new(42, op, &sgl));
    p.drive();
    assert_eq!(
        p.sent_cause(B),
        Some(expect),
        "Terminate sent by the responder"
    );
    assert_eq!(
        p.received_cause(A),
        Some(expect),
        "Terminate received by the requester"
    );
    for off in (0..64).step_by(8) {
        assert_eq!(
            p.get_u64(B, target, off),
            CANARY,
            "target memory changed at {off}"
        );
    }
    let wcs = p.wcs(A);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!((wcs[0].wr_id, wcs[0].status), (42, status));
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Error));
}

fn write(stag: u32, addr: u64) -> SendOp {
    SendOp::Write {
        remote_stag: stag,
        remote_to: addr,
    }
}
fn read(stag: u32, addr: u64) -> SendOp {
    SendOp::Read {
        remote_stag: stag,
        remote_to: addr,
    }
}
fn fadd(stag: u32, addr: u64) -> SendOp {
    SendOp::FetchAdd {
        remote_stag: stag,
        remote_to: addr,
        add: 1,
        add_mask: 0,
    }
}

const RW: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

#[test]
fn write_to_unknown_stag() {
    violation(
        RW,
        |s, a| write(s + 0x1000, a),
        t::DDP_TAGGED_INVALID_STAG,
        Status::Success,
    );
}

#[test]
fn write_with_wrong_key() {
    violation(
        RW,
        |s, a| write(s ^ 0x7f, a),
        t::DDP_TAGGED_INVALID_STAG,
        Status::Success,
    );
}

#[test]
fn write_without_remote_write_right() {
    violation(
        Access::REMOTE_READ,
        write,
        t::RDMAP_ACCESS_RIGHTS,
        Status::Success,
    );
}

#[test]
fn write_out_of_bounds() {
    violation(
        RW,
        |s, a| write(s, a + 56),
        t::DDP_TAGGED_BASE_BOUNDS,
        Status::Success,
    );
}

#[test]
fn read_out_of_bounds() {
    violation(
        RW,
        |s, a| read(s, a + 60),
        t::RDMAP_BASE_BOUNDS,
        Status::RemoteAccessError,
    );
}

#[test]
fn read_without_remote_read_right() {
    violation(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        read,
        t::RDMAP_ACCESS_RIGHTS,
        Status::RemoteAccessError,
    );
}

#[test]
fn read_of_unknown_stag() {
    violation(
        RW,
        |s, a| read(s + 0x1000, a),
        t::RDMAP_INVALID_STAG,
        Status::RemoteAccessError,
    );
}

#[test]
fn atomic_without_atomic_right() {
    violation(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        fadd,
        t::RDMAP_ACCESS_RIGHTS,
        Status::RemoteAccessError,
    );
}

#[test]
fn misaligned_atomic() {
    violation(
        RW,
        |s, a| fadd(s, a + 4),
        t::RDMAP_CATASTROPHIC_LOCAL,
        Status::RemoteOperationError,
    );
}

#[test]
fn atomic_out_of_bounds() {
    violation(
        RW,
        |s, a| fadd(s, a + 64),
        t::RDMAP_BASE_BOUNDS,
        Status::RemoteAccessError,
    );
}

#[test]
fn invalidated_stag() {
    let mut p = Pair::new(false);
    let target = p.buffer(B, 64, RW);
    p.set_u64(B, target, 0, CANARY);
    let (stag, addr) = p.remote(B, target, 0);
    p.post_send(B, SendWr::new(1, SendOp::LocalInvalidate { stag }, &[]));
    p.drive();
    assert_eq!(p.one_wc(B).opcode, WcOpcode::LocalInv);
    let local = p.buffer(A, 8, Access::LOCAL_WRITE);
    p.post_send(
        A,
        SendWr::new(2, write(stag, addr), &[p.sge(A, local, 0, 8)]),
    );
    p.drive();
    assert_eq!(p.sent_cause(B), Some(t::DDP_TAGGED_INVALID_STAG));
    assert_eq!(p.get_u64(B, target, 0), CANARY);
    assert_eq!(p.one_wc(A).status, Status::Success);
    assert_eq!(p.received_cause(A), Some(t::DDP_TAGGED_INVALID_STAG));
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
}

#[test]
fn stag_of_another_pd() {
    let mut p = Pair::new(false);
    // A region in a second PD of B: B's QP is in the first PD.
    let other_pd = p.b.rnic.alloc_pd();
    let mem = Box::leak(vec![CANARY; 8].into_boxed_slice());
    let ptr = core::ptr::NonNull::new(mem.as_mut_ptr() as *mut u8).unwrap();
    // SAFETY: leaked, valid for the rest of the test.
    let stag = unsafe { p.b.rnic.register_mr(other_pd, ptr, 64, RW, 0) }.unwrap();
    let local = p.buffer(A, 8, Access::LOCAL_WRITE);
    p.post_send(A, SendWr::new(3, write(stag, 0), &[p.sge(A, local, 0, 8)]));
    p.drive();
    assert_eq!(p.sent_cause(B), Some(t::DDP_TAGGED_STAG_NOT_ASSOCIATED));
    assert!(mem.iter().all(|&w| w == CANARY));
    assert_eq!(p.one_wc(A).status, Status::Success);
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
}

#[test]
fn zero_based_region() {
    // Zero-based: tagged offsets count from the region's start, not its address.
    let mut p = Pair::new(false);
    let mem = Box::leak(vec![0u64; 8].into_boxed_slice());
    let ptr = core::ptr::NonNull::new(mem.as_mut_ptr() as *mut u8).unwrap();
    let pd = p.b.pd;
    // SAFETY: leaked, valid for the rest of the test.
    let stag = unsafe { p.b.rnic.register_mr(pd, ptr, 64, RW, 0) }.unwrap();
    let local = p.buffer(A, 8, Access::LOCAL_WRITE);
    p.set_u64(A, local, 0, 0xabcd);
    p.post_send(A, SendWr::new(4, write(stag, 16), &[p.sge(A, local, 0, 8)]));
    p.drive();
    assert_eq!(p.one_wc(A).status, Status::Success);
    assert_eq!(mem[2], 0xabcd);
}

#[test]
fn too_many_reads_for_ird() {
    // A promises the peer an IRD of 1 but the peer (B) believes it may have 4 outstanding.
    let mut pa = ConnParams::new(true, 1, 4, MSS);
    pa.ird = 1;
    let pb = ConnParams::new(true, 4, 4, MSS);
    let mut p = Pair::with(pa, pb, 64, false);
    let src = p.buffer(A, 64, RW);
    let (stag, addr) = p.remote(A, src, 0);
    let sink = p.buffer(B, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    for id in 0..2 {
        p.post_send(
            B,
            SendWr::new(id, read(stag, addr), &[p.sge(B, sink, 0, 64)]),
        );
    }
    // Both requests reach A before it answers the first.
    let mut wire = vec![0u8; 4096];
    let mut bytes = Vec::new();
    while let Some(n) = p.b.rnic.poll_transmit(p.b.qp, &mut wire) {
        bytes.extend_from_slice(&wire[..n]);
    }
    p.a.rnic.handle_stream(p.a.qp, &bytes);
    assert_eq!(p.sent_cause(A), Some(t::DDP_UNTAGGED_NO_BUFFER));
    assert_eq!(p.received_cause(B), Some(t::DDP_UNTAGGED_NO_BUFFER));
}

#[test]
fn ord_limits_outstanding_reads() {
    let p_a = ConnParams::new(true, 8, 1, MSS);
    let mut p = Pair::with(p_a, ConnParams::new(true, 8, 8, MSS), 64, false);
    let src = p.buffer(B, 64, RW);
    let (stag, addr) = p.remote(B, src, 0);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    for id in 0..3 {
        p.post_send(
            A,
            SendWr::new(id, read(stag, addr), &[p.sge(A, sink, 0, 64)]),
        );
    }
    let mut wire = vec![0u8; 4096];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    // ORD 1: the second Read waits for the first response (Verbs section 6.5).
    assert!(p.a.rnic.poll_transmit(p.a.qp, &mut wire[n..]).is_none());
    assert!(!p.a.rnic.wants_transmit(p.a.qp));
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    // One response in, one more request out: never two outstanding.
    let m = p.b.rnic.poll_transmit(p.b.qp, &mut wire).unwrap();
    p.a.rnic.handle_stream(p.a.qp, &wire[..m]);
    assert!(p.a.rnic.poll_transmit(p.a.qp, &mut wire).is_some());
    assert!(p.a.rnic.poll_transmit(p.a.qp, &mut wire).is_none());
    assert_eq!(p.wcs(A).len(), 1);
}

#[test]
fn read_fence_waits_for_reads() {
    let mut p = Pair::new(false);
    let src = p.buffer(B, 64, RW);
    let (stag, addr) = p.remote(B, src, 0);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE);
    p.post_recv(B, 1, &[p.sge(B, dst, 0, 64)]);
    p.post_send(
        A,
        SendWr::new(1, read(stag, addr), &[p.sge(A, sink, 0, 64)]),
    );
    let mut fenced = SendWr::new(
        2,
        SendOp::Send {
            solicited: false,
            invalidate: None,
        },
        &[p.sge(A, sink, 0, 64)],
    );
    fenced.read_fence = true;
    p.post_send(A, fenced);
    let mut wire = vec![0u8; 4096];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    assert!(
        p.a.rnic.poll_transmit(p.a.qp, &mut wire[n..]).is_none(),
        "the fenced Send waits"
    );
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    p.set_u64(B, src, 0, 0x600d);
    p.drive();
    // The Send carried what the Read brought back.
    assert_eq!(p.get_u64(B, dst, 0), 0x600d);
    assert_eq!(
        p.wcs(A).iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![1, 2]
    );
}

#[test]
fn atomic_responses_return_in_request_order() {
    let mut p = Pair::new(false);
    let target = p.buffer(B, 64, RW);
    let (stag, addr) = p.remote(B, target, 0);
    let results: Vec<usize> = (0..4)
        .map(|_| p.buffer(A, 8, Access::LOCAL_WRITE))
        .collect();
    for (i, r) in results.iter().enumerate() {
        let op = SendOp::FetchAdd {
            remote_stag: stag,
            remote_to: addr,
            add: 1 << (8 * i),
            add_mask: 0,
        };
        p.post_send(A, SendWr::new(i as u64, op, &[p.sge(A, *r, 0, 8)]));
    }
    p.drive();
    let ids: Vec<u64> = p.wcs(A).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![0, 1, 2, 3]);
    // Each saw the sum of the ones before it: executed and answered in order.
    let mut expect = 0u64;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(p.get_u64(A, *r, 0), expect);
        expect += 1 << (8 * i);
    }
    assert_eq!(p.get_u64(B, target, 0), expect);
}

/// Sends a hand-made FPDU from B's side of the stream into A.
fn inject(p: &mut Pair, seg: SegmentRepr) {
    let mut hdr = [0u8; 128];
    let hl = seg.emit(&mut hdr).unwrap();
    let mut e = FpduEmitter::new(
        MpaParams {
            crc: true,
            markers: false,
        },
        0,
    );
    let mut out = vec![0u8; 256];
    let n = e.emit(&mut out, &hdr[..hl], &[]).unwrap();
    p.a.rnic.handle_stream(p.a.qp, &out[..n]);
}

#[test]
fn reserved_aopcode() {
    let mut p = Pair::new(false);
    let target = p.buffer(A, 64, RW);
    p.set_u64(A, target, 0, CANARY);
    let (stag, addr) = p.remote(A, target, 0);
    let seg = SegmentRepr {
        version: 1,
        opcode: Opcode::AtomicRequest,
        last: true,
        buffer: Buffer::Untagged {
            qn: rdmap::QN_READ_REQUEST,
            msn: 1,
            mo: 0,
            rsvd_ulp: 0,
        },
        header: RdmapHeader::AtomicRequest(AtomicRequest {
            aopcode: AOpCode::FetchAdd,
            request_id: 1,
            stag,
            to: addr,
            add_swap: 1,
            add_swap_mask: 0,
            compare: 0,
            compare_mask: 0,
        }),
    };
    let mut hdr = [0u8; 128];
    let hl = seg.emit(&mut hdr).unwrap();
    hdr[18 + 3] = 0x01; // AOpCode 1: Swap in the drafts, Reserved in RFC 7306
    let mut e = FpduEmitter::new(
        MpaParams {
            crc: true,
            markers: false,
        },
        0,
    );
    let mut out = vec![0u8; 256];
    let n = e.emit(&mut out, &hdr[..hl], &[]).unwrap();
    p.a.rnic.handle_stream(p.a.qp, &out[..n]);
    assert_eq!(p.sent_cause(A), Some(t::RDMAP_UNEXPECTED_OPCODE));
    assert_eq!(p.get_u64(A, target, 0), CANARY);
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
}

#[test]
fn bad_crc_is_an_llp_terminate() {
    let mut p = Pair::new(false);
    let mut out = vec![0u8; 64];
    let mut e = FpduEmitter::new(
        MpaParams {
            crc: true,
            markers: false,
        },
        0,
    );
    let n = e
        .emit(
            &mut out,
            &[0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
            &[1],
        )
        .unwrap();
    out[n - 1] ^= 0xff;
    p.a.rnic.handle_stream(p.a.qp, &out[..n]);
    assert_eq!(p.sent_cause(A), Some(t::LLP_CRC_ERROR));
    assert_eq!(
        (p.a.rnic.stats.crc_errors, p.a.rnic.stats.terminates_sent),
        (1, 1),
        "counted for the daemon's statistics"
    );
}

#[test]
fn unexpected_read_response() {
    let mut p = Pair::new(false);
    let buf = p.buffer(A, 64, RW);
    let (stag, addr) = p.remote(A, buf, 0);
    inject(
        &mut p,
        SegmentRepr {
            version: 1,
            opcode: Opcode::ReadResponse,
            last: true,
            buffer: Buffer::Tagged { stag, to: addr },
            header: RdmapHeader::None,
        },
    );
    assert_eq!(p.sent_cause(A), Some(t::RDMAP_UNEXPECTED_OPCODE));
}

#[test]
fn rdmap_v2_messages_without_negotiation() {
    let mut p = Pair::new(false);
    inject(
        &mut p,
        SegmentRepr {
            version: 2,
            opcode: Opcode::SendImmediate,
            last: true,
            buffer: Buffer::Untagged {
                qn: 0,
                msn: 1,
                mo: 0,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::None,
        },
    );
    assert_eq!(p.sent_cause(A), Some(t::RDMAP_INVALID_RDMAP_VERSION));
}

#[test]
fn terminate_initiated_locally_reaches_the_peer() {
    let mut p = Pair::new(false);
    let sink = p.buffer(B, 64, Access::LOCAL_WRITE);
    p.post_recv(B, 1, &[p.sge(B, sink, 0, 64)]);
    p.a.rnic.modify_qp(p.a.qp, QpState::Terminate).unwrap();
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Terminate));
    p.drive();
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
    assert_eq!(p.received_cause(B), Some(t::RDMAP_OPERATION_UNSPECIFIED));
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Error));
    assert_eq!(p.one_wc(B).status, Status::WrFlushed);
}

#[test]
fn cq_overflow_raises_the_async_error() {
    let mut p = Pair::with(
        ConnParams::new(true, 8, 8, MSS),
        ConnParams::new(true, 8, 8, MSS),
        2,
        false,
    );
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (stag, addr) = p.remote(B, dst, 0);
    for id in 0..3 {
        p.post_send(
            A,
            SendWr::new(id, write(stag, addr), &[p.sge(A, src, 0, 8)]),
        );
    }
    p.drive();
    assert!(p
        .a
        .events
        .iter()
        .any(|e| matches!(e, iwarp_engine::AsyncEvent::CqOverflow { .. })));
    assert_eq!(p.a.rnic.cq_status(p.a.cq), Some((2, true)));
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
}
