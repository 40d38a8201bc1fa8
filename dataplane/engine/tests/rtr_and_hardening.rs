//! Peer-to-peer mode's RTR (RFC 6581 section 5), and hardening found in review: the Read
//! Response sink range, atomics running exactly once when the response has to wait for
//! room, a Send with Invalidate that cannot invalidate, and which headers a Terminate
//! copies.

mod util;

use iwarp_engine::{
    Access, ConnParams, PeerToPeer, QpState, RtrKind, SendOp, SendWr, Status, WcOpcode,
};
use iwarp_wire::terminate as t;
use util::{Pair, A, B, MSS};

const RW: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_ATOMIC.0,
);

fn p2p_pair(rtr: RtrKind) -> Pair {
    let mut pa = ConnParams::new(true, 8, 8, MSS);
    pa.p2p = Some(PeerToPeer {
        rtr,
        initiator: true,
    });
    let mut pb = pa;
    pb.p2p = Some(PeerToPeer {
        rtr,
        initiator: false,
    });
    Pair::with(pa, pb, 64, true)
}

fn send_both_ways(p: &mut Pair) {
    for (from, to) in [(A, B), (B, A)] {
        let src = p.buffer(from, 100, RW);
        let dst = p.buffer(to, 100, RW);
        p.fill(from, src, 100, from as u8 + 3);
        p.post_recv(to, 7, &[p.sge(to, dst, 0, 100)]);
        p.post_send(
            from,
            SendWr::new(
                9,
                SendOp::Send {
                    solicited: false,
                    invalidate: None,
                },
                &[p.sge(from, src, 0, 100)],
            ),
        );
        p.drive();
        assert_eq!(p.bytes(to, dst, 100), p.bytes(from, src, 100));
        let wc = p.one_wc(to);
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (7, Status::Success, 100)
        );
        let wc = p.one_wc(from);
        assert_eq!((wc.wr_id, wc.status), (9, Status::Success));
    }
}

#[test]
fn rtr_of_each_kind_is_absorbed_and_then_traffic_flows() {
    for kind in [RtrKind::Send, RtrKind::Write, RtrKind::Read] {
        let mut p = p2p_pair(kind);
        send_both_ways(&mut p);
        assert!(p.a.events.is_empty() && p.b.events.is_empty(), "{kind:?}");
        assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Rts));
        assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Rts));
    }
}

#[test]
fn responder_sends_nothing_before_the_rtr() {
    let mut p = p2p_pair(RtrKind::Write);
    let src = p.buffer(B, 8, RW);
    p.post_send(
        B,
        SendWr::new(
            1,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &[p.sge(B, src, 0, 8)],
        ),
    );
    let mut wire = vec![0u8; MSS];
    assert!(!p.b.rnic.wants_transmit(p.b.qp));
    assert!(p.b.rnic.poll_transmit(p.b.qp, &mut wire).is_none());
    // The initiator's first FPDU is the RTR, even with nothing posted.
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    assert!(p.a.rnic.poll_transmit(p.a.qp, &mut wire[n..]).is_none());
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    assert!(p.b.rnic.wants_transmit(p.b.qp));
}

#[test]
fn a_first_message_other_than_the_agreed_rtr_is_a_terminate() {
    // A believes a Write RTR was agreed, B a Read RTR: B refuses the Write.
    let mut pa = ConnParams::new(true, 8, 8, MSS);
    pa.p2p = Some(PeerToPeer {
        rtr: RtrKind::Write,
        initiator: true,
    });
    let mut pb = pa;
    pb.p2p = Some(PeerToPeer {
        rtr: RtrKind::Read,
        initiator: false,
    });
    let mut p = Pair::with(pa, pb, 64, false);
    assert_eq!(p.sent_cause(B), Some(t::RDMAP_UNEXPECTED_OPCODE));
    assert_eq!(p.received_cause(A), Some(t::RDMAP_UNEXPECTED_OPCODE));
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Error));
}

#[test]
fn read_response_outside_the_advertised_sink_is_refused() {
    // A reads 8 bytes; a forged Read Response aims past them, inside A's registered region.
    let mut p = Pair::new(false);
    let src = p.buffer(B, 64, RW);
    let (stag, to) = p.remote(B, src, 0);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::Read {
                remote_stag: stag,
                remote_to: to,
            },
            &[p.sge(A, sink, 0, 8)],
        ),
    );
    let mut wire = vec![0u8; MSS];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    assert!(n > 0);
    // The forged Read Response comes from a second pair's B, asked by a hand-made Read
    // Request for 16 bytes into A's sink at +8 (A asked for 8 at +0).
    let mut q = Pair::new(false);
    let qsrc = q.buffer(B, 64, RW);
    q.fill(B, qsrc, 64, 0x55);
    let (qstag, qto) = q.remote(B, qsrc, 0);
    let (sink_stag, sink_to) = p.remote(A, sink, 8);
    let mut req = vec![0u8; MSS];
    let seg = iwarp_wire::rdmap::SegmentRepr {
        version: 1,
        opcode: iwarp_wire::rdmap::Opcode::ReadRequest,
        last: true,
        buffer: iwarp_wire::ddp::Buffer::Untagged {
            qn: 1,
            msn: 1,
            mo: 0,
            rsvd_ulp: 0,
        },
        header: iwarp_wire::rdmap::RdmapHeader::ReadRequest(iwarp_wire::rdmap::ReadRequest {
            sink_stag,
            sink_to,
            size: 16,
            src_stag: qstag,
            src_to: qto,
        }),
    };
    let mut hdr = [0u8; 64];
    let hl = seg.emit(&mut hdr).unwrap();
    let mut em = iwarp_wire::mpa::FpduEmitter::new(
        iwarp_wire::mpa::MpaParams {
            crc: true,
            markers: false,
        },
        0,
    );
    let m = em.emit(&mut req, &hdr[..hl], &[]).unwrap();
    q.b.rnic.handle_stream(q.b.qp, &req[..m]);
    let k = q.b.rnic.poll_transmit(q.b.qp, &mut wire).unwrap();
    let before = p.bytes(A, sink, 64);
    p.a.rnic.handle_stream(p.a.qp, &wire[..k]);
    assert_eq!(p.sent_cause(A), Some(t::DDP_TAGGED_BASE_BOUNDS));
    assert_eq!(p.bytes(A, sink, 64), before, "no byte placed");
    let wc = p.one_wc(A);
    assert_eq!((wc.wr_id, wc.opcode), (1, WcOpcode::Read));
    assert_ne!(wc.status, Status::Success);
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
}

#[test]
fn an_atomic_runs_once_even_when_its_response_waits_for_room() {
    let mut p = Pair::new(false);
    let target = p.buffer(B, 8, RW);
    p.set_u64(B, target, 0, 100);
    let (stag, to) = p.remote(B, target, 0);
    let result = p.buffer(A, 8, RW);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::FetchAdd {
                remote_stag: stag,
                remote_to: to,
                add: 5,
                add_mask: 0,
            },
            &[p.sge(A, result, 0, 8)],
        ),
    );
    let mut wire = vec![0u8; MSS];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    // Too small for the response: nothing comes out, twice.
    let mut tiny = [0u8; 8];
    assert!(p.b.rnic.poll_transmit(p.b.qp, &mut tiny).is_none());
    assert!(p.b.rnic.poll_transmit(p.b.qp, &mut tiny).is_none());
    p.drive();
    assert_eq!(p.get_u64(B, target, 0), 105, "added exactly once");
    assert_eq!(p.get_u64(A, result, 0), 100);
    assert_eq!(p.one_wc(A).status, Status::Success);
}

#[test]
fn send_with_invalidate_of_an_unknown_stag_completes_the_receive_in_error() {
    let mut p = Pair::new(false);
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE);
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.post_recv(B, 5, &[p.sge(B, dst, 0, 64)]);
    p.post_recv(B, 6, &[p.sge(B, dst, 0, 64)]);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::Send {
                solicited: false,
                invalidate: Some(0xdead_0001),
            },
            &[p.sge(A, src, 0, 8)],
        ),
    );
    assert_eq!(p.sent_cause(B), Some(t::RDMAP_PROTECTION_CANNOT_INVALIDATE));
    let wcs = p.wcs(B);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (5, Status::RemoteAccessError)
    );
    assert_eq!((wcs[1].wr_id, wcs[1].status), (6, Status::WrFlushed));
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Error));
}

/// The Terminate's copied headers: the Read Request's RDMA header is included (RFC 5040
/// section 4.8), an atomic request's is not (RFC 7306 section 8.1); the DDP header always.
#[test]
fn terminate_copies_the_read_request_header_but_not_the_atomic_header() {
    use iwarp_wire::mpa::{Deframer, MpaParams};
    use iwarp_wire::rdmap::{RdmapHeader, SegmentRepr};
    for atomic in [false, true] {
        let mut p = Pair::new(false);
        let target = p.buffer(B, 64, Access::LOCAL_WRITE);
        let (stag, to) = p.remote(B, target, 0);
        let local = p.buffer(A, 64, RW);
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
        let len = if atomic { 8 } else { 64 };
        p.post_send(A, SendWr::new(1, op, &[p.sge(A, local, 0, len)]));
        let mut wire = vec![0u8; MSS];
        let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
        p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
        let m = p.b.rnic.poll_transmit(p.b.qp, &mut wire).unwrap();
        let mut d = Deframer::new(
            MpaParams {
                crc: true,
                markers: false,
            },
            65535,
            0,
        );
        let mut seen = None;
        d.feed(&wire[..m], |u| {
            if let Ok((seg, _)) = SegmentRepr::parse(u) {
                if let RdmapHeader::Terminate(t) = seg.header {
                    seen = Some((
                        t.cause,
                        t.ddp_header.as_slice().len(),
                        t.rdmap_header.as_slice().len(),
                    ));
                }
            }
        })
        .unwrap();
        let (cause, ddp, rdma) = seen.expect("a Terminate");
        assert_eq!(cause, t::RDMAP_ACCESS_RIGHTS);
        assert_eq!(ddp, 18, "untagged DDP header copied");
        assert_eq!(rdma, if atomic { 0 } else { 28 }, "atomic: {atomic}");
    }
}
