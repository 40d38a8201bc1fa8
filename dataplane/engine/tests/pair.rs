//! Two engines back to back through in-memory byte pipes: every operation, both directions,
//! the edge sizes around the MULPDU, and every byte placed compared.

mod util;

use iwarp_engine::{Access, AsyncEvent, QpState, RecvWr, SendOp, SendWr, Sge, Status, WcOpcode};
use util::{Pair, A, B, MAX_SEND, MAX_WRITE};

fn sizes(max: usize) -> Vec<usize> {
    vec![0, 1, max - 1, max, max + 1, 65536, 1 << 20]
}

#[test]
fn send_receive_every_size_both_directions() {
    for split in [false, true] {
        let mut p = Pair::new(split);
        for (from, to) in [(A, B), (B, A)] {
            for len in sizes(MAX_SEND) {
                let src = p.buffer(from, len.max(1), Access::LOCAL_WRITE);
                let dst = p.buffer(to, len.max(1), Access::LOCAL_WRITE);
                p.fill(from, src, len, len as u8);
                p.post_recv(to, 7, &[p.sge(to, dst, 0, len)]);
                p.post_send(
                    from,
                    SendWr::new(
                        1,
                        SendOp::Send {
                            solicited: false,
                            invalidate: None,
                        },
                        &[p.sge(from, src, 0, len)],
                    ),
                );
                p.drive();
                let wc = p.one_wc(from);
                assert_eq!(
                    (wc.opcode, wc.status, wc.byte_len),
                    (WcOpcode::Send, Status::Success, len as u32)
                );
                let wc = p.one_wc(to);
                assert_eq!(
                    (wc.wr_id, wc.opcode, wc.status, wc.byte_len),
                    (7, WcOpcode::Recv, Status::Success, len as u32)
                );
                assert_eq!(
                    p.bytes(to, dst, len),
                    p.bytes(from, src, len),
                    "send of {len} bytes"
                );
            }
        }
    }
}

#[test]
fn send_scatter_gather() {
    let mut p = Pair::new(true);
    let src = p.buffer(A, 3000, Access::LOCAL_WRITE);
    let dst = p.buffer(B, 3000, Access::LOCAL_WRITE);
    p.fill(A, src, 3000, 3);
    p.post_recv(
        B,
        1,
        &[
            p.sge(B, dst, 0, 100),
            p.sge(B, dst, 1000, 2000),
            p.sge(B, dst, 500, 400),
        ],
    );
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &[p.sge(A, src, 0, 1500), p.sge(A, src, 2000, 1000)],
        ),
    );
    p.drive();
    assert_eq!(p.one_wc(B).byte_len, 2500);
    let s = p.bytes(A, src, 3000);
    let msg: Vec<u8> = [&s[..1500], &s[2000..3000]].concat();
    let d = p.bytes(B, dst, 3000);
    assert_eq!(&d[..100], &msg[..100]);
    assert_eq!(&d[1000..3000], &msg[100..2100]);
    assert_eq!(&d[500..900], &msg[2100..2500]);
}

#[test]
fn write_every_size_both_directions() {
    let mut p = Pair::new(true);
    for (from, to) in [(A, B), (B, A)] {
        for len in sizes(MAX_WRITE) {
            let src = p.buffer(from, len.max(1), Access::LOCAL_WRITE);
            let dst = p.buffer(
                to,
                len.max(1) + 16,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            );
            p.fill(from, src, len, 0x40 ^ len as u8);
            let (stag, to_addr) = p.remote(to, dst, 8);
            p.post_send(
                from,
                SendWr::new(
                    3,
                    SendOp::Write {
                        remote_stag: stag,
                        remote_to: to_addr,
                    },
                    &[p.sge(from, src, 0, len)],
                ),
            );
            p.drive();
            let wc = p.one_wc(from);
            assert_eq!(
                (wc.opcode, wc.status, wc.byte_len),
                (WcOpcode::Write, Status::Success, len as u32)
            );
            assert_eq!(
                &p.bytes(to, dst, len + 8)[8..],
                &p.bytes(from, src, len)[..],
                "write of {len}"
            );
            assert!(
                p.wcs(to).is_empty(),
                "a Write completes nothing at the target"
            );
        }
    }
}

#[test]
fn read_every_size_both_directions() {
    let mut p = Pair::new(true);
    for (from, to) in [(A, B), (B, A)] {
        for len in sizes(MAX_WRITE) {
            let src = p.buffer(to, len.max(1), Access::LOCAL_WRITE | Access::REMOTE_READ);
            let sink = p.buffer(from, len.max(1), Access::LOCAL_WRITE | Access::REMOTE_WRITE);
            p.fill(to, src, len, 0x77 ^ len as u8);
            let (stag, addr) = p.remote(to, src, 0);
            p.post_send(
                from,
                SendWr::new(
                    4,
                    SendOp::Read {
                        remote_stag: stag,
                        remote_to: addr,
                    },
                    &[p.sge(from, sink, 0, len)],
                ),
            );
            p.drive();
            let wc = p.one_wc(from);
            assert_eq!(
                (wc.opcode, wc.status, wc.byte_len),
                (WcOpcode::Read, Status::Success, len as u32)
            );
            assert_eq!(
                p.bytes(from, sink, len),
                p.bytes(to, src, len),
                "read of {len}"
            );
        }
    }
}

#[test]
fn read_sink_without_remote_write_is_refused_with_a_reason() {
    let mut p = Pair::new(false);
    let src = p.buffer(B, 64, Access::REMOTE_READ);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE);
    let (stag, addr) = p.remote(B, src, 0);
    let e =
        p.a.rnic
            .post_send(
                p.a.qp,
                SendWr::new(
                    1,
                    SendOp::Read {
                        remote_stag: stag,
                        remote_to: addr,
                    },
                    &[p.sge(A, sink, 0, 64)],
                ),
            )
            .unwrap_err();
    assert_eq!(e, iwarp_engine::VerbsError::ReadSinkNeedsRemoteWrite);
    assert!(e.to_string().contains("remote write"));
}

#[test]
fn atomics_fetch_add_cmp_swap_swap_and_masks() {
    let mut p = Pair::new(false);
    for (from, to) in [(A, B), (B, A)] {
        let target = p.buffer(to, 64, Access::REMOTE_ATOMIC | Access::LOCAL_WRITE);
        let result = p.buffer(from, 8, Access::LOCAL_WRITE);
        p.set_u64(to, target, 8, 100);
        let (stag, addr) = p.remote(to, target, 8);
        let run = |p: &mut Pair, op: SendOp| -> u64 {
            p.post_send(from, SendWr::new(9, op, &[p.sge(from, result, 0, 8)]));
            p.drive();
            let wc = p.one_wc(from);
            assert_eq!(wc.status, Status::Success);
            p.get_u64(from, result, 0)
        };
        assert_eq!(
            run(
                &mut p,
                SendOp::FetchAdd {
                    remote_stag: stag,
                    remote_to: addr,
                    add: 5,
                    add_mask: 0
                }
            ),
            100
        );
        assert_eq!(p.get_u64(to, target, 8), 105);
        // CmpSwap that matches.
        let cs = |compare, swap| SendOp::CmpSwap {
            remote_stag: stag,
            remote_to: addr,
            compare,
            compare_mask: u64::MAX,
            swap,
            swap_mask: u64::MAX,
        };
        assert_eq!(run(&mut p, cs(105, 7)), 105);
        assert_eq!(p.get_u64(to, target, 8), 7);
        // CmpSwap that does not match leaves memory alone.
        assert_eq!(run(&mut p, cs(8, 9)), 7);
        assert_eq!(p.get_u64(to, target, 8), 7);
        // Swap = CmpSwap with a zero compare mask.
        assert_eq!(run(&mut p, SendOp::swap(stag, addr, 42)), 7);
        assert_eq!(p.get_u64(to, target, 8), 42);
        assert_eq!(run(&mut p, SendOp::cmp_swap(stag, addr, 42, 43)), 42);
        assert_eq!(p.get_u64(to, target, 8), 43);
        // The deliberate choice for a zero swap mask (what siw's iwarpex branch sends for a
        // plain CmpSwap): RFC 7306's pseudocode read literally, no bit is swapped, the
        // original comes back.
        assert_eq!(
            run(
                &mut p,
                SendOp::CmpSwap {
                    remote_stag: stag,
                    remote_to: addr,
                    compare: 43,
                    compare_mask: u64::MAX,
                    swap: 44,
                    swap_mask: 0
                }
            ),
            43
        );
        assert_eq!(p.get_u64(to, target, 8), 43);
        // Masked CmpSwap: compare the low byte only, swap the high 32 bits only.
        p.set_u64(to, target, 8, 0x1111_1111_2222_2233);
        assert_eq!(
            run(
                &mut p,
                SendOp::CmpSwap {
                    remote_stag: stag,
                    remote_to: addr,
                    compare: 0x33,
                    compare_mask: 0xff,
                    swap: 0xaaaa_aaaa_0000_0000,
                    swap_mask: 0xffff_ffff_0000_0000
                }
            ),
            0x1111_1111_2222_2233
        );
        assert_eq!(p.get_u64(to, target, 8), 0xaaaa_aaaa_2222_2233);
        // Masked FetchAdd: two 32-bit lanes, the low lane's carry dropped.
        p.set_u64(to, target, 8, 0x0000_0001_ffff_ffff);
        run(
            &mut p,
            SendOp::FetchAdd {
                remote_stag: stag,
                remote_to: addr,
                add: 0x0000_0001_0000_0001,
                add_mask: 0x8000_0000_8000_0000,
            },
        );
        assert_eq!(p.get_u64(to, target, 8), 0x0000_0002_0000_0000);
    }
}

#[test]
fn immediate_data_and_write_with_immediate() {
    let mut p = Pair::new(false);
    let dst = p.buffer(B, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let src = p.buffer(A, 4096, Access::LOCAL_WRITE);
    p.fill(A, src, 4096, 9);
    p.post_recv(B, 11, &[]);
    p.post_recv(B, 12, &[]);
    p.b.rnic.req_notify_cq(p.b.cq, true).unwrap();
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::Immediate {
                imm: 0xfeed,
                solicited: false,
            },
            &[],
        ),
    );
    p.drive();
    let wc = p.one_wc(B);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.imm, wc.byte_len),
        (11, WcOpcode::RecvImm, Some(0xfeed), 0)
    );
    assert!(!p.b.rnic.take_cq_event(p.b.cq), "not solicited: no event");
    assert_eq!(p.one_wc(A).opcode, WcOpcode::Immediate);
    let (stag, addr) = p.remote(B, dst, 0);
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::WriteImm {
                remote_stag: stag,
                remote_to: addr,
                imm: 77,
                solicited: false,
            },
            &[p.sge(A, src, 0, 4096)],
        ),
    );
    p.drive();
    let wc = p.one_wc(A);
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Write, 4096));
    // The Immediate Data completes after the Write is placed (RFC 7306 section 7).
    let wc = p.one_wc(B);
    assert_eq!((wc.wr_id, wc.imm), (12, Some(77)));
    assert_eq!(p.bytes(B, dst, 4096), p.bytes(A, src, 4096));
    p.post_recv(B, 13, &[]);
    p.post_send(
        A,
        SendWr::new(
            3,
            SendOp::Immediate {
                imm: 1,
                solicited: true,
            },
            &[],
        ),
    );
    p.drive();
    assert!(p.one_wc(B).solicited);
    assert!(
        p.b.rnic.take_cq_event(p.b.cq),
        "solicited Immediate Data raises the event"
    );
    // Write with Immediate and SE (RFC 7306 section 6): its Immediate Data carries the SE
    // bit, so the receive completion is solicited (Verbs section 8.3.4).
    p.post_recv(B, 14, &[]);
    p.b.rnic.req_notify_cq(p.b.cq, true).unwrap();
    p.post_send(
        A,
        SendWr::new(
            4,
            SendOp::WriteImm {
                remote_stag: stag,
                remote_to: addr,
                imm: 78,
                solicited: true,
            },
            &[p.sge(A, src, 0, 64)],
        ),
    );
    p.drive();
    let wc = p.one_wc(B);
    assert_eq!((wc.wr_id, wc.imm, wc.solicited), (14, Some(78), true));
    assert!(
        p.b.rnic.take_cq_event(p.b.cq),
        "Write with Immediate and SE raises the event"
    );
}

#[test]
fn send_with_invalidate_invalidates_the_stag() {
    let mut p = Pair::new(false);
    let exposed = p.buffer(B, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (stag, addr) = p.remote(B, exposed, 0);
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE);
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.post_recv(B, 5, &[p.sge(B, dst, 0, 64)]);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::Send {
                solicited: true,
                invalidate: Some(stag),
            },
            &[p.sge(A, src, 0, 8)],
        ),
    );
    p.drive();
    let wc = p.one_wc(B);
    assert_eq!((wc.invalidated_stag, wc.solicited), (Some(stag), true));
    // A Write to the invalidated STag now fails.
    p.set_u64(B, exposed, 0, 0x5a5a);
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::Write {
                remote_stag: stag,
                remote_to: addr,
            },
            &[p.sge(A, src, 0, 8)],
        ),
    );
    p.drive();
    assert_eq!(p.get_u64(B, exposed, 0), 0x5a5a);
    assert_eq!(p.b.rnic.qp_state(p.b.qp), Some(QpState::Error));
}

#[test]
fn local_invalidate() {
    let mut p = Pair::new(false);
    let buf = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (stag, _) = p.remote(A, buf, 0);
    p.post_send(A, SendWr::new(8, SendOp::LocalInvalidate { stag }, &[]));
    p.drive();
    let wc = p.one_wc(A);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (8, WcOpcode::LocalInv, Status::Success)
    );
    assert!(p.wcs(B).is_empty());
}

#[test]
fn completions_leave_in_send_queue_order() {
    // A Read followed by a Send: the Send is on the wire first but completes after the Read
    // (Verbs: SQ completions in order).
    let mut p = Pair::new(false);
    let src = p.buffer(B, 64, Access::REMOTE_READ);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE);
    let (stag, addr) = p.remote(B, src, 0);
    p.post_recv(B, 1, &[p.sge(B, dst, 0, 64)]);
    p.post_send(
        A,
        SendWr::new(
            10,
            SendOp::Read {
                remote_stag: stag,
                remote_to: addr,
            },
            &[p.sge(A, sink, 0, 64)],
        ),
    );
    p.post_send(
        A,
        SendWr::new(
            11,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &[p.sge(A, sink, 0, 4)],
        ),
    );
    p.drive();
    let ids: Vec<u64> = p.wcs(A).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![10, 11]);
}

#[test]
fn unsignaled_work_completes_silently() {
    let mut p = Pair::new(false);
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (stag, addr) = p.remote(B, dst, 0);
    let mut wr = SendWr::new(
        1,
        SendOp::Write {
            remote_stag: stag,
            remote_to: addr,
        },
        &[p.sge(A, src, 0, 64)],
    );
    wr.signaled = false;
    p.post_send(A, wr);
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::Write {
                remote_stag: stag,
                remote_to: addr,
            },
            &[p.sge(A, src, 0, 64)],
        ),
    );
    p.drive();
    let ids: Vec<u64> = p.wcs(A).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![2]);
}

#[test]
fn error_state_flushes_everything() {
    let mut p = Pair::new(false);
    let buf = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.post_recv(A, 1, &[p.sge(A, buf, 0, 64)]);
    p.post_recv(A, 2, &[p.sge(A, buf, 0, 64)]);
    p.post_send(
        A,
        SendWr::new(
            3,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &[p.sge(A, buf, 0, 8)],
        ),
    );
    p.a.rnic.modify_qp(p.a.qp, QpState::Error).unwrap();
    let wcs = p.wcs(A);
    assert_eq!(wcs.len(), 3);
    assert!(wcs.iter().all(|w| w.status == Status::WrFlushed));
    // Posting in Error completes at once with the flush status.
    p.post_recv(A, 4, &[p.sge(A, buf, 0, 64)]);
    assert_eq!(p.one_wc(A).status, Status::WrFlushed);
    assert!(matches!(
        p.a.rnic.poll_event(),
        Some(AsyncEvent::QpError { .. })
    ));
}

#[test]
fn modify_qp_follows_the_state_diagram() {
    let mut p = Pair::new(false);
    assert_eq!(
        p.a.rnic.modify_qp(p.a.qp, QpState::Idle),
        Err(iwarp_engine::VerbsError::InvalidModify)
    );
    // RTS -> RTS is allowed (Verbs section 6.2.2.1); with no attributes it changes nothing.
    assert_eq!(p.a.rnic.modify_qp(p.a.qp, QpState::Rts), Ok(()));
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Rts));
    p.a.rnic.modify_qp(p.a.qp, QpState::Closing).unwrap();
    assert_eq!(
        p.a.rnic.qp_state(p.a.qp),
        Some(QpState::Idle),
        "nothing outstanding: straight to Idle"
    );
    assert_eq!(
        p.a.rnic.modify_qp(p.a.qp, QpState::Closing),
        Err(iwarp_engine::VerbsError::InvalidModify)
    );
    let buf = p.buffer(A, 8, Access::LOCAL_WRITE);
    // Idle (Verbs figure 7): receives and sends are enqueued, not processed.
    p.post_recv(A, 1, &[p.sge(A, buf, 0, 8)]);
    let e = p.a.rnic.post_send(
        p.a.qp,
        SendWr::new(
            1,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &[],
        ),
    );
    assert_eq!(e, Ok(()));
    assert_eq!(p.a.rnic.poll_transmit(p.a.qp, &mut [0u8; 256]), None);
    assert!(p.wcs(A).is_empty());
}

#[test]
fn graceful_close_waits_for_outstanding_reads() {
    let mut p = Pair::new(false);
    let src = p.buffer(B, 64, Access::REMOTE_READ);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (stag, addr) = p.remote(B, src, 0);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::Read {
                remote_stag: stag,
                remote_to: addr,
            },
            &[p.sge(A, sink, 0, 64)],
        ),
    );
    let mut buf = vec![0u8; 2048];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut buf).unwrap();
    p.a.rnic.modify_qp(p.a.qp, QpState::Closing).unwrap();
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Closing));
    p.b.rnic.handle_stream(p.b.qp, &buf[..n]);
    p.drive();
    assert_eq!(p.one_wc(A).status, Status::Success);
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Idle));
}

#[test]
fn abortive_teardown_completes_with_llp_error() {
    let mut p = Pair::new(false);
    let src = p.buffer(B, 64, Access::REMOTE_READ);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (stag, addr) = p.remote(B, src, 0);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::Read {
                remote_stag: stag,
                remote_to: addr,
            },
            &[p.sge(A, sink, 0, 64)],
        ),
    );
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::Read {
                remote_stag: stag,
                remote_to: addr,
            },
            &[p.sge(A, sink, 0, 64)],
        ),
    );
    let mut buf = vec![0u8; 2048];
    p.a.rnic.poll_transmit(p.a.qp, &mut buf).unwrap();
    p.a.rnic.connection_lost(p.a.qp, false);
    let wcs = p.wcs(A);
    assert_eq!(
        wcs.iter().map(|w| w.status).collect::<Vec<_>>(),
        vec![Status::LlpError, Status::WrFlushed]
    );
    assert_eq!(p.a.rnic.qp_state(p.a.qp), Some(QpState::Error));
}

#[test]
fn recv_queue_empty_is_a_terminate() {
    let mut p = Pair::new(false);
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &[p.sge(A, src, 0, 8)],
        ),
    );
    p.drive();
    assert_eq!(
        p.sent_cause(B),
        Some(iwarp_wire::terminate::DDP_UNTAGGED_NO_BUFFER)
    );
    assert_eq!(
        p.received_cause(A),
        Some(iwarp_wire::terminate::DDP_UNTAGGED_NO_BUFFER)
    );
}

#[test]
fn receive_too_small_is_a_length_error() {
    let mut p = Pair::new(false);
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE);
    p.post_recv(B, 1, &[p.sge(B, dst, 0, 16)]);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &[p.sge(A, src, 0, 32)],
        ),
    );
    p.drive();
    let wc = p.one_wc(B);
    assert_eq!(wc.status, Status::LocalLengthError);
    assert_eq!(
        p.sent_cause(B),
        Some(iwarp_wire::terminate::DDP_UNTAGGED_TOO_LONG)
    );
}

#[test]
fn unused_recv_wr_fields() {
    // RecvWr with no SGE accepts zero-length Sends.
    let mut p = Pair::new(false);
    p.post_recv(B, 3, &[]);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &[],
        ),
    );
    p.drive();
    assert_eq!(p.one_wc(B).byte_len, 0);
    let _ = RecvWr::new(0, &[Sge::default()]);
}

#[test]
fn markers_negotiated_every_operation() {
    let mut params = iwarp_engine::ConnParams::new(true, 8, 8, util::MSS);
    params.tx.markers = true;
    params.rx.markers = true;
    let mut p = Pair::with(params, params, 4096, true);
    for len in [0usize, 1, 511, 512, 513, 1400, 65536] {
        let src = p.buffer(A, len.max(1), Access::LOCAL_WRITE | Access::REMOTE_READ);
        let dst = p.buffer(B, len.max(1), Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        p.fill(A, src, len, 0x11 ^ len as u8);
        p.post_recv(B, 1, &[p.sge(B, dst, 0, len)]);
        p.post_send(
            A,
            SendWr::new(
                1,
                SendOp::Send {
                    solicited: false,
                    invalidate: None,
                },
                &[p.sge(A, src, 0, len)],
            ),
        );
        let (stag, addr) = p.remote(A, src, 0);
        let sink = p.buffer(B, len.max(1), Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        p.post_send(
            B,
            SendWr::new(
                2,
                SendOp::Read {
                    remote_stag: stag,
                    remote_to: addr,
                },
                &[p.sge(B, sink, 0, len)],
            ),
        );
        p.drive();
        assert_eq!(p.one_wc(A).status, Status::Success);
        let wcs = p.wcs(B);
        assert_eq!(wcs.len(), 2);
        assert!(wcs.iter().all(|w| w.status == Status::Success));
        assert!(
            p.bytes(B, dst, len) == p.bytes(A, src, len),
            "send with markers, {len}"
        );
        assert!(
            p.bytes(B, sink, len) == p.bytes(A, src, len),
            "read with markers, {len}"
        );
    }
}
