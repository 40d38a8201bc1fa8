//! A peer's first octets and its FIN may follow the last ACK of its handshake at once (a
//! client that connects, writes one line and exits does exactly that), and a node may take
//! all three in one turn: its socket is then past Established (in CLOSE-WAIT) when the node
//! first looks at it. The connection's setup must still read what the peer sent.
//!
//! The peer here is hand-made frames on an in-memory link, so that the three segments are
//! queued before the node's turn, every time.

mod common;

use common::End;
use iwarp_wire::mpa::negotiation::{self, Settings};
use iwarpd::node::ConnState;
use iwarpd::port::memory::MemoryPort;
use iwarpd::port::Port;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, IpAddress, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket,
    TcpRepr, TcpSeqNumber,
};
use std::net::Ipv4Addr;

const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 81, 0, 1);
const PEER_IP: Ipv4Address = Ipv4Address::new(10, 81, 0, 2);
const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 81, 2]);
const LISTEN: u16 = 7181;
const PEER_PORT: u16 = 40181;
/// Turns enough for anything the node answers at once; no clock is involved.
const TURNS: usize = 200;

/// The far end of the link, speaking in hand-built frames.
struct RawPeer {
    port: MemoryPort,
    node_mac: EthernetAddress,
}

impl RawPeer {
    fn send_tcp(&mut self, repr: &TcpRepr) {
        let ip = Ipv4Repr {
            src_addr: PEER_IP,
            dst_addr: to_smol(NODE_IP),
            next_header: IpProtocol::Tcp,
            payload_len: repr.buffer_len(),
            hop_limit: 64,
        };
        let eth = EthernetRepr {
            src_addr: PEER_MAC,
            dst_addr: self.node_mac,
            ethertype: EthernetProtocol::Ipv4,
        };
        let mut f = vec![0u8; eth.buffer_len() + ip.buffer_len() + repr.buffer_len()];
        let caps = ChecksumCapabilities::default();
        eth.emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
        let (ip_buf, tcp_buf) = f[eth.buffer_len()..].split_at_mut(ip.buffer_len());
        ip.emit(&mut Ipv4Packet::new_unchecked(ip_buf), &caps);
        repr.emit(
            &mut TcpPacket::new_unchecked(tcp_buf),
            &IpAddress::Ipv4(PEER_IP),
            &IpAddress::Ipv4(to_smol(NODE_IP)),
            &caps,
        );
        self.port.tx(&f).unwrap();
    }

    /// What the node sent: ARP requests for the peer are answered, TCP segments to the peer
    /// returned as (flags, sequence number, payload).
    fn take(&mut self) -> Vec<(TcpControl, bool, TcpSeqNumber, Vec<u8>)> {
        let mut frames = Vec::new();
        self.port.rx_burst(64, |f| frames.push(f)).unwrap();
        let mut segments = Vec::new();
        for f in frames {
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            match eth.ethertype() {
                EthernetProtocol::Arp => {
                    let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap());
                    if let Ok(ArpRepr::EthernetIpv4 {
                        operation: ArpOperation::Request,
                        source_hardware_addr,
                        source_protocol_addr,
                        target_protocol_addr,
                        ..
                    }) = arp
                    {
                        assert_eq!(target_protocol_addr, PEER_IP);
                        self.send_arp_reply(source_hardware_addr, source_protocol_addr);
                    }
                }
                EthernetProtocol::Ipv4 => {
                    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
                    let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
                    let control = if tcp.syn() {
                        TcpControl::Syn
                    } else if tcp.fin() {
                        TcpControl::Fin
                    } else if tcp.rst() {
                        TcpControl::Rst
                    } else {
                        TcpControl::None
                    };
                    segments.push((control, tcp.ack(), tcp.seq_number(), tcp.payload().to_vec()));
                }
                _ => {}
            }
        }
        segments
    }

    fn send_arp_reply(&mut self, to_mac: EthernetAddress, to_ip: Ipv4Address) {
        let arp = ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Reply,
            source_hardware_addr: PEER_MAC,
            source_protocol_addr: PEER_IP,
            target_hardware_addr: to_mac,
            target_protocol_addr: to_ip,
        };
        let eth = EthernetRepr {
            src_addr: PEER_MAC,
            dst_addr: to_mac,
            ethertype: EthernetProtocol::Arp,
        };
        let mut f = vec![0u8; eth.buffer_len() + arp.buffer_len()];
        eth.emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
        arp.emit(&mut ArpPacket::new_unchecked(&mut f[eth.buffer_len()..]));
        self.port.tx(&f).unwrap();
    }
}

fn to_smol(a: Ipv4Addr) -> Ipv4Address {
    Ipv4Address::from(a.octets())
}

fn segment(
    control: TcpControl,
    seq: u32,
    ack: Option<TcpSeqNumber>,
    payload: &[u8],
) -> TcpRepr<'_> {
    TcpRepr {
        src_port: PEER_PORT,
        dst_port: LISTEN,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack,
        window_len: 65535,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    }
}

/// The node listens; the peer's SYN is answered; then the handshake's ACK, `first` and a FIN
/// arrive together. Returns the node's end and its listening connection.
fn handshake_then(first: &[u8]) -> (End<MemoryPort>, usize, RawPeer) {
    let (ours, theirs) = MemoryPort::pair([2, 0, 0, 0, 81, 1], PEER_MAC.0, 1500);
    let node_mac = EthernetAddress(ours.mac());
    let mut end = End::new(ours, NODE_IP);
    let conn = end
        .node
        .listen(LISTEN, end.qp, Settings::default())
        .unwrap();
    let mut peer = RawPeer {
        port: theirs,
        node_mac,
    };
    let isn = 1000u32;
    peer.send_tcp(&segment(TcpControl::Syn, isn, None, &[]));
    let mut syn_ack = None;
    for _ in 0..TURNS {
        end.node.poll(&mut end.rnic);
        if let Some(s) = peer
            .take()
            .into_iter()
            .find(|s| s.0 == TcpControl::Syn && s.1)
        {
            syn_ack = Some(s.2);
            break;
        }
    }
    let their_isn = syn_ack.expect("the node answered the SYN");
    let ack = Some(their_isn + 1);
    let mut seq = isn + 1;
    // All three queued before the node's next turn.
    peer.send_tcp(&segment(TcpControl::None, seq, ack, &[]));
    peer.send_tcp(&segment(TcpControl::Psh, seq, ack, first));
    seq += first.len() as u32;
    peer.send_tcp(&segment(TcpControl::Fin, seq, ack, &[]));
    (end, conn, peer)
}

#[test]
fn bytes_and_fin_right_behind_the_handshake_fail_the_setup_on_the_bytes() {
    let (mut end, conn, mut peer) = handshake_then(b"GET / HTTP/1.1, not an MPA Request\n");
    for _ in 0..TURNS {
        end.node.poll(&mut end.rnic);
        let _ = peer.take();
        if matches!(end.node.state(conn), Some(ConnState::Failed(_))) {
            break;
        }
    }
    assert!(
        matches!(end.node.state(conn), Some(ConnState::Failed(why)) if why.contains("MPA")),
        "{:?}",
        end.node.state(conn)
    );
}

#[test]
fn an_mpa_request_and_fin_right_behind_the_handshake_are_answered() {
    let request = negotiation::request(&Settings::default()).unwrap();
    let (mut end, conn, mut peer) = handshake_then(&request);
    let mut reply = Vec::new();
    for _ in 0..TURNS {
        end.node.poll(&mut end.rnic);
        for (_, _, _, payload) in peer.take() {
            reply.extend_from_slice(&payload);
        }
        if !reply.is_empty() {
            break;
        }
    }
    assert!(
        negotiation::parse_reply(&reply, &Settings::default()).is_ok(),
        "the node's answer to the request: {reply:?}, the connection {:?}",
        end.node.state(conn)
    );
}
