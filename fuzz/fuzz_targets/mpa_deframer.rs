//! The deframer on an arbitrary stream, fed in arbitrary chunks: no panic, and the same
//! ULPDUs (or the same error) as when fed all at once.
#![no_main]
use iwarp_wire::mpa::{Deframer, MpaParams};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let params = MpaParams {
        crc: data[0] & 1 != 0,
        markers: data[0] & 2 != 0,
    };
    let chunk = (data[1] as usize % 64) + 1;
    let stream = &data[2..];
    let mut whole = Vec::new();
    let r1 = Deframer::new(params, 1500, 0).feed(stream, |u| whole.push(u.to_vec()));
    let mut d = Deframer::new(params, 1500, 0);
    let mut split = Vec::new();
    let mut r2 = Ok(0);
    for c in stream.chunks(chunk) {
        r2 = d.feed(c, |u| split.push(u.to_vec()));
        if r2.is_err() {
            break;
        }
    }
    assert_eq!(whole, split);
    assert_eq!(r1.is_err(), r2.is_err());
});
