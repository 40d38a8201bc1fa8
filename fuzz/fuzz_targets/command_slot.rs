//! Any command-ring slot (what a broken or hostile control process could leave there): no
//! panic; a command or upcall that decodes re-encodes to a slot that decodes the same.
#![no_main]
use iwarp_abi::command::{Command, Msg, Upcall, MSG_PAYLOAD};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let mut m = Msg {
        tag: u32::from_le_bytes(data[0..4].try_into().unwrap()),
        len: u32::from_le_bytes(data[4..8].try_into().unwrap()),
        req_id: u64::from_le_bytes(data[8..16].try_into().unwrap()),
        ..Msg::default()
    };
    let body = &data[16..];
    let n = body.len().min(MSG_PAYLOAD);
    m.payload[..n].copy_from_slice(&body[..n]);
    if let Ok((req_id, c)) = Command::decode(&m) {
        assert_eq!(
            Command::decode(&c.encode(req_id)).expect("re-decode"),
            (req_id, c)
        );
    }
    if let Ok(u) = Upcall::decode(&m) {
        assert_eq!(Upcall::decode(&u.encode()).expect("re-decode"), u);
    }
});
