//! A hostile peer: well-formed FPDUs (right CRC) carrying any RDMAP message the input
//! describes, into an engine QP in RTS. Tagged Writes, Read Requests (V1 and V2), atomics and
//! Sends name STags and offsets drawn mostly around the QP's own regions: one with every
//! right, one the peer may only read, and one with every right but in another protection
//! domain. The engine may refuse anything (a Terminate, the QP in Error: then a new QP takes
//! its place), but no panic, and no octet changes outside the regions the peer may write:
//! guard zones around every region, the read-only region and the other domain's region stay
//! as they were.
#![no_main]
use iwarp_engine::{Access, QpState, RecvWr, Rnic, Sge, WorkCompletion};
use iwarp_wire::ddp::Buffer;
use iwarp_wire::mpa::{FpduEmitter, MpaParams};
use iwarp_wire::rdmap::{
    AOpCode, AtomicRequest, Opcode, RdmapHeader, ReadRequest, ReadRequestV2, SegmentRepr,
};
use libfuzzer_sys::fuzz_target;

mod common;
use common::{rts_qp, Arena, Input, REGION};

const KEEP_OCTET: u8 = 0x3c;

/// The victim: an RNIC whose QP is in RTS, with its three regions. The RNIC is dropped
/// before the memory it was given (field order).
struct Victim {
    rnic: Rnic,
    qp: u32,
    cq: u32,
    arenas: [Arena; 3],
    /// STag and base of each region.
    stags: Vec<(u32, u64)>,
    /// The next MSN the peer's messages use on each untagged queue.
    msn: [u32; 4],
}

fn victim(v2: bool) -> Victim {
    let mut rnic = Rnic::new();
    let pd = rnic.alloc_pd();
    let other_pd = rnic.alloc_pd();
    let (qp, cq) = rts_qp(&mut rnic, pd, 16, v2);
    let mut arenas = [
        Arena::new(0),
        Arena::new(KEEP_OCTET),
        Arena::new(KEEP_OCTET),
    ];
    let mut stags = Vec::new();
    for (i, (arena, access)) in arenas
        .iter_mut()
        .zip([Access::ALL, Access::REMOTE_READ, Access::ALL])
        .enumerate()
    {
        let base = arena.region();
        let owner = if i == 2 { other_pd } else { pd };
        // SAFETY: the arena lives as long as the RNIC (both in `Victim`, the RNIC first).
        let stag = unsafe { rnic.register_mr(owner, base, REGION, access, base.as_ptr() as u64) };
        stags.push((stag, base.as_ptr() as u64));
    }
    // Receives for Sends, in the writable region.
    let (stag, base) = stags[0];
    for i in 0..16u64 {
        let sge = Sge {
            stag,
            to: base + i * 256,
            len: 256,
        };
        let _ = rnic.post_recv(qp, RecvWr::new(i, &[sge]));
    }
    Victim {
        rnic,
        qp,
        cq,
        arenas,
        stags,
        msn: [1; 4],
    }
}

/// Nothing outside a region changed, nor anything in the two the peer may not write.
fn check(v: &Victim) {
    for (i, arena) in v.arenas.iter().enumerate() {
        arena.check_guards(&format!("region {i}"));
        if i > 0 {
            arena.check_unchanged(KEEP_OCTET, &format!("region {i}"));
        }
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
    let mut wcs = [WorkCompletion::default(); 64];
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
        while v.rnic.poll_cq(v.cq, &mut wcs).unwrap_or(0) > 0 {}
        if v.rnic.qp_state(v.qp) != Some(QpState::Rts) {
            check(&v);
            v = victim(v2);
            fpdus = FpduEmitter::new(fpdus.params(), 0);
        }
    }
    check(&v);
});
