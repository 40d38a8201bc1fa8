//! Frames from the wire into a live node: two iwarpd nodes (smoltcp TCP and the engine) in
//! RTS over an in-memory link, and the input turned into frames that reach node A among B's.
//! Raw frames exercise everything that parses a frame before TCP (the device layer's TCP
//! checksum check, the peer tracking, ARP pacing, smoltcp); frames patched from a real
//! segment of the connection, with the next sequence number and their checksums made right,
//! get through TCP, so their payload reaches MPA, DDP and RDMAP (CRC off, so garbage is
//! parsed rather than refused by the CRC). No panic, whatever comes; and the node keeps
//! polling after it.
#![no_main]
use iwarp_engine::{Access, QpCaps, Rnic, SendOp, SendWr, Sge};
use iwarp_wire::mpa::negotiation::Settings;
use iwarpd::node::{ConnState, Node, TcpSettings};
use iwarpd::port::memory::MemoryPort;
use iwarpd::port::Port;
use libfuzzer_sys::fuzz_target;
use smoltcp::wire::{EthernetFrame, IpAddress, Ipv4Packet, TcpPacket, TcpSeqNumber};
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 10);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 11);

/// What the harness shares with A's port: frames to inject, and the last segment from B
/// that carried data (the template for patched frames).
#[derive(Default)]
struct Wire {
    inject: VecDeque<Vec<u8>>,
    last_data: Option<Vec<u8>>,
}

/// A's port: the memory link, with injected frames received first.
struct Injecting {
    inner: MemoryPort,
    wire: Arc<Mutex<Wire>>,
}

/// The TCP payload length of an IPv4 TCP frame, if it is one.
fn tcp_payload_len(frame: &[u8]) -> Option<usize> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    Some(tcp.payload().len())
}

impl Port for Injecting {
    type Frame = Vec<u8>;
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn rx_burst<F: FnMut(Vec<u8>)>(&mut self, max: usize, mut f: F) -> std::io::Result<usize> {
        let mut n = 0;
        let mut wire = self.wire.lock().unwrap();
        while n < max {
            let Some(frame) = wire.inject.pop_front() else {
                break;
            };
            f(frame);
            n += 1;
        }
        n += self.inner.rx_burst(max - n, |frame| {
            if tcp_payload_len(&frame).is_some_and(|len| len > 0) {
                wire.last_data = Some(frame.clone());
            }
            f(frame)
        })?;
        Ok(n)
    }
    fn tx(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.inner.tx(frame)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A node and its engine with a QP and 4 KiB of memory registered for everything, which
/// must outlive them.
fn end<P: Port>(port: P, ip: Ipv4Addr, mem: &mut [u64]) -> (Node<P>, Rnic, iwarp_engine::QpId, Sge) {
    let node = Node::new(port, ip, 24, TcpSettings::default());
    let mut rnic = Rnic::new();
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(256);
    let caps = QpCaps {
        sq_depth: 64,
        rq_depth: 64,
        srq: None,
    };
    let qp = rnic.create_qp(pd, cq, cq, caps).unwrap();
    let len = mem.len() * 8;
    let ptr = NonNull::new(mem.as_mut_ptr() as *mut u8).unwrap();
    // SAFETY: the caller keeps `mem` until the node is gone.
    let stag = unsafe { rnic.register_mr(pd, ptr, len, Access::ALL, ptr.as_ptr() as u64) }
        .expect("valid rights");
    let sge = Sge {
        stag,
        to: ptr.as_ptr() as u64,
        len: len as u32,
    };
    (node, rnic, qp, sge)
}

/// `template` with `patches` (offset, octet) applied to its TCP payload, the sequence number
/// `seq`, and right IPv4 and TCP checksums; None if the template is not a TCP frame.
fn patched(template: &[u8], seq: u32, patches: &[(u16, u8)]) -> Option<Vec<u8>> {
    let mut f = template.to_vec();
    let ip_start = 14;
    let (ihl, src, dst) = {
        let ip = Ipv4Packet::new_checked(&f[ip_start..]).ok()?;
        (usize::from(ip.header_len()), ip.src_addr(), ip.dst_addr())
    };
    let mut tcp = TcpPacket::new_checked(&mut f[ip_start + ihl..]).ok()?;
    let payload = tcp.payload_mut();
    if payload.is_empty() {
        return None;
    }
    for &(at, octet) in patches {
        let i = usize::from(at) % payload.len();
        payload[i] = octet;
    }
    tcp.set_seq_number(TcpSeqNumber(seq as i32));
    tcp.fill_checksum(&IpAddress::Ipv4(src), &IpAddress::Ipv4(dst));
    Some(f)
}

fuzz_target!(|data: &[u8]| {
    let (pa, pb) = MemoryPort::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
    let wire = Arc::new(Mutex::new(Wire::default()));
    let pa = Injecting {
        inner: pa,
        wire: Arc::clone(&wire),
    };
    let (mut a_buf, mut b_buf) = (vec![0u64; 512], vec![0u64; 512]);
    let (mut a, mut ar, a_qp, a_mem) = end(pa, A_IP, &mut a_buf);
    let (mut b, mut br, b_qp, b_mem) = end(pb, B_IP, &mut b_buf);
    let settings = Settings {
        crc: false,
        ..Settings::default()
    };
    let a_conn = a.listen(7174, a_qp, settings.clone()).unwrap();
    let b_conn = b.connect(A_IP, 7174, 40000, b_qp, settings).unwrap();
    for _ in 0..1000 {
        if a.state(a_conn) == Some(&ConnState::Rts) && b.state(b_conn) == Some(&ConnState::Rts) {
            break;
        }
        a.poll(&mut ar);
        b.poll(&mut br);
    }
    assert_eq!(a.state(a_conn), Some(&ConnState::Rts), "setup");
    // A real segment of the connection, for the template.
    let op = SendOp::Write {
        remote_stag: a_mem.stag,
        remote_to: a_mem.to,
    };
    let src = Sge { len: 64, ..b_mem };
    br.post_send(b_qp, SendWr::new(1, op, &[src])).unwrap();
    for _ in 0..100 {
        a.poll(&mut ar);
        b.poll(&mut br);
    }
    let Some(template) = wire.lock().unwrap().last_data.clone() else {
        panic!("no data segment from B");
    };
    let mut next_seq = {
        let ip = Ipv4Packet::new_checked(&template[14..]).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        (tcp.seq_number() + tcp.payload().len()).0 as u32
    };

    // The input: a list of operations.
    let mut rest = data;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op % 3 {
            // A raw frame of up to 1514 octets.
            0 => {
                let len = rest
                    .first()
                    .map_or(0, |&n| usize::from(n) * 6)
                    .min(rest.len());
                let frame = rest.get(1..len.max(1)).unwrap_or_default().to_vec();
                rest = &rest[len.min(rest.len())..];
                wire.lock().unwrap().inject.push_back(frame);
            }
            // The template with patches, in sequence.
            1 => {
                let count = usize::from(rest.first().copied().unwrap_or(0) % 16);
                rest = rest.get(1..).unwrap_or_default();
                let mut patches = Vec::new();
                for chunk in rest.chunks_exact(3).take(count) {
                    patches.push((u16::from_le_bytes([chunk[0], chunk[1]]), chunk[2]));
                }
                rest = &rest[(patches.len() * 3).min(rest.len())..];
                if let Some(f) = patched(&template, next_seq, &patches) {
                    next_seq = next_seq.wrapping_add(tcp_payload_len(&f).unwrap_or(0) as u32);
                    wire.lock().unwrap().inject.push_back(f);
                }
            }
            // A few turns of both nodes.
            _ => {
                for _ in 0..4 {
                    a.poll(&mut ar);
                    b.poll(&mut br);
                }
            }
        }
    }
    for _ in 0..16 {
        a.poll(&mut ar);
        b.poll(&mut br);
    }
    let _ = a.counters();
    // The nodes go before the memory registered with them.
    drop((a, ar, b, br));
    drop((a_buf, b_buf));
});
