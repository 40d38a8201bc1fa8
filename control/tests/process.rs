//! iwarp-control as a separate process: the test plays iwarpd (creates the daemon segment,
//! answers every command, beats) and an application (talks on control.sock).

use iwarp_abi::app::{decode_to_app, encode_request, message_len, Failure, Reply, Request, ToApp};
use iwarp_abi::command::{reply_status, Command, ShmPath, Upcall};
use iwarp_abi::daemon_shm::{DaemonShm, DaemonSide};
use iwarp_abi::id::{CqId, PdId, QpId, Stag};
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use iwarp_control::resources::access;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command as Proc};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Answers every command OK and forwards it to the test.
fn fake_daemon(mut d: DaemonSide, tx: mpsc::Sender<Command>, stop: mpsc::Receiver<()>) {
    while stop.try_recv().is_err() {
        d.beat();
        match d.recv_command() {
            Some(Ok((req_id, c))) => {
                let _ = tx.send(c);
                let r = Upcall::Reply {
                    req_id,
                    status: reply_status::OK,
                    value: 0,
                };
                while d.send_upcall(&r).is_err() {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            Some(Err(e)) => panic!("undecodable command: {e}"),
            None => std::thread::sleep(Duration::from_micros(100)),
        }
    }
}

fn call(s: &mut UnixStream, req: &Request) -> Reply {
    s.write_all(&encode_request(req)).unwrap();
    recv(s)
}

fn recv(s: &mut UnixStream) -> Reply {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        if let Some(n) = message_len(&buf).unwrap() {
            match decode_to_app(&buf[4..n]).unwrap() {
                ToApp::Reply(r) => return r,
                ToApp::Event(e) => panic!("unexpected event {e:?}"),
            }
        }
        let n = s.read(&mut tmp).unwrap();
        assert!(n > 0, "control closed the socket");
        buf.extend_from_slice(&tmp[..n]);
    }
}

fn id(r: Reply) -> u32 {
    match r {
        Reply::Id(i) => i,
        other => panic!("{other:?}"),
    }
}

/// A fresh runtime directory for test `tag` with the daemon segment linked into it, as
/// iwarpd makes them.
fn runtime(tag: &str) -> (std::path::PathBuf, DaemonSide) {
    let dir = std::env::temp_dir().join(format!("iwarp-control-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let name = format!("iwarp-ctl-{tag}-{}.daemon", std::process::id());
    let d = DaemonShm::create(
        &name,
        Some(&dir.join("daemon.shm")),
        64,
        64,
        HugePolicy::Off,
    )
    .unwrap();
    (dir, d)
}

/// iwarp-control serving `dir`, killed when dropped.
fn spawn_control(dir: &Path) -> Kill {
    Kill(
        Proc::new(env!("CARGO_BIN_EXE_iwarp-control"))
            .arg("--runtime-dir")
            .arg(dir)
            .spawn()
            .unwrap(),
    )
}

/// An application's connection to control.sock, once control listens (before `deadline`).
fn connect(dir: &Path, deadline: Instant) -> UnixStream {
    loop {
        match UnixStream::connect(dir.join("control.sock")) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("control never listened: {e}"),
        }
    }
}

#[test]
fn an_application_is_served_and_cleaned_up_after_eof() {
    let (dir, d) = runtime("test");
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel();
    let daemon = std::thread::spawn(move || fake_daemon(d, tx, stop_rx));

    let _ctl = spawn_control(&dir);
    let mut s = connect(&dir, Instant::now() + Duration::from_secs(20));

    let Reply::Rnic(limits) = call(&mut s, &Request::QueryRnic) else {
        panic!("no Query RNIC answer")
    };
    assert_eq!(limits.max_sge, 4);
    let pd = PdId(id(call(&mut s, &Request::AllocPd)));
    assert_eq!(rx.recv().unwrap(), Command::AllocPd { pd });
    // A ring path that is not this application's CQ segment is refused...
    let ring = ShmPath::new(Path::new("/dev/shm/iw-test-no-such-cq")).unwrap();
    match call(&mut s, &Request::CreateCq { depth: 64, ring }) {
        Reply::Failed(Failure { message, .. }) => assert!(message.contains("ring"), "{message}"),
        other => panic!("{other:?}"),
    }
    // ...its own CQ ring segment is accepted.
    let cq_seg = Segment::create_sealed(
        &format!("iw-test-cq-{}", std::process::id()),
        SegmentKind::CompletionQueue,
        1 << 14,
        HugePolicy::Off,
    )
    .unwrap();
    let ring = ShmPath::new(cq_seg.path().unwrap()).unwrap();
    let cq = id(call(&mut s, &Request::CreateCq { depth: 64, ring }));
    assert_eq!(
        rx.recv().unwrap(),
        Command::CreateCq {
            cq: CqId(cq),
            depth: 64,
            ring
        }
    );

    // Memory this process allocated as a shared segment can be registered...
    let mem = Segment::create_sealed(
        &format!("iw-test-mem-{}", std::process::id()),
        SegmentKind::Memory,
        1 << 16,
        HugePolicy::Off,
    )
    .unwrap();
    let path = ShmPath::new(mem.path().unwrap()).unwrap();
    let seg = id(call(&mut s, &Request::AttachSegment { path }));
    let req = Request::RegMr {
        pd,
        access: access::LOCAL_WRITE | access::REMOTE_WRITE,
        segment: seg,
        offset: 0,
        len: 4096,
    };
    let stag = id(call(&mut s, &req));
    assert!(
        matches!(rx.recv().unwrap(), Command::RegisterMr { stag: st, len: 4096, .. } if st == Stag(stag))
    );
    // ...a length past the segment is refused with the reason...
    let past = Request::RegMr {
        pd,
        access: 0,
        segment: seg,
        offset: 0,
        len: 1 << 20,
    };
    match call(&mut s, &past) {
        Reply::Failed(Failure { message, .. }) => {
            assert!(message.contains("does not fit"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // ...a segment file in /dev/shm, which anyone with the name can truncate under the
    // daemon's mapping, is refused although its header is right...
    let unsealed = Segment::create(
        &format!("iw-test-unsealed-{}", std::process::id()),
        SegmentKind::Memory,
        1 << 16,
        HugePolicy::Off,
    )
    .unwrap();
    let path = ShmPath::new(unsealed.path().unwrap()).unwrap();
    match call(&mut s, &Request::AttachSegment { path }) {
        Reply::Failed(Failure { message, .. }) => assert!(message.contains("sealed"), "{message}"),
        other => panic!("{other:?}"),
    }
    // ...and ordinary memory is refused clearly.
    let plain = dir.join("plain-file");
    std::fs::write(&plain, [0u8; 8192]).unwrap();
    let bad = ShmPath::new(&plain).unwrap();
    match call(&mut s, &Request::AttachSegment { path: bad }) {
        Reply::Failed(Failure { message, .. }) => {
            assert!(message.contains("alloc_buffer"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // A bad request leaves the connection usable.
    s.write_all(&[3, 0, 0, 0, 99, 1, 2]).unwrap();
    match recv(&mut s) {
        Reply::Failed(Failure { code: 10, message }) => {
            assert!(message.contains("unknown variant"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match call(&mut s, &Request::QueryQp { qp: QpId(1) }) {
        Reply::Failed(Failure { code: 1, .. }) => {}
        other => panic!("{other:?}"),
    }

    // The application "crashes": its socket closes. (Its segments are memory files that
    // go with the last descriptor and mapping: nothing is left to remove.)
    drop((cq_seg, mem));
    // EOF: control tears everything of this application down in the daemon.
    drop(s);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.push(
            rx.recv_timeout(Duration::from_secs(20))
                .expect("cleanup commands"),
        );
    }
    assert_eq!(
        seen,
        vec![
            Command::DeregisterMr { stag: Stag(stag) },
            Command::DestroyCq { cq: CqId(cq) },
            Command::DeallocPd { pd },
        ]
    );
    stop_tx.send(()).unwrap();
    daemon.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_vanished_daemon_is_detected_and_applications_see_eof() {
    let (dir, d) = runtime("test2");
    let mut ctl = spawn_control(&dir);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut s = connect(&dir, deadline);
    // The daemon goes away (its segment and link are removed).
    drop(d);
    let status = loop {
        if let Some(st) = ctl.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "control did not notice");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(3));
    let mut b = [0u8; 1];
    // The connection ends: EOF, or a reset if control had not accepted it yet.
    assert!(
        matches!(s.read(&mut b), Ok(0) | Err(_)),
        "the application sees its connection end"
    );
    assert!(!dir.join("control.sock").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_cleans_up_and_leaves_no_socket_behind() {
    let (dir, d) = runtime("test3");
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel();
    let daemon = std::thread::spawn(move || fake_daemon(d, tx, stop_rx));
    let mut ctl = spawn_control(&dir);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut s = connect(&dir, deadline);
    let pd = PdId(id(call(&mut s, &Request::AllocPd)));
    assert_eq!(rx.recv().unwrap(), Command::AllocPd { pd });
    // SAFETY: signalling our own child.
    assert_eq!(
        unsafe { libc::kill(ctl.0.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let status = loop {
        if let Some(st) = ctl.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "control did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        Command::DeallocPd { pd },
        "the application's PD was freed in the daemon"
    );
    assert!(!dir.join("control.sock").exists());
    stop_tx.send(()).unwrap();
    daemon.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Voluntary context switches of process `pid` so far: each is a sleep it began.
fn sleeps_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// An idle control sleeps on its bell instead of looking at the upcall rings thousands of
/// times a second, and an upcall the daemon queues then wakes it: a connection to a port
/// nobody listens on is aborted.
#[test]
fn an_idle_control_sleeps_until_an_upcall_rings_it() {
    let (dir, mut d) = runtime("test4");
    let mut ctl = spawn_control(&dir);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !d.control_asleep() {
        assert!(Instant::now() < deadline, "control never slept on its bell");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(dir.join("control.bell").exists());
    // Waking every 200 µs, as a loop that polls the rings does, would be 5,000 sleeps a
    // second; asleep on the bell it wakes to check on the daemon every 100 ms.
    let before = sleeps_of(ctl.0.id());
    std::thread::sleep(Duration::from_secs(1));
    let slept = sleeps_of(ctl.0.id()) - before;
    assert!(
        slept < 100,
        "an idle control slept {slept} times in a second"
    );

    d.send_upcall(&Upcall::TcpIncoming {
        conn: 7,
        local_port: 4791,
        peer: std::net::SocketAddr::from(([10, 0, 0, 9], 40000)),
    })
    .unwrap();
    let aborted = loop {
        if let Some(c) = d.recv_command() {
            break c.unwrap().1;
        }
        assert!(
            Instant::now() < deadline,
            "control never answered the upcall"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(aborted, Command::TcpAbort { conn: 7 });

    // SAFETY: signalling our own child.
    assert_eq!(
        unsafe { libc::kill(ctl.0.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    while ctl.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "control did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !dir.join("control.bell").exists(),
        "the bell was left behind"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
