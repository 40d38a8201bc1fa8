//! Work requests as a hostile application could leave them in its SQ and RQ rings: any
//! SendWqe or RecvWqe, converted and posted as iwarpd's fast path does (`iwarpd::host::
//! convert`; what cannot be decoded or is refused goes in as a failed WR) to an engine QP in
//! RTS whose peer answers over a byte pipe, until both sides are quiet.
//!
//! STags and addresses are drawn mostly near the regions that exist (both ends' regions,
//! a read-only one on each, a window, a fast-register STag), so bounds, access rights and
//! protection domains are what is tested, not only unknown STags. Whatever comes: no panic,
//! and no octet outside the registered regions changes (guard zones around every region), nor
//! any octet of a region registered with no write access. And every posted WR completes
//! exactly once, in posting order per queue (Verbs section 8.2.2 rule 2), or not at all
//! where it was unsignaled and succeeded (section 8.2.4); moving the QP to Error at the end
//! completes everything still outstanding (section 6.2.4).
#![no_main]
use iwarp_abi::wqe::{RecvWqe, SendWqe, Sge as WqeSge, MAX_INLINE, MAX_SGE};
use iwarp_engine::{Access, QpState, RecvWr, Rnic, Status, VerbsError, WcOpcode, WorkCompletion};
use iwarpd::host::convert;
use libfuzzer_sys::fuzz_target;
use std::collections::VecDeque;

mod common;
use common::{rts_qp, Arena, Input, REGION};

const READ_ONLY_OCTET: u8 = 0x3c;

/// One end: an RNIC with a QP, a region with every right, a read-only region, a window and
/// a fast-register STag. The RNIC is dropped before the memory it was given (field order).
struct End {
    rnic: Rnic,
    qp: iwarp_engine::QpId,
    cq: iwarp_engine::CqId,
    arenas: Vec<Arena>,
    stags: Vec<(u32, u64)>,
    /// Posted SQ WRs not yet seen complete, in posting order: id and whether signaled.
    sq: VecDeque<(u64, bool)>,
    /// Posted receives not yet seen complete, in posting order.
    rq: VecDeque<u64>,
}

fn end(v2: bool) -> End {
    let mut rnic = Rnic::new();
    let pd = rnic.alloc_pd();
    let (qp, cq) = rts_qp(&mut rnic, pd, 64, v2);
    let mut arenas = vec![Arena::new(0), Arena::new(READ_ONLY_OCTET)];
    let mut stags = Vec::new();
    for (arena, access) in arenas.iter_mut().zip([Access::ALL, Access::REMOTE_READ]) {
        let base = arena.region();
        // SAFETY: the arena lives as long as the RNIC (both in `End`, the RNIC dropped first).
        let stag = unsafe { rnic.register_mr(pd, base, REGION, access, base.as_ptr() as u64) }
            .expect("valid rights");
        stags.push((stag, base.as_ptr() as u64));
    }
    let base = stags[0].1;
    stags.push((rnic.alloc_mw(pd), base));
    stags.push((rnic.alloc_fastreg_stag(pd), base));
    End {
        rnic,
        qp,
        cq,
        arenas,
        stags,
        sq: VecDeque::new(),
        rq: VecDeque::new(),
    }
}

/// A scatter/gather element around the regions (see [`Input::place`]).
fn sge(input: &mut Input, stags: &[(u32, u64)]) -> WqeSge {
    let (stag, to) = input.place(stags);
    WqeSge {
        stag,
        to,
        len: input.len(),
    }
}

/// Moves `from`'s FPDUs to `to`; whether there were any.
fn pipe(from: &mut End, to: &mut End, buf: &mut [u8]) -> bool {
    let mut moved = false;
    while let Some(n) = from.rnic.poll_transmit(from.qp, buf) {
        to.rnic.handle_stream(to.qp, &buf[..n]);
        moved = true;
    }
    moved
}

/// Moves each end's FPDUs to the other until neither has any.
fn drive(a: &mut End, b: &mut End) {
    let mut buf = vec![0u8; 1460];
    for _ in 0..10_000 {
        let moved = pipe(a, b, &mut buf) | pipe(b, a, &mut buf);
        if !moved {
            return;
        }
    }
}

/// Polls every completion, checking each against what was posted: a receive is the oldest
/// outstanding one; a send is outstanding, and only unsignaled WRs (which complete silently
/// when they succeed) were posted before it and are still outstanding.
fn reap(e: &mut End) {
    let mut wcs = [WorkCompletion::default(); 64];
    loop {
        let n = e.rnic.poll_cq(e.cq, &mut wcs).unwrap_or(0);
        if n == 0 {
            return;
        }
        for wc in &wcs[..n] {
            assert_eq!(wc.qp, e.qp);
            if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvImm) {
                assert_eq!(
                    e.rq.pop_front(),
                    Some(wc.wr_id),
                    "receive {} completed out of order or twice",
                    wc.wr_id
                );
                continue;
            }
            loop {
                match e.sq.pop_front() {
                    Some((id, _)) if id == wc.wr_id => break,
                    Some((id, signaled)) => assert!(
                        !signaled,
                        "send {} completed before signaled send {id} posted ahead of it",
                        wc.wr_id
                    ),
                    None => panic!("send {} completed twice or was never posted", wc.wr_id),
                }
            }
        }
    }
}

/// Ends the connection: both QPs to Error, which completes everything outstanding; what is
/// left unreported must be unsignaled WRs that succeeded.
fn finish(a: &mut End, b: &mut End) {
    for e in [&mut *a, &mut *b] {
        let _ = e.rnic.modify_qp(e.qp, QpState::Error);
        reap(e);
        assert!(e.rq.is_empty(), "receives never completed: {:?}", e.rq);
        assert!(
            e.sq.iter().all(|(_, signaled)| !signaled),
            "signaled sends never completed: {:?}",
            e.sq
        );
    }
    check(a);
    check(b);
}

/// Posts as iwarpd's fast path does: refused or undecodable, a WR is posted as a failed WR
/// that completes in its turn. Whether it was posted (not refused for a full queue).
fn posted(r: Result<(), VerbsError>, fail: impl FnOnce(Status) -> Result<(), VerbsError>) -> bool {
    let status = match r {
        Ok(()) => return true,
        Err(VerbsError::QueueFull) => return false,
        Err(VerbsError::InvalidStag | VerbsError::ReadSinkNeedsRemoteWrite) => {
            Status::LocalProtectionError
        }
        Err(_) => Status::LocalQpOperationError,
    };
    fail(status).is_ok()
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let v2 = input.u8() & 1 == 1;
    let mut a = end(v2);
    let mut b = end(v2);
    let mut stags: Vec<(u32, u64)> = a.stags.iter().chain(&b.stags).copied().collect();
    // Unique ids, so that "exactly once" can be told (the input's ids are read and ignored).
    let mut next_id = 0u64;
    while !input.is_empty() {
        next_id += 1;
        let kind = input.u8();
        if kind % 4 == 0 {
            // A receive on either end.
            let _ = input.u64();
            let mut w = RecvWqe {
                wr_id: next_id,
                num_sge: input.u8() % (MAX_SGE as u8 + 2),
                ..RecvWqe::default()
            };
            for g in w.sgl.iter_mut() {
                *g = sge(&mut input, &stags);
            }
            let e = if kind & 0x10 == 0 { &mut b } else { &mut a };
            let (r, wr) = match convert::recv_wr(&w) {
                Ok(wr) => (e.rnic.post_recv(e.qp, wr), wr),
                Err(()) => (Err(VerbsError::TooManySge), RecvWr::new(w.wr_id, &[])),
            };
            if posted(r, |st| e.rnic.post_recv_failed(e.qp, wr, st)) {
                e.rq.push_back(w.wr_id);
            }
        } else {
            let _ = input.u64();
            let mut w = SendWqe {
                wr_id: next_id,
                opcode: input.u8() % 24,
                flags: input.u8() & 0x1f,
                num_sge: input.u8() % (MAX_SGE as u8 + 2),
                inline_len: input.u8() % (MAX_INLINE as u8 + 8),
                access: u32::from(input.u8() & 0x3f),
                ..SendWqe::default()
            };
            (w.remote_stag, w.remote_to) = input.place(&stags);
            w.invalidate_stag = input.place(&stags).0;
            w.local_stag = input.place(&stags).0;
            (w.mr_stag, w.mr_to) = input.place(&stags);
            w.mr_offset = u64::from(input.u16());
            w.mr_len = u64::from(input.u16());
            w.imm = input.u64();
            w.compare_add = input.u64();
            w.compare_add_mask = input.u64();
            w.swap = input.u64();
            w.swap_mask = input.u64();
            for g in w.sgl.iter_mut() {
                *g = sge(&mut input, &stags);
            }
            let n = usize::from(input.u8()) % (MAX_INLINE + 1);
            for i in 0..n {
                w.inline_data[i] = input.u8();
            }
            let e = if kind & 0x10 == 0 { &mut a } else { &mut b };
            let (r, wr) = match convert::send_wr(&w) {
                Ok(wr) => (e.rnic.post_send(e.qp, wr), wr),
                Err(()) => (Err(VerbsError::TooManySge), convert::stand_in(&w)),
            };
            if posted(r, |st| e.rnic.post_send_failed(e.qp, wr, st)) {
                e.sq.push_back((w.wr_id, wr.signaled));
            }
        }
        drive(&mut a, &mut b);
        reap(&mut a);
        reap(&mut b);
        // A failed request ends the connection (its QP in Error, the rest flushed): go on
        // with a new pair, so that one input tries many requests on a live connection.
        let live = |e: &End| e.rnic.qp_state(e.qp) == Some(QpState::Rts);
        if !(live(&a) && live(&b)) {
            finish(&mut a, &mut b);
            a = end(v2);
            b = end(v2);
            stags = a.stags.iter().chain(&b.stags).copied().collect();
        }
    }
    finish(&mut a, &mut b);
});

/// Nothing outside a region changed, nor anything in the read-only one.
fn check(e: &End) {
    for (i, arena) in e.arenas.iter().enumerate() {
        arena.check_guards(&format!("region {i}"));
    }
    e.arenas[1].check_unchanged(READ_ONLY_OCTET, "the read-only region");
}
