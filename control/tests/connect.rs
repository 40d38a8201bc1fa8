//! Connection management through the iwarp-control process: two applications on one
//! control, a fake iwarpd that joins TcpConnect to a TcpListen on loopback and carries the
//! MPA bytes between the two ends.

use iwarp_abi::app::{
    decode_to_app, encode_request, message_len, ConnSettings, ConnectRequest, Established, Event,
    Failure, QpAttrs, Reply, Request, ToApp,
};
use iwarp_abi::command::{Command, ShmPath};
use iwarp_abi::daemon_shm::DaemonShm;
use iwarp_abi::id::{CqId, PdId, QpId};
use iwarp_abi::segment::{HugePolicy, Segment, SegmentKind};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
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

struct Client {
    s: UnixStream,
    buf: Vec<u8>,
    events: VecDeque<Event>,
}

impl Client {
    fn next(&mut self) -> ToApp {
        let mut tmp = [0u8; 4096];
        loop {
            if let Some(n) = message_len(&self.buf).unwrap() {
                let r = decode_to_app(&self.buf[4..n]).unwrap();
                self.buf.drain(..n);
                return r;
            }
            let n = self.s.read(&mut tmp).unwrap();
            assert!(n > 0, "control closed the socket");
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }
    fn call(&mut self, req: &Request) -> Reply {
        self.s.write_all(&encode_request(req)).unwrap();
        loop {
            match self.next() {
                ToApp::Event(e) => self.events.push_back(e),
                ToApp::Reply(r) => return r,
            }
        }
    }
    fn event(&mut self) -> Event {
        if let Some(e) = self.events.pop_front() {
            return e;
        }
        match self.next() {
            ToApp::Event(e) => e,
            other => panic!("expected an event, got {other:?}"),
        }
    }
    fn id(&mut self, req: &Request) -> u32 {
        match self.call(req) {
            Reply::Id(i) => i,
            other => panic!("{req:?}: {other:?}"),
        }
    }
    /// PD, CQ and one QP with ring segments this process created.
    fn qp(&mut self, tag: &str, keep: &mut Vec<Segment>) -> QpId {
        let mut seg = |kind: SegmentKind, what: &str| {
            let s = Segment::create_sealed(
                &format!("iw-cmtest-{}-{tag}-{what}", std::process::id()),
                kind,
                1 << 14,
                HugePolicy::Off,
            )
            .unwrap();
            let p = ShmPath::new(s.path().unwrap()).unwrap();
            keep.push(s);
            p
        };
        let (cq_ring, sq, rq) = (
            seg(SegmentKind::CompletionQueue, "cq"),
            seg(SegmentKind::SendQueue, "sq"),
            seg(SegmentKind::RecvQueue, "rq"),
        );
        let pd = PdId(self.id(&Request::AllocPd));
        let cq = CqId(self.id(&Request::CreateCq {
            depth: 64,
            ring: cq_ring,
        }));
        let attrs = QpAttrs {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_depth: 32,
            rq_depth: 32,
            max_sge: 1,
            max_inline: 0,
            ird: 16,
            ord: 16,
        };
        QpId(self.id(&Request::CreateQp { attrs, sq, rq }))
    }
}

fn settings(ird: u16, ord: u16, pd: &[u8]) -> ConnSettings {
    ConnSettings {
        ird,
        ord,
        private_data: pd.to_vec(),
        ..ConnSettings::default()
    }
}

#[test]
fn connect_accept_reject_and_disconnect_through_the_process() {
    let dir = std::env::temp_dir().join(format!("iwarp-control-cm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let name = format!("iwarp-ctl-cm-{}.daemon", std::process::id());
    let d = DaemonShm::create(
        &name,
        Some(&dir.join("daemon.shm")),
        64,
        256,
        HugePolicy::Off,
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel();
    let daemon = std::thread::spawn(move || iwarp_testkit::fake_daemon(d, tx, stop_rx));
    let _ctl = Kill(
        Proc::new(env!("CARGO_BIN_EXE_iwarp-control"))
            .arg("--runtime-dir")
            .arg(&dir)
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let connect = || loop {
        match UnixStream::connect(dir.join("control.sock")) {
            Ok(s) => {
                break Client {
                    s,
                    buf: Vec::new(),
                    events: VecDeque::new(),
                }
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("control never listened: {e}"),
        }
    };
    let (mut a, mut b) = (connect(), connect());
    let mut keep = Vec::new();
    let qa = a.qp("a", &mut keep);
    let qb = b.qp("b", &mut keep);

    assert_eq!(
        b.call(&Request::Listen {
            port: 5000,
            settings: ConnSettings::default()
        }),
        Reply::Done
    );
    match a.call(&Request::Listen {
        port: 5000,
        settings: ConnSettings::default(),
    }) {
        Reply::Failed(Failure { message, .. }) => {
            assert!(message.contains("still used"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // A connects with IRD 4 / ORD 8; B accepts with IRD 2 / ORD 16.
    let remote = "127.0.0.1:5000".parse().unwrap();
    let ca = a.id(&Request::Connect {
        qp: qa,
        remote,
        settings: settings(4, 8, b"hello"),
    });
    let Event::ConnectRequest(ConnectRequest {
        conn: cb,
        port: 5000,
        private_data,
        ..
    }) = b.event()
    else {
        panic!("no connect request")
    };
    assert_eq!(private_data, b"hello");
    // A cannot accept B's connection, nor on B's QP.
    assert!(matches!(
        a.call(&Request::Accept {
            conn: cb,
            qp: qa,
            settings: ConnSettings::default()
        }),
        Reply::Failed(Failure { .. })
    ));
    assert_eq!(
        b.call(&Request::Accept {
            conn: cb,
            qp: qb,
            settings: settings(2, 16, b"welcome"),
        }),
        Reply::Done
    );
    assert_eq!(
        b.event(),
        Event::Established(Established {
            conn: cb,
            qp: qb,
            ird: 2,
            ord: 4,
            rdmap_version: 1,
            private_data: b"hello".to_vec()
        })
    );
    assert_eq!(
        a.event(),
        Event::Established(Established {
            conn: ca,
            qp: qa,
            ird: 4,
            ord: 2,
            rdmap_version: 1,
            private_data: b"welcome".to_vec()
        })
    );
    // The daemon was told to hand each stream to its QP with the negotiated values.
    let rts: Vec<(QpId, u16, u16)> =
        std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(5)).ok())
            .filter_map(|c| match c {
                Command::QpRts { qp, params, .. } => Some((qp, params.ird, params.ord)),
                _ => None,
            })
            .take(2)
            .collect();
    assert!(
        rts.contains(&(qa, 4, 2)) && rts.contains(&(qb, 2, 4)),
        "{rts:?}"
    );

    // A second request is rejected with private data.
    let ca2 = a.id(&Request::Connect {
        qp: qa,
        remote,
        settings: ConnSettings::default(),
    });
    let Event::ConnectRequest(ConnectRequest { conn: cb2, .. }) = b.event() else {
        panic!("no second request")
    };
    assert_eq!(
        b.call(&Request::Reject {
            conn: cb2,
            private_data: b"busy".to_vec()
        }),
        Reply::Done
    );
    assert_eq!(
        a.event(),
        Event::Rejected {
            conn: ca2,
            private_data: b"busy".to_vec()
        }
    );

    // Graceful disconnect by A: B hears of it.
    assert_eq!(
        a.call(&Request::Disconnect {
            conn: ca,
            abort: false
        }),
        Reply::Done
    );
    match b.event() {
        Event::Disconnected { conn, reason } => {
            assert_eq!(conn, cb);
            assert!(reason.contains("Graceful"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    drop((a, b));
    stop_tx.send(()).unwrap();
    daemon.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
