//! Any message on a connection between Unix ports: no panic; the frames read are whole and
//! in order, and packed again they are the message's first octets.
#![no_main]
use iwarpd::port::unix::{unpack, FRAME_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut again = Vec::new();
    for f in unpack(data) {
        let Ok(f) = f else { break };
        assert!(f.len() >= 14, "a frame holds an Ethernet header");
        let len = (f.len() as u32).to_be_bytes();
        assert_eq!(len.len(), FRAME_LEN);
        again.extend_from_slice(&len);
        again.extend_from_slice(f);
    }
    assert!(again.len() <= data.len());
    assert_eq!(&data[..again.len()], &again[..]);
});
