//! A hostile peer: well-formed FPDUs (right CRC) carrying any RDMAP message the input
//! describes, into an engine QP in RTS. Tagged Writes, Read Requests (V1 and V2), atomics and
//! Sends (with Invalidate too) name STags and offsets drawn mostly around the QP's own
//! regions: one with every right, one the peer may only read, one with every right but in
//! another protection domain, one with no remote right under a window bound on a second QP
//! of the same domain, and one the peer may only read under a window bound on this QP. The
//! engine may refuse anything (a Terminate, the QP in Error: then a new QP takes its place),
//! but no panic, and no octet changes outside the regions the peer may write: guard zones
//! around every region, the read-only region, the other domain's region and the region
//! under the other QP's window stay as they were, and the last region changes only while
//! its window is valid. A region with a bound window is never invalidated (Verbs figure 23),
//! and every receive completes exactly once, in posting order, by the time the QP is in
//! Error.
#![no_main]
use iwarp_engine::{
    Access, QpState, RecvWr, Rnic, SendOp, SendWr, Sge, Status, WcOpcode, WorkCompletion,
};
use iwarp_wire::ddp::Buffer;
use iwarp_wire::mpa::{FpduEmitter, MpaParams};
use iwarp_wire::rdmap::{
    AOpCode, AtomicRequest, Opcode, RdmapHeader, ReadRequest, ReadRequestV2, SegmentRepr,
};
use libfuzzer_sys::fuzz_target;

mod common;
use common::{rts_qp, Arena, Input, REGION};

const KEEP_OCTET: u8 = 0x3c;

/// Receives posted on the victim's QP (work request IDs 0 to RECEIVES - 1).
const RECEIVES: u64 = 16;

/// The victim: an RNIC whose QP is in RTS, with its five regions and two windows. The RNIC
/// is dropped before the memory it was given (field order).
struct Victim {
    rnic: Rnic,
    qp: iwarp_engine::QpId,
    cq: iwarp_engine::CqId,
    arenas: [Arena; 5],
    /// STag and base of each region, then of the two windows.
    stags: Vec<(u32, u64)>,
    /// The next MSN the peer's messages use on each untagged queue.
    msn: [u32; 4],
    /// Region 4's memory region and the window on it bound on this QP.
    mr4: u32,
    mw4: u32,
    /// Region 4 as it was when its window was invalidated: it must stay so.
    closed4: Option<Vec<u8>>,
    /// Receive completions seen, in order.
    received: u64,
}

/// Binds `mw` to all of the region `mr` (at `base`) with `access`, on `qp`, and runs the
/// bind, which must succeed.
fn bind(rnic: &mut Rnic, qp: iwarp_engine::QpId, cq: iwarp_engine::CqId, mw: u32, mr: u32, base: u64, access: Access) {
    let op = SendOp::BindMw {
        mw,
        mr,
        to: base,
        len: REGION as u64,
        access,
    };
    rnic.post_send(qp, SendWr::new(1000, op, &[])).unwrap();
    let mut out = vec![0u8; 2048];
    while rnic.poll_transmit(qp, &mut out).is_some() {}
    let mut wcs = [WorkCompletion::default(); 4];
    assert_eq!(rnic.poll_cq(cq, &mut wcs), Ok(1));
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1000, Status::Success));
}

fn victim(v2: bool) -> Victim {
    let mut rnic = Rnic::new();
    let pd = rnic.alloc_pd();
    let other_pd = rnic.alloc_pd();
    let (qp, cq) = rts_qp(&mut rnic, pd, 16, v2);
    // A second QP of the same domain, which the peer never reaches.
    let (qp2, cq2) = rts_qp(&mut rnic, pd, 16, v2);
    let mut arenas = [
        Arena::new(0),
        Arena::new(KEEP_OCTET),
        Arena::new(KEEP_OCTET),
        Arena::new(KEEP_OCTET),
        Arena::new(KEEP_OCTET),
    ];
    let local = Access::LOCAL_WRITE | Access::BIND;
    // Region 4 may be read, so a peer may name it in a Send with Invalidate (Verbs section
    // 7.4.2): only its bound window stands in the way.
    let readable = local | Access::REMOTE_READ;
    let mut stags = Vec::new();
    for (i, (arena, access)) in arenas
        .iter_mut()
        .zip([Access::ALL, Access::REMOTE_READ, Access::ALL, local, readable])
        .enumerate()
    {
        let base = arena.region();
        let owner = if i == 2 { other_pd } else { pd };
        // SAFETY: the arena lives as long as the RNIC (both in `Victim`, the RNIC first).
        let stag = unsafe { rnic.register_mr(owner, base, REGION, access, base.as_ptr() as u64) }
            .expect("valid rights");
        stags.push((stag, base.as_ptr() as u64));
    }
    let (mr3, base3) = stags[3];
    let (mr4, base4) = stags[4];
    let mw3 = rnic.alloc_mw(pd);
    bind(&mut rnic, qp2, cq2, mw3, mr3, base3, Access::REMOTE_WRITE);
    let mw4 = rnic.alloc_mw(pd);
    bind(&mut rnic, qp, cq, mw4, mr4, base4, Access::REMOTE_WRITE);
    stags.push((mw3, base3));
    stags.push((mw4, base4));
    // Receives for Sends, in the writable region.
    let (stag, base) = stags[0];
    for i in 0..RECEIVES {
        let sge = Sge {
            stag,
            to: base + i * 256,
            len: 256,
        };
        rnic.post_recv(qp, RecvWr::new(i, &[sge])).unwrap();
    }
    Victim {
        rnic,
        qp,
        cq,
        arenas,
        stags,
        msn: [1; 4],
        mr4,
        mw4,
        closed4: None,
        received: 0,
    }
}

/// Takes the victim's completions: receives complete once each, in posting order; region 4
/// is not invalidated while its window is bound, and the invalidation of that window
/// closes region 4 from then on.
fn completions(v: &mut Victim) {
    let mut wcs = [WorkCompletion::default(); 64];
    loop {
        let n = v.rnic.poll_cq(v.cq, &mut wcs).unwrap_or(0);
        if n == 0 {
            break;
        }
        for wc in &wcs[..n] {
            if !matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvImm) {
                continue;
            }
            assert_eq!(wc.wr_id, v.received, "receives complete once each, in order");
            v.received += 1;
            // Once the window is invalidated, the region may be too.
            assert!(
                wc.invalidated_stag != Some(v.mr4) || v.closed4.is_some(),
                "a region with a bound window was invalidated"
            );
            if wc.invalidated_stag == Some(v.mw4) && v.closed4.is_none() {
                v.closed4 = Some(v.arenas[4].contents().to_vec());
            }
        }
    }
}

/// Nothing outside a region changed, nor anything in those the peer may not write.
fn check(v: &Victim) {
    for (i, arena) in v.arenas.iter().enumerate() {
        arena.check_guards(&format!("region {i}"));
        if (1..=3).contains(&i) {
            arena.check_unchanged(KEEP_OCTET, &format!("region {i}"));
        }
    }
    if let Some(closed) = &v.closed4 {
        assert!(
            v.arenas[4].contents() == &closed[..],
            "region 4 written after its window was invalidated"
        );
    }
}

/// The QP is out of RTS: once the Terminate is out it is in Error and every receive has
/// completed.
fn retire(v: &mut Victim) {
    completions(v);
    check(v);
    if v.rnic.qp_state(v.qp) == Some(QpState::Error) {
        assert_eq!(v.received, RECEIVES, "every receive completed");
    }
}

/// A Read's size: small, medium or anything.
fn size(input: &mut Input) -> u32 {
    match input.u8() % 3 {
        0 => u32::from(input.u8()),
        1 => u32::from(input.u16()),
        _ => input.u32(),
    }
}

/// The next segment the input describes.
fn segment(input: &mut Input, v: &mut Victim) -> (SegmentRepr, usize) {
    let opcode = Opcode::ALL[usize::from(input.u8()) % Opcode::ALL.len()];
    let flags = input.u8();
    let last = flags & 1 == 1;
    // The wrong version, queue number or MSN ends the stream at once: rarely.
    let version = if flags & 0x22 == 0x22 { 2 } else { 1 };
    let (stag, to) = input.place(&v.stags);
    let buffer = if matches!(opcode, Opcode::Write | Opcode::ReadResponse) {
        Buffer::Tagged { stag, to }
    } else {
        let qn = match opcode {
            Opcode::ReadRequest | Opcode::ReadRequestV2 | Opcode::AtomicRequest => 1,
            Opcode::Terminate => 2,
            Opcode::ReadResponseV2 | Opcode::AtomicResponse => 3,
            _ => 0,
        };
        let qn = if flags & 0x44 == 0x44 {
            input.u32()
        } else {
            qn
        };
        let msn = match v.msn.get_mut(qn as usize) {
            Some(next) if flags & 0x88 != 0x88 => {
                let msn = *next;
                if last {
                    *next = next.wrapping_add(1);
                }
                msn
            }
            _ => input.u32(),
        };
        let mo = if flags & 16 == 0 { 0 } else { input.u32() };
        Buffer::Untagged {
            qn,
            msn,
            mo,
            rsvd_ulp: stag,
        }
    };
    let header = match opcode {
        Opcode::ReadRequest => {
            let (src_stag, src_to) = input.place(&v.stags);
            RdmapHeader::ReadRequest(ReadRequest {
                sink_stag: input.u32(),
                sink_to: input.u64(),
                size: size(input),
                src_stag,
                src_to,
            })
        }
        Opcode::ReadRequestV2 => {
            let (src_stag, src_to) = input.place(&v.stags);
            RdmapHeader::ReadRequestV2(ReadRequestV2 {
                size: size(input),
                src_stag,
                src_to,
            })
        }
        Opcode::AtomicRequest => {
            let (stag, to) = input.place(&v.stags);
            RdmapHeader::AtomicRequest(AtomicRequest {
                aopcode: if input.u8() & 1 == 0 {
                    AOpCode::FetchAdd
                } else {
                    AOpCode::CmpSwap
                },
                request_id: input.u32(),
                stag,
                to,
                add_swap: input.u64(),
                add_swap_mask: input.u64(),
                compare: input.u64(),
                compare_mask: input.u64(),
            })
        }
        Opcode::AtomicResponse => RdmapHeader::AtomicResponse {
            request_id: input.u32(),
            original: input.u64(),
        },
        Opcode::ImmediateData | Opcode::ImmediateDataSe => RdmapHeader::Immediate(input.u64()),
        _ => RdmapHeader::None,
    };
    let payload = usize::from(input.u16()) % 1400;
    let seg = SegmentRepr {
        version,
        opcode,
        last,
        buffer,
        header,
    };
    (seg, payload)
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let v2 = input.u8() & 1 == 1;
    let mut v = victim(v2);
    let mut fpdus = FpduEmitter::new(
        MpaParams {
            crc: true,
            markers: false,
        },
        0,
    );
    let mut out = vec![0u8; 2048];
    while !input.is_empty() {
        let (seg, len) = segment(&mut input, &mut v);
        let mut header = [0u8; 128];
        let Ok(hl) = seg.emit(&mut header) else {
            continue;
        };
        let payload: Vec<u8> = (0..len).map(|_| input.u8()).collect();
        let Ok(n) = fpdus.emit(&mut out, &header[..hl], &payload) else {
            continue;
        };
        v.rnic.handle_stream(v.qp, &out[..n]);
        // The victim's answers (Read Responses, atomic responses, Terminates) go nowhere.
        while v.rnic.poll_transmit(v.qp, &mut out).is_some() {}
        completions(&mut v);
        check(&v);
        if v.rnic.qp_state(v.qp) != Some(QpState::Rts) {
            retire(&mut v);
            v = victim(v2);
            fpdus = FpduEmitter::new(fpdus.params(), 0);
        }
    }
    completions(&mut v);
    check(&v);
});
