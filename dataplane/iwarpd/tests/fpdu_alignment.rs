//! FPDU alignment while the port pushes back (RFC 5044 section 8): short FPDUs go several to
//! a segment, and a group the port did not take yet must go as its own segment before
//! another FPDU is queued behind it, so that every first transmission is whole FPDUs.

mod common;

use common::{End, A_IP, B_IP};
use iwarp_engine::{Access, QpCaps, QpId, SendOp, SendWr, Status};
use iwarpd::port::unix::{UnixPort, PAUSE_AT};
use iwarpd::port::Port;
use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

const STREAMS: usize = 16;
const WRITES: usize = 1000;
const DEPTH: usize = 64;
const SLOWER: usize = 20;

/// A Unix port that reads every TCP segment it sends: a first transmission (one that
/// reaches past what its flow sent before) of an MPA stream must hold whole FPDUs only.
struct Aligned {
    inner: UnixPort,
    /// Per flow (source port, destination port): the highest sequence number sent.
    sent_to: HashMap<(u16, u16), u32>,
    checked: u64,
    grouped: u64,
    cut: Vec<String>,
}

impl Aligned {
    fn look(&mut self, frame: &[u8]) {
        if frame.len() < 14 + 20 || frame[12..14] != [0x08, 0x00] || frame[14 + 9] != 6 {
            return;
        }
        let ip = &frame[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let tcp = &ip[ihl..total];
        let ports = (
            u16::from_be_bytes([tcp[0], tcp[1]]),
            u16::from_be_bytes([tcp[2], tcp[3]]),
        );
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        let payload = &tcp[usize::from(tcp[12] >> 4) * 4..];
        if payload.is_empty() {
            return;
        }
        let end = seq.wrapping_add(payload.len() as u32);
        let first = match self.sent_to.get(&ports) {
            Some(&high) => (end.wrapping_sub(high) as i32) > 0,
            None => true,
        };
        if first {
            self.sent_to.insert(ports, end);
        }
        // The MPA Request and Reply frames are not FPDUs; a resend may be cut anywhere.
        if !first || payload.starts_with(b"MPA ID ") {
            return;
        }
        self.checked += 1;
        let (mut at, mut fpdus) = (0, 0);
        while at + 2 <= payload.len() {
            let ulpdu = usize::from(u16::from_be_bytes([payload[at], payload[at + 1]]));
            // Length field, ULPDU, pad to four octets, CRC.
            at += (2 + ulpdu).next_multiple_of(4) + 4;
            fpdus += 1;
        }
        if at != payload.len() {
            self.cut.push(format!(
                "{ports:?} seq {seq}: {} octets, FPDUs end at {at}",
                payload.len()
            ));
        }
        if fpdus > 1 {
            self.grouped += 1;
        }
    }
}

impl Port for Aligned {
    type Frame = <UnixPort as Port>::Frame;
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn rx_burst<F: FnMut(Self::Frame)>(&mut self, max: usize, f: F) -> io::Result<usize> {
        self.inner.rx_burst(max, f)
    }
    fn recycle(&mut self, frame: Self::Frame) {
        self.inner.recycle(frame)
    }
    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        self.look(frame);
        self.inner.tx(frame)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
    fn tx_ready(&self) -> bool {
        self.inner.tx_ready()
    }
    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }
}

#[test]
fn short_fpdus_stay_whole_in_their_segments_while_the_port_pushes_back() {
    let dir = common::segment_dir("iwarp-alignment");
    let pa = UnixPort::open(dir.path(), [2, 0, 0, 0, 0x25, 1], 1500).unwrap();
    let pb = UnixPort::open(dir.path(), [2, 0, 0, 0, 0x25, 2], 1500).unwrap();
    let pb = Aligned {
        inner: pb,
        sent_to: HashMap::new(),
        checked: 0,
        grouped: 0,
        cut: Vec::new(),
    };
    // Resends are left out of the check; a long floor keeps them rare on a loaded machine.
    let tcp = common::patient_tcp();
    let mut a = End::with_tcp(pa, A_IP, tcp);
    let mut b = End::with_tcp(pb, B_IP, tcp);
    let caps = QpCaps {
        sq_depth: DEPTH,
        rq_depth: 4,
        srq: None,
    };
    let conns = common::connect_many(&mut a, &mut b, STREAMS, caps, 7400, 43000);
    let deadline = Instant::now() + Duration::from_secs(240);

    let a_mem = a.mem(1 << 12, Access::ALL);
    let b_mem = b.mem(1 << 12, Access::ALL);
    b_mem.fill(9);
    let qp_index = |qp: QpId| conns.iter().position(|c| c.2 == qp).unwrap();
    let mut posted = [0usize; STREAMS];
    let mut done = [0usize; STREAMS];
    // Writes of 40 to 739 octets: several fit a segment, and groups end anywhere in one.
    let post = |b: &mut End<Aligned>, i: usize, posted: &mut [usize; STREAMS]| {
        let len = 40 + (posted[i] * 97 + i * 31) % 700;
        let op = SendOp::Write {
            remote_stag: a_mem.stag,
            remote_to: a_mem.sge(0, 0).to,
        };
        b.rnic
            .post_send(conns[i].2, SendWr::new(i as u64, op, &[b_mem.sge(0, len)]))
            .unwrap();
        posted[i] += 1;
    };
    for i in 0..STREAMS {
        for _ in 0..DEPTH {
            post(&mut b, i, &mut posted);
        }
    }
    let (mut turn, mut paused) = (0usize, 0u64);
    while done.iter().any(|&d| d < WRITES) {
        assert!(Instant::now() < deadline, "streaming: {done:?}");
        b.node.poll(&mut b.rnic);
        if b.node.port().inner.held() >= PAUSE_AT {
            paused += 1;
        }
        turn += 1;
        if turn.is_multiple_of(SLOWER) {
            a.node.poll(&mut a.rnic);
        }
        for w in b.wcs() {
            assert_eq!(w.status, Status::Success);
            let i = qp_index(w.qp);
            done[i] += 1;
            if posted[i] < WRITES {
                post(&mut b, i, &mut posted);
            }
        }
    }
    let port = b.node.port();
    println!(
        "{} first transmissions checked, {} with several FPDUs, {paused} turns with the port \
         paused, {} cut",
        port.checked,
        port.grouped,
        port.cut.len()
    );
    assert!(
        paused > 0,
        "the port never pushed back: the test shows nothing"
    );
    assert!(port.grouped > 0, "no segment held several FPDUs");
    assert!(
        port.cut.is_empty(),
        "first transmissions cutting an FPDU: {:?}",
        &port.cut[..port.cut.len().min(5)]
    );
}
