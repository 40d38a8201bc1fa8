//! The three-process RNIC with real processes: two `iwarpd` on the embedded Unix-socket
//! Ethernet, an `iwarp-control` beside each, and this test as the application on both,
//! talking control's socket protocol directly and the shared rings through iwarp-verbs'
//! fast path. Connection setup runs MPA in control over the daemon's relay; the data path
//! runs in the daemons.

use iwarp_abi::command::ShmPath;
use iwarp_abi::ring;
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use iwarp_abi::wqe::{access, Cqe, RecvWqe, SendWqe};
use iwarp_control::app_proto::{decode_reply, encode_request, message_len};
use iwarp_control::app_proto::{ClientEvent, ClientReply};
use iwarp_control::app_server::Request;
use iwarp_control::resources::QpAttrs;
use iwarp_verbs::{
    CompletionQueue, MemoryRegion, QueuePair, RecvWr, SendWr, Sg, WcStatus, WrOpcode,
};
use iwarp_wire::mpa::negotiation::Settings;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// iwarp-control, built beside iwarpd in the same target directory.
fn control_bin() -> PathBuf {
    let d = Path::new(env!("CARGO_BIN_EXE_iwarpd")).parent().unwrap();
    let p = d.join("iwarp-control");
    if !p.exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "-p", "iwarp-control", "--bin", "iwarp-control"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    p
}

struct Endpoint {
    _daemon: Kill,
    _control: Kill,
    sock: UnixStream,
    events: Vec<ClientEvent>,
}

fn start(dir: &Path, name: &str, n: u8) -> Endpoint {
    let rt = dir.join(name);
    let daemon = Kill(
        Command::new(env!("CARGO_BIN_EXE_iwarpd"))
            .args(["--name", &format!("{name}-{}", std::process::id())])
            .args(["--port", "unix", "--polling", "adaptive"])
            .arg("--segment")
            .arg(dir.join("eth"))
            .args(["--mac", &format!("02:00:00:00:99:0{n}")])
            .args(["--ip", &format!("10.99.0.{n}/24")])
            .arg("--runtime-dir")
            .arg(&rt)
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while !rt.join("daemon.shm").exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "iwarpd {name} did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let control = Kill(
        Command::new(control_bin())
            .arg("--runtime-dir")
            .arg(&rt)
            .spawn()
            .unwrap(),
    );
    let sock = loop {
        match UnixStream::connect(rt.join("control.sock")) {
            Ok(s) => break s,
            Err(_) if t.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("iwarp-control {name} never listened: {e}"),
        }
    };
    Endpoint {
        _daemon: daemon,
        _control: control,
        sock,
        events: Vec::new(),
    }
}

impl Endpoint {
    fn recv(&mut self) -> ClientReply {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(n) = message_len(&buf).unwrap() {
                return decode_reply(&buf[4..n]).unwrap();
            }
            let k = self.sock.read(&mut chunk).unwrap();
            assert!(k > 0, "control closed the socket");
            buf.extend_from_slice(&chunk[..k]);
        }
    }

    fn call(&mut self, r: &Request) -> ClientReply {
        self.sock.write_all(&encode_request(r)).unwrap();
        loop {
            match self.recv() {
                ClientReply::Event(e) => self.events.push(e),
                other => return other,
            }
        }
    }

    fn id(&mut self, r: &Request) -> u32 {
        match self.call(r) {
            ClientReply::Id(i) => i,
            other => panic!("{r:?}: {other:?}"),
        }
    }

    fn event(&mut self) -> ClientEvent {
        if !self.events.is_empty() {
            return self.events.remove(0);
        }
        self.sock
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        match self.recv() {
            ClientReply::Event(e) => e,
            other => panic!("expected an event: {other:?}"),
        }
    }
}

fn segment(tag: &str, kind: SegmentKind, bytes: usize) -> Arc<Segment> {
    let name = format!("iw3p-{tag}-{}", std::process::id());
    Arc::new(Segment::create(&name, kind, bytes, HugePolicy::Off).unwrap())
}

fn path(s: &Segment) -> ShmPath {
    ShmPath::new(s.path().unwrap()).unwrap()
}

/// One side's resources: a CQ, a QP and a registered 64 KiB buffer.
struct Side {
    qp: QueuePair,
    cq: Arc<CompletionQueue>,
    mr: MemoryRegion,
    mem: Arc<Segment>,
    qp_num: u32,
}

fn resources(e: &mut Endpoint, tag: &str) -> Side {
    let pd = e.id(&Request::AllocPd);
    let cq_seg = segment(
        &format!("{tag}-cq"),
        SegmentKind::CompletionQueue,
        ring::ring_bytes::<Cqe>(256),
    );
    let (_, cq_ring) = ring::init_segment::<Cqe>(&cq_seg, 256).unwrap();
    let cq = e.id(&Request::CreateCq {
        depth: 256,
        ring: path(&cq_seg),
    });
    let cq = Arc::new(CompletionQueue::from_ring(cq, cq_ring));
    let sq_seg = segment(
        &format!("{tag}-sq"),
        SegmentKind::SendQueue,
        ring::ring_bytes::<SendWqe>(64),
    );
    let rq_seg = segment(
        &format!("{tag}-rq"),
        SegmentKind::RecvQueue,
        ring::ring_bytes::<RecvWqe>(64),
    );
    let (sq, _) = ring::init_segment::<SendWqe>(&sq_seg, 64).unwrap();
    let (rq, _) = ring::init_segment::<RecvWqe>(&rq_seg, 64).unwrap();
    let attrs = QpAttrs {
        pd,
        send_cq: cq.cq_num(),
        recv_cq: cq.cq_num(),
        srq: None,
        sq_depth: 64,
        rq_depth: 64,
        max_sge: 4,
        max_inline: 64,
        ird: 8,
        ord: 8,
    };
    let qp_num = e.id(&Request::CreateQp {
        attrs,
        sq: path(&sq_seg),
        rq: path(&rq_seg),
    });
    let qp = QueuePair::from_rings(qp_num, sq, Some(rq), cq.clone(), cq.clone(), 4, 64);
    let mem = segment(&format!("{tag}-mem"), SegmentKind::Memory, 1 << 16);
    let seg = e.id(&Request::AttachSegment { path: path(&mem) });
    let stag = e.id(&Request::RegMr {
        pd,
        access: access::LOCAL_WRITE
            | access::REMOTE_READ
            | access::REMOTE_WRITE
            | access::REMOTE_ATOMIC,
        segment: seg,
        offset: 0,
        len: 1 << 16,
    });
    Side {
        qp,
        cq,
        mr: MemoryRegion::from_registration(stag, 0, 1 << 16),
        mem,
        qp_num,
    }
}

fn wait_cqe(cq: &CompletionQueue) -> iwarp_verbs::WorkCompletion {
    let t = Instant::now();
    loop {
        if let Some(wc) = cq.poll_one().unwrap() {
            return wc;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no completion");
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn mem_write(s: &Segment, off: usize, b: &[u8]) {
    // SAFETY: test-only; the range lies in the data area and no work request uses it now.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), s.data().as_ptr().add(off), b.len());
    }
}

fn mem_read(s: &Segment, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(s.data().as_ptr().add(off), v.as_mut_ptr(), len) };
    v
}

#[test]
fn two_endpoints_connect_through_control_and_move_data_through_the_daemons() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = start(dir.path(), "a", 1);
    let mut b = start(dir.path(), "b", 2);
    let sa = resources(&mut a, "a");
    let sb = resources(&mut b, "b");

    assert!(matches!(
        b.call(&Request::Listen {
            port: 7000,
            settings: Settings::default()
        }),
        ClientReply::Done
    ));
    let conn_a = a.id(&Request::Connect {
        qp: sa.qp_num,
        remote: "10.99.0.2:7000".parse().unwrap(),
        settings: Settings {
            private_data: b"hello".to_vec(),
            ..Settings::default()
        },
    });
    let ClientEvent::ConnectRequest {
        conn, private_data, ..
    } = b.event()
    else {
        panic!("no connect request")
    };
    assert_eq!(private_data, b"hello");
    assert!(matches!(
        b.call(&Request::Accept {
            conn,
            qp: sb.qp_num,
            settings: Settings::default()
        }),
        ClientReply::Done
    ));
    let ea = a.event();
    assert!(
        matches!(ea, ClientEvent::Established { conn, .. } if conn == conn_a),
        "{ea:?}"
    );
    let eb = b.event();
    assert!(matches!(eb, ClientEvent::Established { .. }), "{eb:?}");

    // Send: B posts a receive, A sends.
    let rsg = [Sg {
        mr: &sb.mr,
        offset: 0,
        len: 4096,
    }];
    sb.qp
        .post_recv(&RecvWr {
            wr_id: 1,
            sg_list: &rsg,
        })
        .unwrap();
    mem_write(&sa.mem, 0, b"a message through three processes");
    let ssg = [Sg {
        mr: &sa.mr,
        offset: 0,
        len: 33,
    }];
    sa.qp
        .post_send(&SendWr::new(2, WrOpcode::Send, &ssg))
        .unwrap();
    let wc = wait_cqe(&sa.cq);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
    let wc = wait_cqe(&sb.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 33)
    );
    assert_eq!(
        mem_read(&sb.mem, 0, 33),
        b"a message through three processes"
    );

    // RDMA Write A -> B at offset 8192, then Read it back into A at 16384.
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    mem_write(&sa.mem, 4096, &payload);
    let wsg = [Sg {
        mr: &sa.mr,
        offset: 4096,
        len: 3000,
    }];
    sa.qp
        .post_send(&SendWr::new(
            3,
            WrOpcode::RdmaWrite {
                rkey: sb.mr.stag(),
                remote_addr: 8192,
            },
            &wsg,
        ))
        .unwrap();
    assert_eq!(wait_cqe(&sa.cq).status, WcStatus::Success);
    let rsg = [Sg {
        mr: &sa.mr,
        offset: 16384,
        len: 3000,
    }];
    sa.qp
        .post_send(&SendWr::new(
            4,
            WrOpcode::RdmaRead {
                rkey: sb.mr.stag(),
                remote_addr: 8192,
            },
            &rsg,
        ))
        .unwrap();
    let wc = wait_cqe(&sa.cq);
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::Success));
    assert_eq!(mem_read(&sb.mem, 8192, 3000), payload);
    assert_eq!(mem_read(&sa.mem, 16384, 3000), payload);
}
