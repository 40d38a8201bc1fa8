//! FPDU emission against the deframer: ULPDUs cut from the input are framed by
//! `FpduEmitter` (CRC and markers as the first octet says, from an arbitrary 4-aligned
//! stream position) and the stream is fed back through a `Deframer` in chunks; it must
//! deliver exactly the same ULPDUs, with no error.
#![no_main]
use iwarp_wire::mpa::{Deframer, FpduEmitter, MpaParams};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let params = MpaParams {
        crc: data[0] & 1 != 0,
        markers: data[0] & 2 != 0,
    };
    // Full operation starts at stream position 0 and every FPDU is a multiple of 4 octets
    // long (markers included), so FPDUs always start 4-aligned: only such positions occur.
    let pos = (u16::from_be_bytes([data[1], data[2]]) & !3) as u64;
    let chunk = data[3] as usize % 97 + 1;
    // Cut the rest into ULPDUs whose lengths come from the data itself.
    let mut ulpdus = Vec::new();
    let mut rest = &data[4..];
    while let Some((&n, tail)) = rest.split_first() {
        let n = (n as usize).min(tail.len());
        ulpdus.push(&tail[..n]);
        rest = &tail[n..];
    }
    let mut tx = FpduEmitter::new(params, pos);
    let mut stream = Vec::new();
    for u in &ulpdus {
        let mut out = vec![0u8; tx.fpdu_len(u.len())];
        let n = tx
            .emit(&mut out, &[], u)
            .expect("emit into fpdu_len octets");
        assert_eq!(n, out.len());
        stream.extend_from_slice(&out);
    }
    let mut rx = Deframer::new(params, 1024, pos);
    let mut got: Vec<Vec<u8>> = Vec::new();
    for c in stream.chunks(chunk) {
        rx.feed(c, |u| got.push(u.to_vec()))
            .expect("deframe what was framed");
    }
    assert!(rx.at_boundary());
    assert_eq!(got.len(), ulpdus.len());
    for (g, u) in got.iter().zip(&ulpdus) {
        assert_eq!(&g[..], *u);
    }
});
