//! Rings in shared segments between two real processes: the test binary re-runs itself as
//! the child (selected by an environment variable), the parent checks everything in order.

use iwarp_abi::command::{reply_status, Chunk, Command, Upcall};
use iwarp_abi::daemon_shm::DaemonShm;
use iwarp_abi::ring;
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use std::path::Path;
use std::process::Command as Process;
use std::sync::Arc;

const N: u64 = 1_000_000;
const CAP: usize = 1024;

/// In the child: exit if the parent died (a failed assertion there must not leave a child
/// spinning on a full ring forever).
fn parent_gone(parent: u32) -> bool {
    std::os::unix::process::parent_id() != parent
}

/// In the parent: fail if the child exited early instead of spinning on an empty ring.
fn child_failed(child: &mut std::process::Child) -> bool {
    matches!(child.try_wait(), Ok(Some(_)))
}

fn spawn_child(test: &str, var: &str, path: &Path) -> std::process::Child {
    Process::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, path)
        .spawn()
        .unwrap()
}

#[test]
fn ring_between_two_processes() {
    if let Ok(path) = std::env::var("IWARP_RING_CHILD") {
        // The child: attach and produce, single pushes and batches of varying size.
        let seg = Arc::new(Segment::open(Path::new(&path), Some(SegmentKind::Other)).unwrap());
        let (mut p, _) = ring::attach_segment::<u64>(&seg).unwrap();
        let parent = std::os::unix::process::parent_id();
        let mut i = 0u64;
        let mut batch = Vec::with_capacity(64);
        let mut idle = 0u32;
        while i < N {
            idle += 1;
            if idle.is_multiple_of(100_000) && parent_gone(parent) {
                std::process::exit(1);
            }
            if i.is_multiple_of(3) {
                if p.push(i * 3 + 1).is_ok() {
                    i += 1;
                }
            } else {
                batch.clear();
                let n = ((i % 61) + 1).min(N - i);
                batch.extend((i..i + n).map(|v| v * 3 + 1));
                i += p.push_batch(&batch) as u64;
            }
        }
        return;
    }
    let name = format!("iwarp-ring-test-{}", std::process::id());
    let seg = Arc::new(
        Segment::create(
            &name,
            SegmentKind::Other,
            ring::ring_bytes::<u64>(CAP),
            HugePolicy::Auto,
        )
        .unwrap(),
    );
    let (_, mut c) = ring::init_segment::<u64>(&seg, CAP).unwrap();
    let mut child = spawn_child(
        "ring_between_two_processes",
        "IWARP_RING_CHILD",
        seg.path().unwrap(),
    );
    let mut next = 0;
    let mut idle = 0u32;
    let mut buf = [0u64; 100];
    while next < N {
        let n = if next % 2 == 0 {
            c.pop_batch(&mut buf)
        } else {
            c.pop().map(|v| buf[0] = v).map_or(0, |_| 1)
        };
        for v in &buf[..n] {
            assert_eq!(*v, next * 3 + 1);
            next += 1;
        }
        if n == 0 {
            idle += 1;
            if idle.is_multiple_of(100_000) {
                assert!(!child_failed(&mut child), "the producer exited early");
            }
            std::hint::spin_loop();
        }
    }
    assert!(child.wait().unwrap().success());
    assert!(c.is_empty());
    assert!(!c.is_corrupt());
    let path = seg.path().unwrap().to_path_buf();
    println!(
        "1M entries across processes through {:?} ({:?})",
        path,
        seg.backing()
    );
    drop(c);
    drop(seg);
    assert!(!path.exists(), "the creator removes the segment");
}

#[test]
fn daemon_segment_between_two_processes() {
    const COMMANDS: u64 = 20_000;
    if let Ok(path) = std::env::var("IWARP_CONTROL_CHILD") {
        // The child plays iwarp-control: sends commands, reads the replies in order.
        let mut c = DaemonShm::open(Path::new(&path), 5).unwrap();
        let parent = std::os::unix::process::parent_id();
        let mut sent = 0u64;
        let mut answered = 0u64;
        let mut idle = 0u32;
        while answered < COMMANDS {
            idle += 1;
            if idle.is_multiple_of(100_000) && parent_gone(parent) {
                std::process::exit(1);
            }
            if sent < COMMANDS {
                let body = sent.to_le_bytes();
                let cmd = Command::TcpSend {
                    conn: sent as u32,
                    bytes: Chunk::new(&body[..(sent % 9) as usize]),
                };
                // Err(Full) is back-pressure: retry after draining replies.
                if c.send_command(0, sent, &cmd).is_ok() {
                    sent += 1;
                }
            }
            if let Some(u) = c.recv_upcall(0) {
                assert_eq!(
                    u.unwrap(),
                    Upcall::Reply {
                        req_id: answered,
                        status: reply_status::OK,
                        value: answered % 9,
                    }
                );
                answered += 1;
            }
        }
        assert!(c.heartbeat(0) > 0);
        c.send_command(0, COMMANDS, &Command::Shutdown).unwrap();
        return;
    }
    let name = format!("iwarp-daemon-test-{}", std::process::id());
    let mut d = DaemonShm::create(&name, None, 64, 64, HugePolicy::Auto).unwrap();
    d.beat();
    let mut child = spawn_child(
        "daemon_segment_between_two_processes",
        "IWARP_CONTROL_CHILD",
        d.path().unwrap(),
    );
    let mut expect = 0u64;
    let mut pending: Option<Upcall> = None;
    let mut idle = 0u32;
    loop {
        idle += 1;
        if idle.is_multiple_of(100_000) {
            assert!(!child_failed(&mut child), "control child exited early");
        }
        if let Some(u) = pending {
            if d.send_upcall(&u).is_ok() {
                pending = None;
            } else {
                std::hint::spin_loop();
                continue;
            }
        }
        let Some(r) = d.recv_command() else {
            std::hint::spin_loop();
            continue;
        };
        let (req, cmd) = r.unwrap();
        assert_eq!(req, expect);
        expect += 1;
        match cmd {
            Command::TcpSend { conn, bytes } => {
                assert_eq!(conn as u64, req);
                let body = req.to_le_bytes();
                assert_eq!(bytes.as_bytes(), &body[..(req % 9) as usize]);
                pending = Some(Upcall::Reply {
                    req_id: req,
                    status: reply_status::OK,
                    value: bytes.as_bytes().len() as u64,
                });
            }
            Command::Shutdown => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(expect, COMMANDS + 1);
    assert_eq!(d.control_generation(), 5);
    assert!(child.wait().unwrap().success());
}
