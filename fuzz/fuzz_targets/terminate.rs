//! Any Terminate header: no panic; what parses re-encodes and parses to the same meaning.
#![no_main]
use iwarp_wire::terminate::{TerminatePacket, TerminateRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = TerminateRepr::parse(&TerminatePacket::new_unchecked(data)) {
        let mut buf = vec![0u8; t.buffer_len()];
        t.emit(&mut buf).expect("emit into buffer_len octets");
        assert_eq!(
            TerminateRepr::parse(&TerminatePacket::new_unchecked(&buf[..])).expect("re-parse"),
            t
        );
    }
});
