//! DDP (RFC 5041): the header figures as bytes through the `Packet` view (construct into
//! buffers pre-filled with 0xa5, deconstruct, parse, emit), and segmentation of whole messages
//! into real DDP segments followed by reassembly, at the sizes around the MULPDU.

use iwarp_wire::ddp::{self, Buffer, DdpRepr, Packet, Reassembly, Segmenter};
use iwarp_wire::rdmap::{self, Opcode, RdmapHeader, SegmentRepr};
use iwarp_wire::{mpa, terminate, Error};
use proptest::prelude::*;

// RFC 5041 section 4.3 (tagged buffer DDP header): T=1, L=0, DV=01, RsvdULP, STag, TO,
// followed here by four octets of payload.
#[rustfmt::skip]
static TAGGED: [u8; 18] = [
    0x81, 0x40,                                     // T=1 L=0 DV=1 | RsvdULP (RDMAP Write)
    0x00, 0x01, 0x02, 0x03,                         // STag
    0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10, // TO
    0xde, 0xad, 0xbe, 0xef,                         // payload
];

// RFC 5041 section 4.4 (untagged buffer DDP header): T=0, L=1, DV=01, RsvdULP (8 bits),
// RsvdULP (32 bits), QN, MSN, MO, then two octets of payload.
#[rustfmt::skip]
static UNTAGGED: [u8; 20] = [
    0x41, 0x44,             // T=0 L=1 DV=1 | RsvdULP (RDMAP Send with Invalidate)
    0x12, 0x34, 0x56, 0x78, // RsvdULP, 32 bits (Invalidate STag)
    0x00, 0x00, 0x00, 0x00, // QN 0
    0x80, 0x00, 0x00, 0x01, // MSN 0x80000001
    0x00, 0x01, 0x00, 0x00, // MO 65536
    0x55, 0xaa,             // payload
];

#[test]
fn tagged_figure_deconstruct() {
    let p = Packet::new_checked(&TAGGED[..]).unwrap();
    assert!(p.tagged());
    assert!(!p.last());
    assert_eq!(p.version(), ddp::DDP_VERSION);
    assert_eq!(p.reserved(), 0);
    assert_eq!(p.rsvd_ulp(), 0x40);
    assert_eq!(p.header_len(), ddp::TAGGED_HEADER_LEN);
    assert_eq!(p.stag(), 0x0001_0203);
    assert_eq!(p.to(), 0xfedc_ba98_7654_3210);
    assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
}

#[test]
fn tagged_figure_construct() {
    let mut buf = [0xa5u8; 18];
    let mut p = Packet::new_unchecked(&mut buf[..]);
    p.set_control(true, false);
    p.set_rsvd_ulp(0x40);
    p.set_stag(0x0001_0203);
    p.set_to(0xfedc_ba98_7654_3210);
    assert_eq!(&buf[..14], &TAGGED[..14]);
    assert!(buf[14..].iter().all(|&b| b == 0xa5), "payload untouched");
}

#[test]
fn untagged_figure_deconstruct() {
    let p = Packet::new_checked(&UNTAGGED[..]).unwrap();
    assert!(!p.tagged());
    assert!(p.last());
    assert_eq!(p.version(), 1);
    assert_eq!(p.header_len(), ddp::UNTAGGED_HEADER_LEN);
    assert_eq!(p.rsvd_ulp(), 0x44);
    assert_eq!(p.rsvd_ulp2(), 0x1234_5678);
    assert_eq!(p.qn(), 0);
    assert_eq!(p.msn(), 0x8000_0001);
    assert_eq!(p.mo(), 65536);
    assert_eq!(p.payload(), &[0x55, 0xaa]);
}

#[test]
fn untagged_figure_construct() {
    let mut buf = [0xa5u8; 20];
    let mut p = Packet::new_unchecked(&mut buf[..]);
    p.set_control(false, true);
    p.set_rsvd_ulp(0x44);
    p.set_rsvd_ulp2(0x1234_5678);
    p.set_qn(0);
    p.set_msn(0x8000_0001);
    p.set_mo(65536);
    assert_eq!(&buf[..18], &UNTAGGED[..18]);
    assert_eq!(&buf[18..], &[0xa5, 0xa5]);
}

#[test]
fn figures_parse_and_emit() {
    for (bytes, hl) in [(&TAGGED[..], 14), (&UNTAGGED[..], 18)] {
        let repr = DdpRepr::parse(&Packet::new_unchecked(bytes)).unwrap();
        assert_eq!(repr.buffer_len(), hl);
        let mut out = [0xa5u8; 24];
        assert_eq!(repr.emit(&mut out), Ok(hl));
        assert_eq!(&out[..hl], &bytes[..hl]);
        assert!(out[hl..].iter().all(|&b| b == 0xa5));
    }
}

/// RFC 5041 section 4.2: the reserved control bits are set to zero on transmit and not
/// checked on receive; the emitted header clears them.
#[test]
fn reserved_control_bits_ignored_then_cleared() {
    let mut b = TAGGED;
    b[0] |= 0x3c;
    let repr = DdpRepr::parse(&Packet::new_unchecked(&b[..])).unwrap();
    let mut out = [0u8; 14];
    repr.emit(&mut out).unwrap();
    assert_eq!(&out[..], &TAGGED[..14]);
}

/// A DDP version other than 1 names the Terminate of its buffer model (RFC 5041 section 7.2).
#[test]
fn every_wrong_version_names_its_terminate() {
    for dv in [0u8, 2, 3] {
        let mut t = TAGGED;
        t[0] = (t[0] & !0x03) | dv;
        let e = DdpRepr::parse(&Packet::new_unchecked(&t[..])).unwrap_err();
        assert_eq!(
            e.terminate_cause(),
            Some(terminate::DDP_TAGGED_INVALID_DDP_VERSION)
        );
        let mut u = UNTAGGED;
        u[0] = (u[0] & !0x03) | dv;
        let e = DdpRepr::parse(&Packet::new_unchecked(&u[..])).unwrap_err();
        assert_eq!(
            e.terminate_cause(),
            Some(terminate::DDP_UNTAGGED_INVALID_DDP_VERSION)
        );
    }
}

/// The largest payload one untagged Send segment carries in an FPDU of a 1460-octet MSS.
fn send_max_payload() -> u32 {
    (mpa::fpdu::mulpdu(1460, false) - ddp::UNTAGGED_HEADER_LEN) as u32
}

/// Segments `msg` as an untagged Send (QN 0, MSN `msn`) into real DDP segments, each no longer
/// than `mulpdu`, parses each back and reassembles; returns the reassembled message.
fn send_through(msg: &[u8], msn: u32, mulpdu: usize) -> Vec<u8> {
    let max_payload = (mulpdu - ddp::UNTAGGED_HEADER_LEN) as u32;
    let mut out = vec![0u8; msg.len()];
    let mut r = Reassembly::new();
    let mut seg = vec![0u8; mulpdu];
    let mut done = None;
    for plan in Segmenter::new(msg.len() as u32, max_payload) {
        assert!(done.is_none(), "a segment after the last one");
        let repr = SegmentRepr {
            version: rdmap::RDMAP_V1,
            opcode: Opcode::Send,
            last: plan.last,
            buffer: Buffer::Untagged {
                qn: rdmap::QN_SEND,
                msn,
                mo: plan.offset,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::None,
        };
        let hl = repr.emit(&mut seg).unwrap();
        let (o, l) = (plan.offset as usize, plan.len as usize);
        seg[hl..hl + l].copy_from_slice(&msg[o..o + l]);
        let ulpdu = &seg[..hl + l];
        assert!(ulpdu.len() <= mulpdu, "segment longer than the MULPDU");
        let (parsed, payload) = SegmentRepr::parse(ulpdu).unwrap();
        assert_eq!(parsed, repr);
        let Buffer::Untagged { mo, msn: m, .. } = parsed.buffer else {
            panic!("untagged expected")
        };
        assert_eq!(m, msn);
        out[mo as usize..mo as usize + payload.len()].copy_from_slice(payload);
        done = r.accept(mo, payload.len() as u32, parsed.last).unwrap();
    }
    assert_eq!(done, Some(msg.len() as u32));
    out
}

/// Sizes 0, 1, MULPDU-1, MULPDU, MULPDU+1 (in payload per segment) and large ones, as Sends.
#[test]
fn send_segmentation_edges() {
    let mulpdu = mpa::fpdu::mulpdu(1460, false);
    let mp = send_max_payload() as usize;
    for len in [
        0,
        1,
        mp - 1,
        mp,
        mp + 1,
        2 * mp - 1,
        2 * mp,
        2 * mp + 1,
        65536,
        1 << 20,
    ] {
        let msg: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        assert_eq!(send_through(&msg, 1, mulpdu), msg, "length {len}");
        let n = Segmenter::count(len as u32, mp as u32) as usize;
        assert_eq!(n, len.div_ceil(mp).max(1), "segment count for {len}");
    }
}

/// A tagged Write: every segment carries the same STag, TO advances by the offset, L only on
/// the last (RFC 5041 section 5.1), and placing each payload at TO rebuilds the message.
#[test]
fn write_segmentation_places_by_to() {
    let mulpdu = mpa::fpdu::mulpdu(1460, true);
    let max_payload = (mulpdu - ddp::TAGGED_HEADER_LEN) as u32;
    let base_to = 0x7000_0000_0000_1000u64;
    for len in [
        0usize,
        1,
        max_payload as usize,
        max_payload as usize + 1,
        10_000,
    ] {
        let msg: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut sink = vec![0u8; len];
        let mut seg = vec![0u8; mulpdu];
        let plans: Vec<_> = Segmenter::new(len as u32, max_payload).collect();
        for (i, plan) in plans.iter().enumerate() {
            let repr = SegmentRepr {
                version: rdmap::RDMAP_V1,
                opcode: Opcode::Write,
                last: plan.last,
                buffer: Buffer::Tagged {
                    stag: 0xabcd_ef01,
                    to: base_to + plan.offset as u64,
                },
                header: RdmapHeader::None,
            };
            let hl = repr.emit(&mut seg).unwrap();
            let (o, l) = (plan.offset as usize, plan.len as usize);
            seg[hl..hl + l].copy_from_slice(&msg[o..o + l]);
            let (parsed, payload) = SegmentRepr::parse(&seg[..hl + l]).unwrap();
            assert_eq!(parsed.last, i + 1 == plans.len());
            let Buffer::Tagged { stag, to } = parsed.buffer else {
                panic!("tagged expected")
            };
            assert_eq!(stag, 0xabcd_ef01);
            let at = (to - base_to) as usize;
            sink[at..at + payload.len()].copy_from_slice(payload);
        }
        assert_eq!(sink, msg, "length {len}");
    }
}

#[test]
fn reassembly_rejects_out_of_order_and_names_invalid_mo() {
    let mut r = Reassembly::new();
    assert_eq!(r.accept(0, 100, false), Ok(None));
    // A repeated segment is out of sequence too.
    let e = r.accept(0, 100, false).unwrap_err();
    assert_eq!(
        e,
        Error::BadMessageOffset {
            expected: 100,
            received: 0
        }
    );
    assert_eq!(
        e.terminate_cause(),
        Some(terminate::DDP_UNTAGGED_INVALID_MO)
    );
    assert_eq!(r.received(), 100);
    assert_eq!(r.accept(100, 1, true), Ok(Some(101)));
    // After the last segment the next message starts at MO 0.
    assert_eq!(r.received(), 0);
    assert!(r.accept(5, 1, true).is_err());
    // An MO past 2^32 cannot be reached.
    let mut r = Reassembly::new();
    assert_eq!(r.accept(0, u32::MAX, false), Ok(None));
    assert!(r.accept(u32::MAX, 1, true).is_err());
}

proptest! {
    /// Any message length and any payload limit: the plans tile the message exactly, each
    /// within the limit, L on the last only, and `count` agrees.
    #[test]
    fn plans_tile_the_message(len in 0u32..300_000, max in 1u32..20_000) {
        let plans: Vec<_> = Segmenter::new(len, max).collect();
        prop_assert_eq!(plans.len() as u32, Segmenter::count(len, max));
        let mut next = 0u32;
        for (i, p) in plans.iter().enumerate() {
            prop_assert_eq!(p.offset, next);
            prop_assert!(p.len <= max);
            prop_assert!(p.len > 0 || len == 0);
            prop_assert_eq!(p.last, i + 1 == plans.len());
            next += p.len;
        }
        prop_assert_eq!(next, len);
    }

    /// Segmentation then reassembly returns the message for arbitrary contents and MULPDUs.
    #[test]
    fn send_roundtrip(msg in prop::collection::vec(any::<u8>(), 0..5000),
                      msn in any::<u32>(), mulpdu in 19usize..2000) {
        prop_assert_eq!(send_through(&msg, msn, mulpdu), msg);
    }

    /// Every DDP header round-trips through emit and parse.
    #[test]
    fn ddp_repr_roundtrip(tagged in any::<bool>(), last in any::<bool>(), ulp in any::<u8>(),
                          a in any::<u32>(), b in any::<u32>(), c in any::<u32>(),
                          d in any::<u32>(), to in any::<u64>()) {
        let buffer = if tagged {
            Buffer::Tagged { stag: a, to }
        } else {
            Buffer::Untagged { qn: a, msn: b, mo: c, rsvd_ulp: d }
        };
        let repr = DdpRepr { last, rsvd_ulp: ulp, buffer };
        let mut buf = [0xa5u8; 20];
        let n = repr.emit(&mut buf).unwrap();
        prop_assert_eq!(n, repr.buffer_len());
        prop_assert!(buf[n..].iter().all(|&x| x == 0xa5));
        prop_assert_eq!(DdpRepr::parse(&Packet::new_unchecked(&buf[..n])), Ok(repr));
        // One octet short is a typed error, never a panic.
        prop_assert_eq!(
            DdpRepr::parse(&Packet::new_unchecked(&buf[..n - 1])),
            Err(Error::Truncated)
        );
        prop_assert_eq!(repr.emit(&mut buf[..n - 1]), Err(Error::BufferTooSmall));
    }

    /// Arbitrary octets: the view and the parser never panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        let p = Packet::new_unchecked(&bytes[..]);
        if p.check_len().is_ok() {
            let _ = (p.tagged(), p.last(), p.version(), p.rsvd_ulp(), p.payload().len());
            if p.tagged() {
                let _ = (p.stag(), p.to());
            } else {
                let _ = (p.rsvd_ulp2(), p.qn(), p.msn(), p.mo());
            }
        }
        let _ = DdpRepr::parse(&p);
    }
}
