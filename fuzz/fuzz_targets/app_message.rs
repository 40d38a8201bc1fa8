//! Any message on an application's control socket, either way: no panic; a request that
//! decodes re-encodes to the same request.
#![no_main]
use iwarp_control::app_proto::{decode_reply, decode_request, encode_request, message_len};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = message_len(data);
    if let Ok(req) = decode_request(data) {
        let framed = encode_request(&req);
        assert_eq!(decode_request(&framed[4..]).expect("re-decode"), req);
    }
    let _ = decode_reply(data);
});
