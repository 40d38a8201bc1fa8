//! No input from the wire makes the engine panic: arbitrary ULPDUs (framed correctly, so
//! that they get past MPA and reach DDP/RDMAP parsing and placement) and arbitrary raw
//! streams, fed to an engine with registered memory and posted receives.

mod util;

use iwarp_engine::{Access, ConnParams, QpState};
use iwarp_wire::mpa::{FpduEmitter, MpaParams};
use proptest::prelude::*;
use util::{Pair, A, B, MSS};

const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_ATOMIC.0,
);

/// A pair without CRC, B with a registered buffer and two posted receives. Returns the pair
/// and B's buffer STag, so generated headers can aim at real memory.
fn target() -> (Pair, u32) {
    let p = ConnParams::new(false, 4, 4, MSS);
    let mut pair = Pair::with(p, p, 64, false);
    let buf = pair.buffer(B, 4096, ALL);
    let rbuf = pair.buffer(B, 256, ALL);
    pair.post_recv(B, 1, &[pair.sge(B, rbuf, 0, 256)]);
    pair.post_recv(B, 2, &[pair.sge(B, rbuf, 0, 256)]);
    let (stag, _) = pair.remote(B, buf, 0);
    (pair, stag)
}

fn ulpdu() -> impl Strategy<Value = Vec<u8>> {
    // Plausible DDP control octets (tagged/untagged, last, version 1) and RDMAP control
    // octets (version 1 or 2, any opcode), then anything.
    (
        prop::sample::select(vec![0x41u8, 0x43, 0xc1, 0x81, 0x01, 0x00]),
        prop::sample::select(vec![
            0x40u8, 0x41, 0x42, 0x43, 0x46, 0x47, 0x48, 0x4a, 0x4b, 0x80, 0x8c, 0x55,
        ]),
        prop::collection::vec(any::<u8>(), 0..120),
    )
        .prop_map(|(ddp, rdmap, rest)| {
            let mut v = vec![ddp, rdmap];
            v.extend(rest);
            v
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn framed_ulpdus_never_panic(ulpdus in prop::collection::vec(ulpdu(), 1..6), aim in any::<bool>()) {
        let (mut pair, stag) = target();
        let mut em = FpduEmitter::new(MpaParams { crc: false, markers: false }, 0);
        let mut out = vec![0u8; MSS];
        for mut u in ulpdus {
            if aim && u.len() >= 6 && u[0] & 0x80 != 0 {
                // Tagged: point the STag at B's real buffer.
                u[2..6].copy_from_slice(&stag.to_be_bytes());
            }
            let Ok(n) = em.emit(&mut out, &u, &[]) else { continue };
            let b = pair.b.qp;
            pair.b.rnic.handle_stream(b, &out[..n]);
        }
        pair.drive();
        let state = pair.b.rnic.qp_state(pair.b.qp);
        prop_assert!(matches!(state, Some(QpState::Rts | QpState::Error)), "{state:?}");
        let _ = pair.wcs(B);
        let _ = pair.wcs(A);
    }

    #[test]
    fn raw_streams_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), crc in any::<bool>()) {
        let p = ConnParams::new(crc, 4, 4, MSS);
        let mut pair = Pair::with(p, p, 64, false);
        let b = pair.b.qp;
        pair.b.rnic.handle_stream(b, &bytes);
        pair.drive();
        prop_assert!(pair.b.rnic.qp_state(b).is_some());
    }
}
