//! RDMAP opcodes: the per-opcode table against RFC 5040 section 4.2/4.3, RFC 7306 figure 2
//! and the V2 draft figure 2, and the figures not covered in `rdmap_figures.rs` (Read
//! Response, Send and Send with SE across segments, Terminate as a whole DDP segment, Read V2
//! Response, Immediate Data), each as bytes: parse, then emit into a buffer pre-filled with
//! 0xa5.

use iwarp_wire::ddp::Buffer;
use iwarp_wire::rdmap::{self, Opcode, RdmapHeader, SegmentRepr};
use iwarp_wire::terminate::{self, CopiedHeader, TerminateRepr};
use iwarp_wire::Error;

fn check(bytes: &[u8], repr: SegmentRepr, payload: &[u8]) {
    let (parsed, p) = SegmentRepr::parse(bytes).unwrap();
    assert_eq!(parsed, repr);
    assert_eq!(p, payload);
    let mut buf = vec![0xa5u8; bytes.len() + 8];
    let n = repr.emit(&mut buf).unwrap();
    assert_eq!(n, repr.header_len());
    assert_eq!(n, bytes.len() - payload.len());
    assert_eq!(&buf[..n], &bytes[..n]);
    assert!(
        buf[n..].iter().all(|&b| b == 0xa5),
        "emit wrote past the header"
    );
}

/// (opcode value, tagged, queue number, RDMAP header length, lowest RDMAP version), written
/// out from the RFC tables rather than from the code.
const TABLE: [(u8, bool, u32, usize, u8); 18] = [
    (0x0, true, 0, 0, 1),    // RDMA Write (RFC 5040 4.3)
    (0x1, false, 1, 28, 1),  // RDMA Read Request, header of section 4.4
    (0x2, true, 0, 0, 1),    // RDMA Read Response
    (0x3, false, 0, 0, 1),   // Send
    (0x4, false, 0, 0, 1),   // Send with Invalidate
    (0x5, false, 0, 0, 1),   // Send with SE
    (0x6, false, 0, 0, 1),   // Send with SE and Invalidate
    (0x7, false, 2, 4, 1),   // Terminate: at least the Terminate Control word
    (0x8, false, 0, 8, 1),   // Immediate Data (RFC 7306 figure 2, section 6.2)
    (0x9, false, 0, 8, 1),   // Immediate Data with SE
    (0xa, false, 1, 52, 1),  // Atomic Request (RFC 7306 figure 4)
    (0xb, false, 3, 12, 1),  // Atomic Response (RFC 7306 figure 6)
    (0x11, false, 1, 16, 2), // RDMA Read V2 Request (V2 draft figure 4)
    (0x12, false, 3, 0, 2),  // RDMA Read V2 Response
    (0x13, false, 0, 0, 2),  // Send with Immediate Data
    (0x14, false, 0, 0, 2),  // Send with Invalidate and Immediate Data
    (0x15, false, 0, 0, 2),  // Send with SE and Immediate Data
    (0x16, false, 0, 0, 2),  // Send with Invalidate and SE and Immediate Data
];

#[test]
fn opcode_table_matches_the_rfcs() {
    for (op, (value, tagged, qn, hl, v)) in Opcode::ALL.iter().zip(TABLE) {
        assert_eq!(*op as u8, value, "{op:?}");
        assert_eq!(Opcode::try_from(value), Ok(*op));
        let info = op.info();
        assert_eq!(info.tagged, tagged, "{op:?}");
        if !tagged {
            assert_eq!(info.qn, qn, "{op:?}");
        }
        assert_eq!(info.rdmap_header_len, hl, "{op:?}");
        assert_eq!(info.min_version, v, "{op:?}");
    }
    let known: Vec<u8> = TABLE.iter().map(|t| t.0).collect();
    for raw in 0u8..=0xff {
        if !known.contains(&raw) {
            assert_eq!(Opcode::try_from(raw), Err(Error::UnknownOpcode(raw)));
        }
    }
}

/// RV is the top two bits of the RDMAP control octet; only 01b and (negotiated) 10b exist.
#[test]
fn control_octet_every_value() {
    for ctrl in 0u8..=0xff {
        let rv = ctrl >> 6;
        match rdmap::parse_control(ctrl) {
            Ok((v, op)) => {
                assert_eq!(v, rv);
                assert!(op.info().min_version <= 2);
                // Re-encoding gives the same octet except for the ignored reserved bit(s).
                let mask = if v == 1 { 0xcf } else { 0xdf };
                assert_eq!(rdmap::control(v, op), ctrl & mask, "{ctrl:#04x}");
            }
            Err(Error::RdmapVersion(v)) => {
                assert_eq!(v, rv);
                assert!(rv == 0 || rv == 3);
            }
            Err(Error::UnknownOpcode(_)) => assert!(rv == 1 || rv == 2),
            Err(e) => panic!("{ctrl:#04x}: {e:?}"),
        }
    }
}

// RFC 5040 section 4.3 / appendix A: RDMA Read Response, tagged, to the Data Sink STag/TO.
#[test]
fn read_response() {
    #[rustfmt::skip]
    let bytes = [
        0xc1, 0x42,                               // T=1 L=1 DV=1 | RV=1 Read Response
        0xaa, 0xbb, 0xcc, 0x01,                   // Data Sink STag
        0, 0, 0, 0, 0x10, 0, 0x05, 0xdc,          // Data Sink TO
        9, 8, 7,                                  // payload
    ];
    check(
        &bytes,
        SegmentRepr {
            version: 1,
            opcode: Opcode::ReadResponse,
            last: true,
            buffer: Buffer::Tagged {
                stag: 0xaabb_cc01,
                to: 0x1000_05dc,
            },
            header: RdmapHeader::None,
        },
        &[9, 8, 7],
    );
    // A Read Response on an untagged buffer is the wrong model: Unexpected OpCode.
    let mut u = [0u8; 18];
    u[0] = 0x41;
    u[1] = 0x42;
    let e = SegmentRepr::parse(&u).unwrap_err();
    assert_eq!(e, Error::WrongBufferModel(2));
    assert_eq!(
        e.terminate_cause(),
        Some(terminate::RDMAP_UNEXPECTED_OPCODE)
    );
}

// RFC 5040 appendix A: a Send with SE in two segments (L=0 then L=1, same MSN, MO advancing).
#[test]
fn send_with_se_two_segments() {
    #[rustfmt::skip]
    let first = [
        0x01, 0x45, 0, 0, 0, 0,  // T=0 L=0 DV=1 | Send with SE | RsvdULP (zero)
        0, 0, 0, 0,              // QN 0
        0, 0, 0, 0x2a,           // MSN 42
        0, 0, 0, 0,              // MO 0
        1, 2, 3, 4,
    ];
    #[rustfmt::skip]
    let second = [
        0x41, 0x45, 0, 0, 0, 0,
        0, 0, 0, 0,
        0, 0, 0, 0x2a,
        0, 0, 0, 4,              // MO 4
        5,
    ];
    let repr = |last, mo| SegmentRepr {
        version: 1,
        opcode: Opcode::SendSe,
        last,
        buffer: Buffer::Untagged {
            qn: 0,
            msn: 42,
            mo,
            rsvd_ulp: 0,
        },
        header: RdmapHeader::None,
    };
    check(&first, repr(false, 0), &[1, 2, 3, 4]);
    check(&second, repr(true, 4), &[5]);
    assert!(Opcode::SendSe.solicited());
    assert!(!Opcode::SendSe.carries_invalidate());
    // A Send on the Read Request queue is an invalid QN.
    let mut q = first;
    q[9] = 1;
    assert_eq!(
        SegmentRepr::parse(&q).unwrap_err().terminate_cause(),
        Some(terminate::DDP_UNTAGGED_INVALID_QN)
    );
}

// RFC 5040 section 4.8: a Terminate on QN 2 reporting a base-or-bounds violation of a Read
// Request, with the DDP segment length and both copied headers (M, D and R set).
#[test]
fn terminate_segment_with_copied_read_request() {
    #[rustfmt::skip]
    let copied_ddp = [0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0];
    #[rustfmt::skip]
    let copied_rdmap = [
        0xaa, 0xbb, 0xcc, 0x01, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0x10, 0,
        0x11, 0x22, 0x33, 0x02, 0, 0, 0x7f, 0, 0, 0, 0x20, 0,
    ];
    let mut bytes = vec![
        0x41, 0x47, 0, 0, 0, 0, // T=0 L=1 DV=1 | Terminate | RsvdULP
        0, 0, 0, 2, // QN 2
        0, 0, 0, 1, // MSN 1
        0, 0, 0, 0, // MO 0
        0x01, 0x01, 0xe0, 0x00, // Layer RDMAP, type Remote Protection, code 1; M D R
        0x00, 0x2e, // DDP Segment Length 46
    ];
    bytes.extend_from_slice(&copied_ddp);
    bytes.extend_from_slice(&copied_rdmap);
    let t = TerminateRepr {
        cause: terminate::RDMAP_BASE_BOUNDS,
        ddp_segment_length: Some(46),
        ddp_header: CopiedHeader::new(&copied_ddp),
        rdmap_header: CopiedHeader::new(&copied_rdmap),
    };
    check(
        &bytes,
        SegmentRepr {
            version: 1,
            opcode: Opcode::Terminate,
            last: true,
            buffer: Buffer::Untagged {
                qn: rdmap::QN_TERMINATE,
                msn: 1,
                mo: 0,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::Terminate(t),
        },
        &[],
    );
    // The copied Read Request itself parses back (it is a whole DDP segment header).
    let (inner, _) = SegmentRepr::parse(&bytes[24..]).unwrap();
    assert_eq!(inner.opcode, Opcode::ReadRequest);
    // A Terminate cut inside its copied DDP header is truncated.
    assert_eq!(
        SegmentRepr::parse(&bytes[..30]).unwrap_err(),
        Error::Truncated
    );
}

// V2 draft figure 6: RDMA Read V2 Response, untagged on QN 3, data only.
#[test]
fn read_v2_response() {
    #[rustfmt::skip]
    let bytes = [
        0x41, 0x92, 0, 0, 0, 0,  // L=1 | RV=2 opcode 10010b
        0, 0, 0, 3,              // QN 3
        0, 0, 0, 4,              // MSN 4 (locates the Read V2 Request)
        0, 0, 0x01, 0,           // MO 256
        0x5a, 0x5b,
    ];
    check(
        &bytes,
        SegmentRepr {
            version: 2,
            opcode: Opcode::ReadResponseV2,
            last: true,
            buffer: Buffer::Untagged {
                qn: rdmap::QN_RESPONSE,
                msn: 4,
                mo: 256,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::None,
        },
        &[0x5a, 0x5b],
    );
}

// V2 draft figures 7 and 8: Send with Immediate Data, payload segment (L=0) then the last
// segment with emit's Immediate header; on receive those 8 octets come back as payload.
#[test]
fn send_with_immediate_segments() {
    #[rustfmt::skip]
    let payload_seg = [
        0x01, 0x93, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0xab,
    ];
    check(
        &payload_seg,
        SegmentRepr {
            version: 2,
            opcode: Opcode::SendImmediate,
            last: false,
            buffer: Buffer::Untagged {
                qn: 0,
                msn: 5,
                mo: 0,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::None,
        },
        &[0xab],
    );
    let last = SegmentRepr {
        version: 2,
        opcode: Opcode::SendImmediate,
        last: true,
        buffer: Buffer::Untagged {
            qn: 0,
            msn: 5,
            mo: 1,
            rsvd_ulp: 0,
        },
        header: RdmapHeader::Immediate(0x0102_0304_0506_0708),
    };
    let mut buf = [0xa5u8; 30];
    let n = last.emit(&mut buf).unwrap();
    assert_eq!(n, 26);
    #[rustfmt::skip]
    assert_eq!(
        &buf[..n],
        &[0x41, 0x93, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8]
    );
    let (parsed, p) = SegmentRepr::parse(&buf[..n]).unwrap();
    assert_eq!(parsed.header, RdmapHeader::None);
    assert_eq!(p, &[1, 2, 3, 4, 5, 6, 7, 8]);
    // Under RDMAP version 1 the opcode does not exist.
    let mut v1 = buf;
    v1[1] = 0x53;
    assert_eq!(
        SegmentRepr::parse(&v1[..n]).unwrap_err(),
        Error::UnknownOpcode(0x13)
    );
}

// RFC 7306 appendix A.3: Immediate Data (no SE) and its length rule (section 6.3): exactly
// 8 octets, in a single segment with L set.
#[test]
fn immediate_data_exactly_eight_octets_in_one_segment() {
    #[rustfmt::skip]
    let bytes = [
        0x41, 0x48, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0,
        0x80, 0, 0, 0, 0, 0, 0, 1,
    ];
    check(
        &bytes,
        SegmentRepr {
            version: 1,
            opcode: Opcode::ImmediateData,
            last: true,
            buffer: Buffer::Untagged {
                qn: 0,
                msn: 3,
                mo: 0,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::Immediate(0x8000_0000_0000_0001),
        },
        &[],
    );
    let mut not_last = bytes;
    not_last[0] = 0x01;
    let e = SegmentRepr::parse(&not_last).unwrap_err();
    assert!(matches!(e, Error::ImmediateLength(_)));
    assert_eq!(
        e.terminate_cause(),
        Some(terminate::RDMAP_CATASTROPHIC_LOCAL)
    );
    assert!(!Opcode::ImmediateData.solicited());
}

/// Every opcode, in a legal segment, round-trips; and every legal segment cut short is a typed
/// error, never a panic.
#[test]
fn every_opcode_roundtrips_and_truncates_cleanly() {
    for op in Opcode::ALL {
        let info = op.info();
        let buffer = if info.tagged {
            Buffer::Tagged { stag: 7, to: 9 }
        } else {
            Buffer::Untagged {
                qn: info.qn,
                msn: 1,
                mo: 0,
                rsvd_ulp: if op.carries_invalidate() { 0x55 } else { 0 },
            }
        };
        let header = match op {
            Opcode::ReadRequest => RdmapHeader::ReadRequest(rdmap::ReadRequest {
                sink_stag: 1,
                sink_to: 2,
                size: 3,
                src_stag: 4,
                src_to: 5,
            }),
            Opcode::ReadRequestV2 => RdmapHeader::ReadRequestV2(rdmap::ReadRequestV2 {
                size: 3,
                src_stag: 4,
                src_to: 5,
            }),
            Opcode::Terminate => {
                RdmapHeader::Terminate(TerminateRepr::new(terminate::RDMAP_CATASTROPHIC_GLOBAL))
            }
            Opcode::ImmediateData | Opcode::ImmediateDataSe => RdmapHeader::Immediate(77),
            Opcode::AtomicRequest => RdmapHeader::AtomicRequest(rdmap::AtomicRequest {
                aopcode: rdmap::AOpCode::FetchAdd,
                request_id: 1,
                stag: 2,
                to: 8,
                add_swap: 1,
                add_swap_mask: 0,
                compare: 0,
                compare_mask: u64::MAX,
            }),
            Opcode::AtomicResponse => RdmapHeader::AtomicResponse {
                request_id: 1,
                original: 2,
            },
            _ => RdmapHeader::None,
        };
        let repr = SegmentRepr {
            version: info.min_version,
            opcode: op,
            last: true,
            buffer,
            header,
        };
        let mut buf = [0u8; 80];
        let n = repr.emit(&mut buf).unwrap();
        let (parsed, payload) = SegmentRepr::parse(&buf[..n]).unwrap();
        assert_eq!(parsed, repr, "{op:?}");
        assert!(payload.is_empty());
        for cut in 0..n {
            // A tagged or payload-only segment is complete once its DDP header is in.
            let complete = cut >= n - info.rdmap_header_len && info.rdmap_header_len == 0;
            if !complete {
                assert!(
                    SegmentRepr::parse(&buf[..cut]).is_err(),
                    "{op:?} cut at {cut}"
                );
            }
        }
        assert_eq!(repr.emit(&mut buf[..n - 1]), Err(Error::BufferTooSmall));
    }
}
