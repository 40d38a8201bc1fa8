//! Any DDP segment: parse must not panic, and whatever parses must re-encode to the same
//! header octets.
#![no_main]
use iwarp_wire::rdmap::SegmentRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((repr, payload)) = SegmentRepr::parse(data) {
        let mut buf = vec![0u8; repr.header_len()];
        let n = repr.emit(&mut buf).expect("emit into header_len octets");
        let bytes = [&buf[..n], payload].concat();
        let (again, p) = SegmentRepr::parse(&bytes).expect("re-parse");
        assert_eq!(again, repr);
        assert_eq!(p, payload);
    }
});
