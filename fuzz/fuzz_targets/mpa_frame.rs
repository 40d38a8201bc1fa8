//! Any MPA Request/Reply frame: no panic; a parsed frame re-encodes to the same octets but
//! for reserved flag bits, which receivers ignore.
#![no_main]
use iwarp_wire::mpa::FrameRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = FrameRepr::frame_len(data);
    if let Ok(f) = FrameRepr::parse(data) {
        let mut buf = vec![0u8; f.buffer_len()];
        f.emit(&mut buf).expect("emit into buffer_len octets");
        assert_eq!(FrameRepr::parse(&buf).expect("re-parse"), f);
    }
});
