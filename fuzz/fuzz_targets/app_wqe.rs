//! Work requests as a hostile application could leave them in its SQ and RQ rings: any
//! SendWqe or RecvWqe, converted as iwarpd converts them (`iwarpd::host::convert`) and posted
//! to an engine QP in RTS whose peer answers over a byte pipe, until both sides are quiet.
//!
//! STags and addresses are drawn mostly near the regions that exist (both ends' regions,
//! a read-only one on each, a window, a fast-register STag), so bounds, access rights and
//! protection domains are what is tested, not only unknown STags. Whatever comes: no panic,
//! and no octet outside the registered regions changes (guard zones around every region), nor
//! any octet of a region registered with no write access.
#![no_main]
use iwarp_abi::wqe::{RecvWqe, SendWqe, Sge as WqeSge, MAX_INLINE, MAX_SGE};
use iwarp_engine::{Access, QpState, Rnic, WorkCompletion};
use iwarpd::host::convert;
use libfuzzer_sys::fuzz_target;

mod common;
use common::{rts_qp, Arena, Input, REGION};

const READ_ONLY_OCTET: u8 = 0x3c;

/// One end: an RNIC with a QP, a region with every right, a read-only region, a window and
/// a fast-register STag. The RNIC is dropped before the memory it was given (field order).
struct End {
    rnic: Rnic,
    qp: u32,
    cq: u32,
    arenas: Vec<Arena>,
    stags: Vec<(u32, u64)>,
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
        let stag = unsafe { rnic.register_mr(pd, base, REGION, access, base.as_ptr() as u64) };
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

fn reap(e: &mut End) {
    let mut wcs = [WorkCompletion::default(); 64];
    while e.rnic.poll_cq(e.cq, &mut wcs).unwrap_or(0) > 0 {}
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let v2 = input.u8() & 1 == 1;
    let mut a = end(v2);
    let mut b = end(v2);
    let mut stags: Vec<(u32, u64)> = a.stags.iter().chain(&b.stags).copied().collect();
    while !input.is_empty() {
        let kind = input.u8();
        if kind % 4 == 0 {
            // A receive on either end.
            let mut w = RecvWqe {
                wr_id: input.u64(),
                num_sge: input.u8() % (MAX_SGE as u8 + 2),
                ..RecvWqe::default()
            };
            for g in w.sgl.iter_mut() {
                *g = sge(&mut input, &stags);
            }
            let e = if kind & 0x10 == 0 { &mut b } else { &mut a };
            if let Ok(wr) = convert::recv_wr(&w) {
                let _ = e.rnic.post_recv(e.qp, wr);
            }
        } else {
            let mut w = SendWqe {
                wr_id: input.u64(),
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
            if let Ok(wr) = convert::send_wr(&w) {
                let _ = e.rnic.post_send(e.qp, wr);
            }
        }
        drive(&mut a, &mut b);
        reap(&mut a);
        reap(&mut b);
        // A failed request ends the connection (its QP in Error, the rest flushed): go on
        // with a new pair, so that one input tries many requests on a live connection.
        let live = |e: &End| e.rnic.qp_state(e.qp) == Some(QpState::Rts);
        if !(live(&a) && live(&b)) {
            check(&a);
            check(&b);
            a = end(v2);
            b = end(v2);
            stags = a.stags.iter().chain(&b.stags).copied().collect();
        }
    }
    check(&a);
    check(&b);
});

/// Nothing outside a region changed, nor anything in the read-only one.
fn check(e: &End) {
    for (i, arena) in e.arenas.iter().enumerate() {
        arena.check_guards(&format!("region {i}"));
    }
    e.arenas[1].check_unchanged(READ_ONLY_OCTET, "the read-only region");
}
