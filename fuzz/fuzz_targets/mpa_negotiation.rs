//! MPA connection setup (RFC 5044 section 7, RFC 6581) on arbitrary peer octets: framing,
//! Request parsing, accepting what parses, and Reply parsing never panic; a Reply built by
//! `accept` is always accepted by `parse_reply` on the initiator side with the same settings.
#![no_main]
use iwarp_wire::mpa::negotiation::{
    accept, frame_complete, parse_reply, parse_request, request, Settings,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let s = Settings::default();
    if let Ok(Some(n)) = frame_complete(data) {
        assert!(n <= data.len());
    }
    let _ = parse_reply(data, &s);
    if let Ok(req) = parse_request(data) {
        if let Ok((reply, _)) = accept(&req, &s) {
            assert_eq!(frame_complete(&reply).ok().flatten(), Some(reply.len()));
        }
    }
    // Our own Request, answered by our own responder, is always understood.
    let ours = request(&s).expect("default request");
    let req = parse_request(&ours).expect("own request parses");
    let (reply, _) = accept(&req, &s).expect("own request accepted");
    parse_reply(&reply, &s).expect("own reply parses");
});
