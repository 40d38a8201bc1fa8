//! Any DDP header: the view and the parser never panic; what parses re-encodes to the same
//! header octets but for the reserved control bits (RFC 5041 section 4.2: not checked on
//! receive, zero on transmit). The first two input octets also drive the segmenter and the
//! reassembly check, which must tile any message exactly.
#![no_main]
use iwarp_wire::ddp::{DdpRepr, Packet, Reassembly, Segmenter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = Packet::new_unchecked(data);
    if p.check_len().is_ok() {
        let _ = (p.tagged(), p.last(), p.version(), p.rsvd_ulp(), p.payload());
    }
    if let Ok(repr) = DdpRepr::parse(&p) {
        let mut buf = [0u8; 18];
        let n = repr.emit(&mut buf).expect("emit into 18 octets");
        assert_eq!(n, p.header_len());
        assert_eq!(buf[0], data[0] & !0x3c);
        assert_eq!(&buf[1..n], &data[1..n]);
        assert_eq!(DdpRepr::parse(&Packet::new_unchecked(&buf[..n])), Ok(repr));
    }
    if data.len() >= 4 {
        let len = u16::from_be_bytes([data[0], data[1]]) as u32;
        let max = u16::from_be_bytes([data[2], data[3]]) as u32;
        let mut r = Reassembly::new();
        let mut total = None;
        for plan in Segmenter::new(len, max) {
            assert!(total.is_none());
            assert!(plan.len <= max.max(1));
            total = r
                .accept(plan.offset, plan.len, plan.last)
                .expect("in order");
        }
        assert_eq!(total, Some(len));
    }
});
