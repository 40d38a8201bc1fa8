//! The header figures of RFC 5040, RFC 7306 and the V2 draft, as bytes: construct, parse,
//! emit (into buffers pre-filled with 0xa5 so unwritten octets show) and the typed errors.

use iwarp_wire::ddp::Buffer;
use iwarp_wire::rdmap::{
    AOpCode, AtomicRequest, Opcode, RdmapHeader, ReadRequest, ReadRequestV2, SegmentRepr,
};
use iwarp_wire::terminate;
use iwarp_wire::Error;

fn check(bytes: &[u8], repr: SegmentRepr, payload: &[u8]) {
    let (parsed, p) = SegmentRepr::parse(bytes).unwrap();
    assert_eq!(parsed, repr);
    assert_eq!(p, payload);
    let mut buf = vec![0xa5u8; bytes.len() + 4];
    let n = repr.emit(&mut buf).unwrap();
    assert_eq!(n, bytes.len() - payload.len());
    assert_eq!(&buf[..n], &bytes[..n]);
    assert!(buf[n..].iter().all(|&b| b == 0xa5));
}

// RFC 5040 section 4.4 / appendix A: RDMA Read Request, untagged on QN 1.
#[rustfmt::skip]
static READ_REQUEST: [u8; 46] = [
    0x41, 0x41,                   // T=0 L=1 DV=1 | RV=1 opcode 1
    0, 0, 0, 0,                   // RsvdULP
    0, 0, 0, 1,                   // QN 1
    0, 0, 0, 7,                   // MSN 7
    0, 0, 0, 0,                   // MO 0
    0xaa, 0xbb, 0xcc, 0x01,       // Data Sink STag
    0, 0, 0, 0, 0x10, 0, 0, 0,    // Data Sink Tagged Offset
    0, 0, 0x10, 0,                // RDMA Read Message Size 4096
    0x11, 0x22, 0x33, 0x02,       // Data Source STag
    0, 0, 0x7f, 0, 0, 0, 0x20, 0, // Data Source Tagged Offset
];

#[test]
fn read_request() {
    check(
        &READ_REQUEST,
        SegmentRepr {
            version: 1,
            opcode: Opcode::ReadRequest,
            last: true,
            buffer: Buffer::Untagged {
                qn: 1,
                msn: 7,
                mo: 0,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::ReadRequest(ReadRequest {
                sink_stag: 0xaabb_cc01,
                sink_to: 0x1000_0000,
                size: 4096,
                src_stag: 0x1122_3302,
                src_to: 0x7f00_0000_2000,
            }),
        },
        &[],
    );
}

// RFC 5040 appendix A: Send with Invalidate carries the STag in the untagged RsvdULP field.
#[rustfmt::skip]
static SEND_INVALIDATE: [u8; 21] = [
    0x41, 0x44, 0xde, 0xad, 0xbe, 0x01, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3,
];

#[test]
fn send_with_invalidate() {
    check(
        &SEND_INVALIDATE,
        SegmentRepr {
            version: 1,
            opcode: Opcode::SendInvalidate,
            last: true,
            buffer: Buffer::Untagged {
                qn: 0,
                msn: 1,
                mo: 0,
                rsvd_ulp: 0xdead_be01,
            },
            header: RdmapHeader::None,
        },
        &[1, 2, 3],
    );
}

// RFC 5040 appendix A: RDMA Write, tagged.
#[test]
fn write_segment() {
    let bytes = [
        0x81, 0x40, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0xee, 0xff,
    ];
    check(
        &bytes,
        SegmentRepr {
            version: 1,
            opcode: Opcode::Write,
            last: false,
            buffer: Buffer::Tagged {
                stag: 0x1234,
                to: 0x100,
            },
            header: RdmapHeader::None,
        },
        &[0xee, 0xff],
    );
}

// RFC 7306 figure 4: Atomic Operation Request (CmpSwap), QN 1.
#[rustfmt::skip]
static ATOMIC_REQUEST: [u8; 70] = [
    0x41, 0x4a, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0,
    0, 0, 0, 0x02,                           // Reserved | AOpCode CmpSwap
    0, 0, 0, 9,                              // Request Identifier
    0x00, 0x00, 0x42, 0x07,                  // Remote STag
    0, 0, 0, 0, 0, 0, 0x10, 0x08,            // Remote Tagged Offset
    0, 0, 0, 0, 0, 0, 0, 0x05,               // Swap Data
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // Swap Mask
    0, 0, 0, 0, 0, 0, 0, 0x04,               // Compare Data
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // Compare Mask
];

#[test]
fn atomic_request() {
    check(
        &ATOMIC_REQUEST,
        SegmentRepr {
            version: 1,
            opcode: Opcode::AtomicRequest,
            last: true,
            buffer: Buffer::Untagged {
                qn: 1,
                msn: 3,
                mo: 0,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::AtomicRequest(AtomicRequest {
                aopcode: AOpCode::CmpSwap,
                request_id: 9,
                stag: 0x4207,
                to: 0x1008,
                add_swap: 5,
                add_swap_mask: u64::MAX,
                compare: 4,
                compare_mask: u64::MAX,
            }),
        },
        &[],
    );
}

#[test]
fn reserved_aopcode_names_its_terminate() {
    let mut b = ATOMIC_REQUEST;
    b[21] = 0x01; // Swap in the drafts, Reserved in RFC 7306
    let e = SegmentRepr::parse(&b).unwrap_err();
    assert_eq!(e, Error::ReservedAOpCode(1));
    assert_eq!(
        e.terminate_cause(),
        Some(terminate::RDMAP_UNEXPECTED_OPCODE)
    );
    b[21] = 0x03;
    assert_eq!(
        SegmentRepr::parse(&b).unwrap_err(),
        Error::ReservedAOpCode(3)
    );
    // The reserved 28 bits are ignored on receive (RFC 7306 section 5.2.1).
    let mut b = ATOMIC_REQUEST;
    b[18] = 0xff;
    assert!(SegmentRepr::parse(&b).is_ok());
}

// RFC 7306 figure 6: Atomic Operation Response, QN 3.
#[test]
fn atomic_response() {
    let bytes = [
        0x41, 0x4b, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0x01, 0x02, 0x03,
        0x04, 0x05, 0x06, 0x07, 0x08,
    ];
    check(
        &bytes,
        SegmentRepr {
            version: 1,
            opcode: Opcode::AtomicResponse,
            last: true,
            buffer: Buffer::Untagged {
                qn: 3,
                msn: 1,
                mo: 0,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::AtomicResponse {
                request_id: 9,
                original: 0x0102_0304_0506_0708,
            },
        },
        &[],
    );
    let mut wrong_qn = bytes;
    wrong_qn[9] = 1;
    let e = SegmentRepr::parse(&wrong_qn).unwrap_err();
    assert_eq!(e, Error::BadQueueNumber(1));
    assert_eq!(
        e.terminate_cause(),
        Some(terminate::DDP_UNTAGGED_INVALID_QN)
    );
}

// RFC 7306 section 6.2: Immediate Data with SE, exactly 8 octets on QN 0.
#[test]
fn immediate_data() {
    let bytes = [
        0x41, 0x49, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0xca, 0xfe, 0, 0, 0, 0, 0xbe,
        0xef,
    ];
    check(
        &bytes,
        SegmentRepr {
            version: 1,
            opcode: Opcode::ImmediateDataSe,
            last: true,
            buffer: Buffer::Untagged {
                qn: 0,
                msn: 2,
                mo: 0,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::Immediate(0xcafe_0000_0000_beef),
        },
        &[],
    );
    let mut nine = bytes.to_vec();
    nine.push(0);
    assert_eq!(
        SegmentRepr::parse(&nine).unwrap_err(),
        Error::ImmediateLength(9)
    );
    assert_eq!(
        SegmentRepr::parse(&bytes[..25]).unwrap_err(),
        Error::Truncated
    );
}

// V2 draft figure 5: RDMA Read V2 Request (RV=2, opcode 10001b), QN 1.
#[test]
fn read_v2_request() {
    let bytes = [
        0x41, 0x91, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0x55,
        0x01, 0, 0, 0, 0, 0, 0, 0x40, 0,
    ];
    check(
        &bytes,
        SegmentRepr {
            version: 2,
            opcode: Opcode::ReadRequestV2,
            last: true,
            buffer: Buffer::Untagged {
                qn: 1,
                msn: 4,
                mo: 0,
                rsvd_ulp: 0,
            },
            header: RdmapHeader::ReadRequestV2(ReadRequestV2 {
                size: 0x2000,
                src_stag: 0x5501,
                src_to: 0x4000,
            }),
        },
        &[],
    );
    // The same opcode under RDMAP version 1 is unknown.
    let mut v1 = bytes;
    v1[1] = 0x51;
    assert_eq!(
        SegmentRepr::parse(&v1).unwrap_err(),
        Error::UnknownOpcode(0x11)
    );
}

// V2 draft figures 8 and 10: Send with (SE,) Invalidate and Immediate Data, last segment
// carries only the immediate data.
#[test]
fn send_with_invalidate_and_immediate() {
    let bytes = [
        0x41, 0x96, 0x00, 0x00, 0x77, 0x01, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0x05, 0xdc, 1, 2, 3, 4,
        5, 6, 7, 8,
    ];
    check(
        &bytes,
        SegmentRepr {
            version: 2,
            opcode: Opcode::SendSeInvalidateImmediate,
            last: true,
            buffer: Buffer::Untagged {
                qn: 0,
                msn: 9,
                mo: 1500,
                rsvd_ulp: 0x7701,
            },
            header: RdmapHeader::None,
        },
        &[1, 2, 3, 4, 5, 6, 7, 8],
    );
    assert!(Opcode::SendSeInvalidateImmediate.solicited());
    assert!(Opcode::SendSeInvalidateImmediate.carries_invalidate());
}

#[test]
fn unknown_opcode_and_version() {
    let mut b = SEND_INVALIDATE;
    b[1] = 0x4c;
    let e = SegmentRepr::parse(&b).unwrap_err();
    assert_eq!(
        e.terminate_cause(),
        Some(terminate::RDMAP_UNEXPECTED_OPCODE)
    );
    b[1] = 0xc4;
    let e = SegmentRepr::parse(&b).unwrap_err();
    assert_eq!(e, Error::RdmapVersion(3));
    assert_eq!(
        e.terminate_cause(),
        Some(terminate::RDMAP_INVALID_RDMAP_VERSION)
    );
    // A tagged Send is the wrong buffer model.
    let w = [0x81, 0x43, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(
        SegmentRepr::parse(&w).unwrap_err(),
        Error::WrongBufferModel(3)
    );
    for n in 0..READ_REQUEST.len() {
        assert!(
            SegmentRepr::parse(&READ_REQUEST[..n]).is_err(),
            "{n} octets"
        );
    }
}
