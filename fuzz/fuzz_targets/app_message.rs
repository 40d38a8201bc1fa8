//! Any message on an application's control socket, either way: no panic; a request, reply
//! or event that decodes re-encodes to one that decodes the same.
#![no_main]
use iwarp_abi::app::{decode_request, decode_to_app, encode_request, encode_to_app, message_len};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = message_len(data);
    if let Ok(req) = decode_request(data) {
        let framed = encode_request(&req);
        assert_eq!(decode_request(&framed[4..]).expect("re-decode"), req);
    }
    if let Ok(m) = decode_to_app(data) {
        let framed = encode_to_app(&m);
        assert_eq!(decode_to_app(&framed[4..]).expect("re-decode"), m);
    }
});
