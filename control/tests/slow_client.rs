//! An application that sends requests and never reads the replies, against iwarp-control as
//! its own process (the test plays iwarpd with the testkit's fake daemon, and two
//! applications on control.sock).

use iwarp_abi::app::{decode_to_app, encode_request, message_len, Reply, Request, ToApp};
use iwarp_abi::command::Command;
use iwarp_abi::daemon_shm::DaemonShm;
use iwarp_abi::id::PdId;
use iwarp_abi::segment::HugePolicy;
use iwarp_testkit::fake_daemon;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn call(s: &mut UnixStream, req: &Request) -> std::io::Result<Reply> {
    s.write_all(&encode_request(req))?;
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        if let Some(n) = message_len(&buf).unwrap() {
            match decode_to_app(&buf[4..n]).unwrap() {
                ToApp::Reply(r) => return Ok(r),
                ToApp::Event(_) => {
                    buf.drain(..n);
                    continue;
                }
            }
        }
        let n = s.read(&mut tmp)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

fn pd(s: &mut UnixStream) -> u32 {
    match call(s, &Request::AllocPd).expect("answered") {
        Reply::Id(i) => i,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_client_that_never_reads_is_dropped_and_freezes_nobody() {
    let dir = std::env::temp_dir().join(iwarp_testkit::unique("iwarp-slow-client"));
    std::fs::create_dir_all(&dir).unwrap();
    let d = DaemonShm::create(
        &iwarp_testkit::unique("slow"),
        Some(&dir.join("daemon.shm")),
        64,
        64,
        HugePolicy::Off,
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel();
    let daemon = std::thread::spawn(move || fake_daemon(d, tx, stop_rx));
    let control = iwarp_testkit::start_control(&dir);
    let sock = dir.join("control.sock");

    // The bad client owns a PD, then floods control with Query RNIC requests and reads
    // nothing, until control hangs up on it.
    let mut bad = UnixStream::connect(&sock).unwrap();
    let bad_pd = pd(&mut bad);
    let flood = std::thread::spawn(move || {
        let req = encode_request(&Request::QueryRnic);
        let t = Instant::now();
        let mut sent = 0u64;
        while t.elapsed() < Duration::from_secs(60) {
            match bad.write_all(&req) {
                Ok(()) => sent += 1,
                Err(e) => return (sent, Some(e.kind())),
            }
        }
        (sent, None)
    });

    // Meanwhile another application is answered, every time.
    let mut good = UnixStream::connect(&sock).unwrap();
    good.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answered = 0;
    while !flood.is_finished() {
        pd(&mut good);
        answered += 1;
    }
    let (sent, ended) = flood.join().unwrap();
    assert!(
        ended.is_some(),
        "control never dropped the client that does not read ({sent} requests sent)"
    );
    assert!(sent > 100, "dropped after {sent} requests only");
    assert!(answered > 0);

    // The dropped client's resources are released in the daemon, as after EOF.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Command::DeallocPd { pd }) if pd == PdId(bad_pd) => break,
            Ok(_) => {}
            Err(e) => panic!("the dropped client's PD was never released: {e}"),
        }
    }
    pd(&mut good);
    drop(control);
    stop_tx.send(()).unwrap();
    daemon.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
