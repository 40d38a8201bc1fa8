//! Inline data, fences, the shared receive queue, memory windows, fast-registration and the
//! RDMAP version 2 operations (Send with Immediate, Read V2).

mod util;

use iwarp_engine::{Access, AsyncEvent, RecvWr, SendOp, SendWr, Status, VerbsError, WcOpcode};
use iwarp_wire::terminate as t;
use util::{Pair, A, B, MAX_SEND, MAX_WRITE};

#[test]
fn inline_send_and_write() {
    let mut p = Pair::new(false);
    let dst = p.buffer(B, 128, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    p.post_recv(B, 1, &[p.sge(B, dst, 0, 64)]);
    let msg: Vec<u8> = (0..64).collect();
    p.post_send(
        A,
        SendWr::with_inline(
            1,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &msg,
        )
        .unwrap(),
    );
    p.drive();
    assert_eq!(p.one_wc(B).byte_len, 64);
    assert_eq!(p.bytes(B, dst, 64), msg);
    let (stag, addr) = p.remote(B, dst, 64);
    p.post_send(
        A,
        SendWr::with_inline(
            2,
            SendOp::Write {
                remote_stag: stag,
                remote_to: addr,
            },
            &msg[..10],
        )
        .unwrap(),
    );
    p.drive();
    assert_eq!(&p.bytes(B, dst, 74)[64..], &msg[..10]);
    assert!(SendWr::with_inline(
        3,
        SendOp::Send {
            solicited: false,
            invalidate: None
        },
        &[0; 65]
    )
    .is_none());
    let bad = SendWr::with_inline(
        4,
        SendOp::Read {
            remote_stag: stag,
            remote_to: addr,
        },
        &[1],
    )
    .unwrap();
    assert_eq!(
        p.a.rnic.post_send(p.a.qp, bad),
        Err(VerbsError::InvalidInline)
    );
}

#[test]
fn local_fence_waits_for_every_prior_wr() {
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
    let mut fenced = SendWr::new(
        2,
        SendOp::LocalInvalidate {
            stag: p.sge(A, sink, 0, 0).stag,
        },
        &[],
    );
    fenced.local_fence = true;
    p.post_send(A, fenced);
    let mut wire = vec![0u8; 4096];
    let n = p.a.rnic.poll_transmit(p.a.qp, &mut wire).unwrap();
    // The Local Invalidate must not run while the Read that lands in that region is out.
    assert!(p.a.rnic.poll_transmit(p.a.qp, &mut wire[n..]).is_none());
    p.b.rnic.handle_stream(p.b.qp, &wire[..n]);
    p.drive();
    let wcs = p.wcs(A);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, Status::Success), (2, Status::Success)]
    );
}

#[test]
fn shared_receive_queue_and_its_limit_event() {
    let mut p = Pair::with_srq();
    let srq = p.b.srq.unwrap();
    let dst = p.buffer(B, 256, Access::LOCAL_WRITE);
    for i in 0..4 {
        let sge = p.sge(B, dst, i * 64, 64);
        p.b.rnic
            .post_srq_recv(srq, RecvWr::new(100 + i as u64, &[sge]))
            .unwrap();
    }
    p.b.rnic.arm_srq_limit(srq, 3).unwrap();
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.fill(A, src, 64, 1);
    for _ in 0..2 {
        p.post_send(
            A,
            SendWr::new(
                1,
                SendOp::Send {
                    solicited: false,
                    invalidate: None,
                },
                &[p.sge(A, src, 0, 64)],
            ),
        );
    }
    p.drive();
    let ids: Vec<u64> = p.wcs(B).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![100, 101]);
    let limits =
        p.b.events
            .iter()
            .filter(|e| matches!(e, AsyncEvent::SrqLimitReached { .. }))
            .count();
    assert_eq!(limits, 1, "raised once, when the S-RQ fell below 3");
    assert_eq!(&p.bytes(B, dst, 128)[64..], &p.bytes(A, src, 64)[..]);
}

#[test]
fn memory_window_bind_and_bounds() {
    let mut p = Pair::new(false);
    let region = p.buffer(B, 256, Access::LOCAL_WRITE | Access::BIND);
    let (mr, base) = p.remote(B, region, 0);
    let pd = p.b.pd;
    let mw = p.b.rnic.alloc_mw(pd);
    // Unbound: unusable.
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.fill(A, src, 64, 5);
    p.post_send(
        B,
        SendWr::new(
            1,
            SendOp::BindMw {
                mw,
                mr,
                to: base + 64,
                len: 64,
                access: Access::REMOTE_WRITE,
            },
            &[],
        ),
    );
    p.drive();
    assert_eq!(p.one_wc(B).opcode, WcOpcode::BindMw);
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::Write {
                remote_stag: mw,
                remote_to: base + 64,
            },
            &[p.sge(A, src, 0, 64)],
        ),
    );
    p.drive();
    assert_eq!(p.one_wc(A).status, Status::Success);
    assert_eq!(&p.bytes(B, region, 128)[64..], &p.bytes(A, src, 64)[..]);
    // Outside the window (though inside the region): refused.
    p.post_send(
        A,
        SendWr::new(
            3,
            SendOp::Write {
                remote_stag: mw,
                remote_to: base + 120,
            },
            &[p.sge(A, src, 0, 16)],
        ),
    );
    p.drive();
    assert_eq!(p.sent_cause(B), Some(t::DDP_TAGGED_BASE_BOUNDS));
    assert!(p.bytes(B, region, 256)[128..].iter().all(|&b| b == 0));
}

#[test]
fn bind_needs_the_bind_right() {
    let mut p = Pair::new(false);
    let region = p.buffer(B, 64, Access::LOCAL_WRITE);
    let (mr, base) = p.remote(B, region, 0);
    let pd = p.b.pd;
    let mw = p.b.rnic.alloc_mw(pd);
    p.post_send(
        B,
        SendWr::new(
            1,
            SendOp::BindMw {
                mw,
                mr,
                to: base,
                len: 64,
                access: Access::REMOTE_WRITE,
            },
            &[],
        ),
    );
    p.drive();
    assert_eq!(p.wcs(B)[0].status, Status::LocalProtectionError);
}

#[test]
fn fast_register_then_remote_read() {
    let mut p = Pair::new(false);
    let backing = p.buffer(B, 4096, Access::LOCAL_WRITE);
    p.fill(B, backing, 4096, 3);
    let source = p.remote(B, backing, 0).0;
    let pd = p.b.pd;
    let stag = p.b.rnic.alloc_fastreg_stag(pd);
    p.post_send(
        B,
        SendWr::new(
            1,
            SendOp::FastRegister {
                stag,
                source,
                offset: 1024,
                len: 1024,
                access: Access::REMOTE_READ,
                base_to: 0,
            },
            &[],
        ),
    );
    p.drive();
    assert_eq!(p.one_wc(B).opcode, WcOpcode::FastReg);
    let sink = p.buffer(A, 1024, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::Read {
                remote_stag: stag,
                remote_to: 0,
            },
            &[p.sge(A, sink, 0, 1024)],
        ),
    );
    p.drive();
    assert_eq!(p.one_wc(A).status, Status::Success);
    assert_eq!(
        p.bytes(A, sink, 1024),
        p.bytes(B, backing, 2048)[1024..].to_vec()
    );
}

#[test]
fn a_region_with_a_bound_window_or_fast_registration_stays_registered() {
    // Verbs section 7.2.9: deregistering a region that windows still name is an immediate
    // error; here it also keeps the memory they point into mapped.
    let mut p = Pair::new(false);
    let region = p.buffer(B, 4096, Access::LOCAL_WRITE | Access::BIND);
    let (mr, base) = p.remote(B, region, 0);
    let pd = p.b.pd;
    let mw = p.b.rnic.alloc_mw(pd);
    let fr = p.b.rnic.alloc_fastreg_stag(pd);
    let bind = SendOp::BindMw {
        mw,
        mr,
        to: base,
        len: 64,
        access: Access::REMOTE_WRITE,
    };
    let fast = SendOp::FastRegister {
        stag: fr,
        source: mr,
        offset: 0,
        len: 128,
        access: Access::REMOTE_READ,
        base_to: 0,
    };
    p.post_send(B, SendWr::new(1, bind, &[]));
    p.post_send(B, SendWr::new(2, fast, &[]));
    p.drive();
    assert!(p.wcs(B).iter().all(|w| w.status == Status::Success));
    assert_eq!(p.b.rnic.deregister_mr(mr), Err(VerbsError::StagInUse));
    // Invalidating the window leaves the fast-registered STag: still refused.
    p.post_send(B, SendWr::new(3, SendOp::LocalInvalidate { stag: mw }, &[]));
    p.drive();
    assert_eq!(p.one_wc(B).status, Status::Success);
    assert_eq!(p.b.rnic.deregister_mr(mr), Err(VerbsError::StagInUse));
    p.post_send(B, SendWr::new(4, SendOp::LocalInvalidate { stag: fr }, &[]));
    p.drive();
    assert_eq!(p.one_wc(B).status, Status::Success);
    assert_eq!(p.b.rnic.deregister_mr(mr), Ok(()));
    assert_eq!(p.b.rnic.deregister_mr(mr), Err(VerbsError::InvalidStag));
}

#[test]
fn send_with_immediate_all_variants_v2() {
    let mut p = Pair::v2(true);
    for (solicited, inv) in [(false, false), (false, true), (true, false), (true, true)] {
        for len in [0usize, 1, MAX_SEND - 1, MAX_SEND, MAX_SEND + 1, 65536] {
            let exposed = p.buffer(B, 8, Access::REMOTE_WRITE | Access::LOCAL_WRITE);
            let invalidate = inv.then(|| p.remote(B, exposed, 0).0);
            let src = p.buffer(A, len.max(1), Access::LOCAL_WRITE);
            let dst = p.buffer(B, len.max(1), Access::LOCAL_WRITE);
            p.fill(A, src, len, len as u8);
            p.post_recv(B, 9, &[p.sge(B, dst, 0, len)]);
            p.post_send(
                A,
                SendWr::new(
                    1,
                    SendOp::SendImm {
                        solicited,
                        invalidate,
                        imm: 0xabcdef ^ len as u64,
                    },
                    &[p.sge(A, src, 0, len)],
                ),
            );
            p.drive();
            assert_eq!(p.one_wc(A).status, Status::Success);
            let wc = p.one_wc(B);
            assert_eq!(
                (wc.opcode, wc.byte_len, wc.imm, wc.solicited),
                (
                    WcOpcode::RecvImm,
                    len as u32,
                    Some(0xabcdef ^ len as u64),
                    solicited
                )
            );
            assert_eq!(wc.invalidated_stag, invalidate);
            assert_eq!(p.bytes(B, dst, len), p.bytes(A, src, len));
        }
    }
}

#[test]
fn read_v2_sink_stays_private() {
    let mut p = Pair::v2(true);
    for len in [0usize, 1, MAX_WRITE, MAX_SEND + 1, 65536, 1 << 20] {
        let src = p.buffer(B, len.max(1), Access::REMOTE_READ);
        p.fill(B, src, len, 0x31);
        // Local write only: a Read V2 sink is never exposed.
        let sink = p.buffer(A, len.max(1), Access::LOCAL_WRITE);
        let (stag, addr) = p.remote(B, src, 0);
        p.post_send(
            A,
            SendWr::new(
                1,
                SendOp::ReadV2 {
                    remote_stag: stag,
                    remote_to: addr,
                },
                &[p.sge(A, sink, 0, len)],
            ),
        );
        p.drive();
        let wc = p.one_wc(A);
        assert_eq!(
            (wc.opcode, wc.status, wc.byte_len),
            (WcOpcode::Read, Status::Success, len as u32)
        );
        assert_eq!(p.bytes(A, sink, len), p.bytes(B, src, len));
    }
}

#[test]
fn v2_operations_need_v2() {
    let mut p = Pair::new(false);
    let e = p.a.rnic.post_send(
        p.a.qp,
        SendWr::new(
            1,
            SendOp::SendImm {
                solicited: false,
                invalidate: None,
                imm: 1,
            },
            &[],
        ),
    );
    assert_eq!(e, Err(VerbsError::NotNegotiated));
}

#[test]
fn atomics_and_read_v2_share_queue_3_in_order() {
    let mut p = Pair::v2(false);
    let target = p.buffer(
        B,
        64,
        Access::LOCAL_WRITE | Access::REMOTE_ATOMIC | Access::REMOTE_READ,
    );
    let (stag, addr) = p.remote(B, target, 0);
    let result = p.buffer(A, 8, Access::LOCAL_WRITE);
    let sink = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.post_send(
        A,
        SendWr::new(
            1,
            SendOp::FetchAdd {
                remote_stag: stag,
                remote_to: addr,
                add: 3,
                add_mask: 0,
            },
            &[p.sge(A, result, 0, 8)],
        ),
    );
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::ReadV2 {
                remote_stag: stag,
                remote_to: addr,
            },
            &[p.sge(A, sink, 0, 64)],
        ),
    );
    p.post_send(
        A,
        SendWr::new(
            3,
            SendOp::FetchAdd {
                remote_stag: stag,
                remote_to: addr,
                add: 4,
                add_mask: 0,
            },
            &[p.sge(A, result, 0, 8)],
        ),
    );
    p.drive();
    assert_eq!(
        p.wcs(A)
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![
            (1, Status::Success),
            (2, Status::Success),
            (3, Status::Success)
        ]
    );
    assert_eq!(
        p.get_u64(A, sink, 0),
        3,
        "the Read V2 saw the first FetchAdd, not the second"
    );
    assert_eq!(p.get_u64(B, target, 0), 7);
}

#[test]
fn v2_operations_both_directions() {
    let mut p = Pair::v2(false);
    for (from, to) in [(A, B), (B, A)] {
        let src = p.buffer(to, 3000, Access::REMOTE_READ | Access::LOCAL_WRITE);
        p.fill(to, src, 3000, 0x21);
        let sink = p.buffer(from, 3000, Access::LOCAL_WRITE);
        let (stag, addr) = p.remote(to, src, 0);
        p.post_send(
            from,
            SendWr::new(
                1,
                SendOp::ReadV2 {
                    remote_stag: stag,
                    remote_to: addr,
                },
                &[p.sge(from, sink, 0, 3000)],
            ),
        );
        let dst = p.buffer(to, 3000, Access::LOCAL_WRITE);
        p.post_recv(to, 2, &[p.sge(to, dst, 0, 3000)]);
        // Fenced: it sends what the Read V2 brought back.
        let mut wr = SendWr::new(
            3,
            SendOp::SendImm {
                solicited: false,
                invalidate: None,
                imm: 5,
            },
            &[p.sge(from, sink, 0, 3000)],
        );
        wr.read_fence = true;
        p.post_send(from, wr);
        p.post_recv(to, 4, &[]);
        p.post_send(
            from,
            SendWr::new(
                5,
                SendOp::Immediate {
                    imm: 6,
                    solicited: false,
                },
                &[],
            ),
        );
        p.drive();
        assert_eq!(
            p.wcs(from).iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            vec![1, 3, 5]
        );
        let got = p.wcs(to);
        assert_eq!(
            got.iter().map(|w| (w.wr_id, w.imm)).collect::<Vec<_>>(),
            vec![(2, Some(5)), (4, Some(6))]
        );
        assert!(
            p.bytes(to, dst, 3000) == p.bytes(to, src, 3000),
            "Read V2 then Send with Immediate carried it back"
        );
    }
}

#[test]
fn next_completion_notification() {
    let mut p = Pair::new(false);
    let dst = p.buffer(B, 64, Access::LOCAL_WRITE);
    let src = p.buffer(A, 64, Access::LOCAL_WRITE);
    p.b.rnic.req_notify_cq(p.b.cq, false).unwrap();
    p.post_recv(B, 1, &[p.sge(B, dst, 0, 64)]);
    p.post_recv(B, 2, &[p.sge(B, dst, 0, 64)]);
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
    assert!(
        p.b.rnic.take_cq_event(p.b.cq),
        "any completion fires a next-completion request"
    );
    p.post_send(
        A,
        SendWr::new(
            2,
            SendOp::Send {
                solicited: false,
                invalidate: None,
            },
            &[p.sge(A, src, 0, 8)],
        ),
    );
    p.drive();
    assert!(!p.b.rnic.take_cq_event(p.b.cq), "one request, one event");
    assert_eq!(p.wcs(B).len(), 2);
}
