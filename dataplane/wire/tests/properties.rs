//! Property tests: every Repr round-trips, segmentation and reassembly are inverse, the
//! deframer gives the same ULPDUs for any split of the stream, and no parser panics on
//! arbitrary bytes.

use iwarp_wire::ddp::{Buffer, Reassembly, Segmenter};
use iwarp_wire::mpa::{
    self, Deframer, EnhancedData, FpduEmitter, FrameKind, FrameRepr, MpaParams, Rtr,
};
use iwarp_wire::rdmap::{
    AOpCode, AtomicRequest, Opcode, RdmapHeader, ReadRequest, ReadRequestV2, SegmentRepr,
};
use iwarp_wire::terminate::{CopiedHeader, TermCause, TerminatePacket, TerminateRepr};
use iwarp_wire::Layer;
use proptest::prelude::*;

fn opcode() -> impl Strategy<Value = Opcode> {
    prop::sample::select(Opcode::ALL.to_vec())
}

fn term_cause() -> impl Strategy<Value = TermCause> {
    (
        prop::sample::select(vec![Layer::Rdmap, Layer::Ddp, Layer::Llp]),
        0u8..16,
        any::<u8>(),
    )
        .prop_map(|(layer, etype, code)| TermCause { layer, etype, code })
}

fn terminate() -> impl Strategy<Value = TerminateRepr> {
    (
        term_cause(),
        prop::option::of(any::<u16>()),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 28),
    )
        .prop_map(|(cause, len, tagged, with_rdmap, bytes)| {
            let mut t = TerminateRepr::new(cause);
            t.ddp_segment_length = len;
            if len.is_some() {
                let mut ddp = [0u8; 18];
                ddp.copy_from_slice(&bytes[..18]);
                ddp[0] = if tagged { 0xc1 } else { 0x41 };
                let n = if tagged { 14 } else { 18 };
                t.ddp_header = CopiedHeader::new(&ddp[..n]);
                if with_rdmap {
                    t.rdmap_header = CopiedHeader::new(&bytes);
                }
            }
            t
        })
}

prop_compose! {
    fn segment()(op in opcode(), last in any::<bool>(), a in any::<u32>(), b in any::<u64>(),
                 c in any::<u32>(), d in any::<u32>(), e in any::<u64>(), m in any::<[u64; 4]>(),
                 cmp in any::<bool>(), term in terminate()) -> SegmentRepr {
        let info = op.info();
        let version = info.min_version;
        let buffer = if info.tagged {
            Buffer::Tagged { stag: a, to: b }
        } else {
            let rsvd_ulp = if op.carries_invalidate() { d } else { 0 };
            Buffer::Untagged { qn: info.qn, msn: c, mo: a, rsvd_ulp }
        };
        let header = match op {
            Opcode::ReadRequest => RdmapHeader::ReadRequest(ReadRequest {
                sink_stag: a, sink_to: b, size: c, src_stag: d, src_to: e }),
            Opcode::ReadRequestV2 => RdmapHeader::ReadRequestV2(ReadRequestV2 {
                size: c, src_stag: d, src_to: e }),
            Opcode::Terminate => RdmapHeader::Terminate(term),
            Opcode::ImmediateData | Opcode::ImmediateDataSe => RdmapHeader::Immediate(e),
            Opcode::AtomicRequest => RdmapHeader::AtomicRequest(AtomicRequest {
                aopcode: if cmp { AOpCode::CmpSwap } else { AOpCode::FetchAdd },
                request_id: c, stag: d, to: e, add_swap: m[0], add_swap_mask: m[1],
                compare: m[2], compare_mask: m[3] }),
            Opcode::AtomicResponse => RdmapHeader::AtomicResponse { request_id: c, original: e },
            _ => RdmapHeader::None,
        };
        // Immediate Data is always a single, last segment (RFC 7306 section 6.3).
        let last = last || matches!(op, Opcode::ImmediateData | Opcode::ImmediateDataSe);
        SegmentRepr { version, opcode: op, last, buffer, header }
    }
}

proptest! {
    #[test]
    fn segment_roundtrip(repr in segment(), payload in prop::collection::vec(any::<u8>(), 0..64)) {
        let carries_payload = matches!(repr.header, RdmapHeader::None);
        let payload = if carries_payload { &payload[..] } else { &[][..] };
        let mut buf = vec![0xa5u8; repr.header_len() + payload.len()];
        let n = repr.emit(&mut buf).unwrap();
        prop_assert_eq!(n, repr.header_len());
        buf[n..].copy_from_slice(payload);
        let (back, p) = SegmentRepr::parse(&buf).unwrap();
        prop_assert_eq!(back, repr);
        prop_assert_eq!(p, payload);
    }

    #[test]
    fn frame_roundtrip(req in any::<bool>(), m in any::<bool>(), c in any::<bool>(), r in any::<bool>(),
                       v2 in any::<bool>(), rev2 in any::<bool>(), ird in 0u16..0x4000, ord in 0u16..0x4000,
                       flags in any::<[bool; 4]>(), pd in prop::collection::vec(any::<u8>(), 0..508)) {
        let enhanced = rev2.then_some(EnhancedData {
            ird, ord, peer_to_peer: flags[0],
            rtr: Rtr { send: flags[1], write: flags[2], read: flags[3] },
        });
        let f = FrameRepr {
            kind: if req { FrameKind::Request } else { FrameKind::Reply },
            markers: m, crc: c, reject: r, rdmap_v2: v2,
            revision: if rev2 { 2 } else { 1 },
            enhanced, private_data: &pd,
        };
        let mut buf = vec![0u8; f.buffer_len()];
        f.emit(&mut buf).unwrap();
        prop_assert_eq!(FrameRepr::frame_len(&buf).unwrap(), buf.len());
        prop_assert_eq!(FrameRepr::parse(&buf).unwrap(), f);
    }

    #[test]
    fn terminate_roundtrip(t in terminate()) {
        let mut buf = vec![0u8; t.buffer_len()];
        t.emit(&mut buf).unwrap();
        prop_assert_eq!(TerminateRepr::parse(&TerminatePacket::new_unchecked(&buf[..])).unwrap(), t);
    }

    #[test]
    fn parsers_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = SegmentRepr::parse(&bytes);
        let _ = FrameRepr::parse(&bytes);
        let _ = FrameRepr::frame_len(&bytes);
        let _ = TerminateRepr::parse(&TerminatePacket::new_unchecked(&bytes[..]));
        let _ = EnhancedData::parse(&bytes);
        for params in [MpaParams { crc: true, markers: true }, MpaParams { crc: false, markers: false }] {
            let mut d = Deframer::new(params, 100, 0);
            let _ = d.feed(&bytes, |_| {});
        }
    }

    #[test]
    fn deframer_any_split(sizes in prop::collection::vec(0usize..1500, 1..12),
                          cuts in prop::collection::vec(1usize..700, 1..40),
                          crc in any::<bool>(), markers in any::<bool>(), start in 0u64..2048) {
        let params = MpaParams { crc, markers };
        let start = if markers { start & !3 } else { start };
        let mut e = FpduEmitter::new(params, start);
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let u: Vec<u8> = (0..s).map(|j| (i + j * 7) as u8).collect();
            let mut f = vec![0u8; e.fpdu_len(s)];
            let n = e.emit(&mut f, &u[..s.min(18)], &u[s.min(18)..]).unwrap();
            stream.extend_from_slice(&f[..n]);
            want.push(u);
        }
        let mut d = Deframer::new(params, 1500, start);
        let mut got = Vec::new();
        let mut rest = &stream[..];
        let mut k = 0;
        while !rest.is_empty() {
            let n = cuts[k % cuts.len()].min(rest.len());
            d.feed(&rest[..n], |u| got.push(u.to_vec())).unwrap();
            rest = &rest[n..];
            k += 1;
        }
        prop_assert_eq!(got, want);
        prop_assert!(d.at_boundary());
    }
}

/// Segmentation then reassembly returns the message, at the edges around the MULPDU.
#[test]
fn segmentation_reassembly_edges() {
    let mulpdu = mpa::fpdu::mulpdu(1460, false);
    let max_payload = (mulpdu - 18) as u32; // an untagged Send's payload per segment
    let mp = max_payload as usize;
    for len in [0, 1, mp - 1, mp, mp + 1, 2 * mp, 65536, 1 << 20] {
        let msg: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
        let mut out = vec![0u8; len];
        let mut r = Reassembly::new();
        let mut total = None;
        let plans: Vec<_> = Segmenter::new(len as u32, max_payload).collect();
        assert_eq!(
            plans.len() as u32,
            Segmenter::count(len as u32, max_payload)
        );
        for p in &plans {
            assert!(p.len <= max_payload);
            let (o, l) = (p.offset as usize, p.len as usize);
            out[o..o + l].copy_from_slice(&msg[o..o + l]);
            total = r.accept(p.offset, p.len, p.last).unwrap();
        }
        assert_eq!(total, Some(len as u32), "length {len}");
        assert_eq!(out, msg, "length {len}");
        assert!(plans.last().unwrap().last);
        assert!(plans[..plans.len() - 1].iter().all(|p| !p.last));
    }
}
