//! What each TCP peer's segments say that smoltcp keeps to itself: the largest segment it
//! takes (the node bounds FPDUs by the smaller MSS), the window it advertises (an FPDU is
//! queued only when the window takes it whole: smoltcp would cut it at the window's edge,
//! which RFC 5044 section 8 forbids) and whether it reset the connection (smoltcp ends a
//! reset and a FIN exchange alike in Closed). Only connections the node adopts are tracked,
//! in a fixed ring of SYN slots, so a SYN flood costs nothing more. See docs/dataplane.md.

use rustc_hash::FxHashMap;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpOption, TcpPacket, TcpSeqNumber,
};

/// SYNs remembered until their connection is adopted; a later SYN takes the oldest slot.
const SYN_SLOTS: usize = 256;

/// The MSS of a peer whose SYN carries no MSS option (IPv4, RFC 9293 section 3.7.1).
const DEFAULT_MSS: u16 = 536;

/// A connection as its peer's segments name it: our port, the peer's address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey(u64);

impl FlowKey {
    pub fn new(local_port: u16, peer_ip: [u8; 4], peer_port: u16) -> FlowKey {
        FlowKey(
            u64::from(local_port) << 48
                | u64::from(peer_port) << 32
                | u64::from(u32::from_be_bytes(peer_ip)),
        )
    }
}

/// What the peer's SYN said (window scale, MSS), what it last said about its window, and
/// whether it reset the connection.
#[derive(Debug, Clone, Copy)]
struct Flow {
    /// The shift of the peer's window field (RFC 7323); zero without the option.
    scale: u8,
    /// The MSS option of the peer's SYN (RFC 9293 section 3.7.1: 536 without one).
    mss: u16,
    /// The acknowledgement number the window counts from; none yet after a bare SYN (the
    /// active opener's, whose acknowledgement field means nothing), so that the first ACK
    /// is taken whatever its number.
    ack: Option<TcpSeqNumber>,
    /// Octets the peer takes beyond `ack`.
    window: usize,
    /// The peer sent a RST.
    reset: bool,
}

#[derive(Default)]
pub struct PeerTcp {
    syns: Vec<(FlowKey, Flow)>,
    next_syn: usize,
    flows: FxHashMap<FlowKey, Flow>,
}

impl PeerTcp {
    /// Reads the window of a received frame (Ethernet, IPv4, TCP); anything else, or
    /// anything too short to hold what its headers claim, is ignored.
    pub fn observe(&mut self, frame: &[u8]) {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return;
        };
        if eth.ethertype() != EthernetProtocol::Ipv4 {
            return;
        }
        let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
            return;
        };
        if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
            return;
        }
        let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
            return;
        };
        let key = FlowKey::new(tcp.dst_port(), ip.src_addr().octets(), tcp.src_port());
        if tcp.syn() {
            self.syn(key, &tcp);
        } else if tcp.rst() {
            if let Some(flow) = self.flows.get_mut(&key) {
                flow.reset = true;
            }
        } else if tcp.ack() {
            if let Some(flow) = self.flows.get_mut(&key) {
                let ack = tcp.ack_number();
                // An older segment (reordered, retransmitted) does not take back a newer
                // window.
                if flow.ack.is_none_or(|last| ack >= last) {
                    flow.ack = Some(ack);
                    flow.window = usize::from(tcp.window_len()) << flow.scale;
                }
            }
        }
    }

    fn syn(&mut self, key: FlowKey, tcp: &TcpPacket<&[u8]>) {
        let (mut scale, mut mss) = (0, DEFAULT_MSS);
        let mut options = tcp.options();
        while !options.is_empty() {
            let Ok((rest, option)) = TcpOption::parse(options) else {
                break;
            };
            match option {
                TcpOption::EndOfList => break,
                // RFC 7323 section 2.3: a shift above 14 is taken as 14.
                TcpOption::WindowScale(s) => scale = s.min(14),
                TcpOption::MaxSegmentSize(m) => mss = m,
                _ => {}
            }
            options = rest;
        }
        // A SYN's own window is never scaled (RFC 7323 section 2.2).
        let flow = Flow {
            scale,
            mss,
            ack: tcp.ack().then(|| tcp.ack_number()),
            window: usize::from(tcp.window_len()),
            reset: false,
        };
        if let Some(slot) = self.syns.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = flow;
        } else if self.syns.len() < SYN_SLOTS {
            self.syns.push((key, flow));
        } else {
            self.syns[self.next_syn] = (key, flow);
            self.next_syn = (self.next_syn + 1) % SYN_SLOTS;
        }
    }

    /// Starts tracking an established connection, from the SYN (or SYN-ACK) its peer sent.
    /// False when that SYN is no longer remembered: its window stays unknown.
    pub fn adopt(&mut self, key: FlowKey) -> bool {
        let Some(i) = self.syns.iter().position(|(k, _)| *k == key) else {
            return false;
        };
        let (_, flow) = self.syns.swap_remove(i);
        if self.next_syn > self.syns.len() {
            self.next_syn = 0;
        }
        self.flows.insert(key, flow);
        true
    }

    /// The octets the peer last said it takes beyond what it acknowledged.
    pub fn window(&self, key: FlowKey) -> Option<usize> {
        self.flows.get(&key).map(|f| f.window)
    }

    /// The largest segment the peer takes, as its SYN said.
    pub fn mss(&self, key: FlowKey) -> Option<usize> {
        self.flows.get(&key).map(|f| usize::from(f.mss))
    }

    /// Whether the peer sent a RST on the connection.
    pub fn was_reset(&self, key: FlowKey) -> bool {
        self.flows.get(&key).is_some_and(|f| f.reset)
    }

    /// Stops tracking a connection whose socket is gone.
    pub fn forget(&mut self, key: FlowKey) {
        self.flows.remove(&key);
    }

    /// Connections tracked now.
    pub fn tracked(&self) -> usize {
        self.flows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetAddress, EthernetRepr, IpAddress, Ipv4Address, Ipv4Repr, TcpControl, TcpRepr,
    };

    const PEER: [u8; 4] = [10, 0, 0, 2];
    const US: [u8; 4] = [10, 0, 0, 1];

    /// A frame from the peer's port 5000 to our port 7174.
    fn segment(control: TcpControl, ack: Option<u32>, window: u16, scale: Option<u8>) -> Vec<u8> {
        segment_with_mss(control, ack, window, scale, None)
    }

    fn segment_with_mss(
        control: TcpControl,
        ack: Option<u32>,
        window: u16,
        scale: Option<u8>,
        mss: Option<u16>,
    ) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 5000,
            dst_port: 7174,
            control,
            seq_number: TcpSeqNumber(1000),
            ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: window,
            window_scale: scale,
            max_seg_size: mss,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        };
        let ip = Ipv4Repr {
            src_addr: Ipv4Address::from(PEER),
            dst_addr: Ipv4Address::from(US),
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            ethertype: EthernetProtocol::Ipv4,
        };
        let mut buf = vec![0; eth.buffer_len() + ip.buffer_len() + tcp.buffer_len()];
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.emit(&mut frame);
        let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
        let caps = ChecksumCapabilities::default();
        ip.emit(&mut packet, &caps);
        let mut seg = TcpPacket::new_unchecked(packet.payload_mut());
        tcp.emit(
            &mut seg,
            &IpAddress::Ipv4(Ipv4Address::from(PEER)),
            &IpAddress::Ipv4(Ipv4Address::from(US)),
            &caps,
        );
        buf
    }

    fn key() -> FlowKey {
        FlowKey::new(7174, PEER, 5000)
    }

    #[test]
    fn the_syns_scale_applies_to_later_windows_but_not_its_own() {
        let mut w = PeerTcp::default();
        w.observe(&segment(TcpControl::Syn, Some(1), 64240, Some(7)));
        assert!(w.adopt(key()));
        assert_eq!(w.window(key()), Some(64240));
        w.observe(&segment(TcpControl::None, Some(100), 502, None));
        assert_eq!(w.window(key()), Some(502 << 7));
    }

    #[test]
    fn without_the_option_the_window_is_unscaled() {
        let mut w = PeerTcp::default();
        w.observe(&segment(TcpControl::Syn, None, 8192, None));
        assert!(w.adopt(key()));
        w.observe(&segment(TcpControl::None, Some(10), 6000, None));
        assert_eq!(w.window(key()), Some(6000));
    }

    #[test]
    fn an_older_acknowledgement_does_not_take_back_a_newer_window() {
        let mut w = PeerTcp::default();
        w.observe(&segment(TcpControl::Syn, Some(1), 1000, Some(2)));
        w.adopt(key());
        w.observe(&segment(TcpControl::None, Some(5000), 100, None));
        w.observe(&segment(TcpControl::None, Some(4000), 900, None));
        assert_eq!(w.window(key()), Some(400));
    }

    #[test]
    fn after_a_bare_syn_the_first_acknowledgement_counts_whatever_its_number() {
        // The passive side sees the active opener's SYN, whose acknowledgement field is 0
        // and means nothing: the windows of the ACKs that follow count although their
        // numbers (our ISN onwards) lie in the half of the sequence space "before" 0.
        let mut w = PeerTcp::default();
        w.observe(&segment(TcpControl::Syn, None, 65535, Some(6)));
        assert!(w.adopt(key()));
        w.observe(&segment(TcpControl::None, Some(0x9000_0001), 731, None));
        assert_eq!(w.window(key()), Some(731 << 6));
        w.observe(&segment(TcpControl::None, Some(0x9000_1001), 65535, None));
        assert_eq!(w.window(key()), Some(65535 << 6), "later windows count too");
        w.observe(&segment(TcpControl::None, Some(0x9000_0001), 10, None));
        assert_eq!(w.window(key()), Some(65535 << 6), "an older one does not");
    }

    #[test]
    fn acknowledgements_compare_across_the_sequence_wrap() {
        let mut w = PeerTcp::default();
        w.observe(&segment(TcpControl::Syn, Some(u32::MAX - 4), 1000, Some(2)));
        w.adopt(key());
        // 5 comes after 2^32 - 5.
        w.observe(&segment(TcpControl::None, Some(5), 20, None));
        assert_eq!(w.window(key()), Some(80));
        w.observe(&segment(TcpControl::None, Some(u32::MAX - 1), 30, None));
        assert_eq!(w.window(key()), Some(80));
    }

    #[test]
    fn only_adopted_connections_are_tracked_and_a_syn_flood_costs_the_ring() {
        let mut w = PeerTcp::default();
        w.observe(&segment(TcpControl::None, Some(10), 6000, None));
        assert_eq!(w.window(key()), None, "no SYN seen, nothing adopted");
        w.observe(&segment(TcpControl::Syn, None, 8192, None));
        for port in 0..2 * SYN_SLOTS as u16 {
            let mut f = segment(TcpControl::Syn, None, 1, None);
            // Another peer port (and a checksum nobody here reads).
            f[34..36].copy_from_slice(&(10000 + port).to_be_bytes());
            w.observe(&f);
        }
        assert_eq!(w.syns.len(), SYN_SLOTS);
        assert!(!w.adopt(key()), "the oldest SYN gave its slot up");
        assert_eq!(w.tracked(), 0);
        // A fresh SYN is adopted, and forgotten with its socket.
        w.observe(&segment(TcpControl::Syn, None, 8192, None));
        assert!(w.adopt(key()));
        assert_eq!(w.tracked(), 1);
        w.forget(key());
        assert_eq!(w.window(key()), None);
    }

    #[test]
    fn the_syns_mss_is_remembered_and_536_stands_in_for_none() {
        let mut w = PeerTcp::default();
        w.observe(&segment_with_mss(
            TcpControl::Syn,
            Some(1),
            1000,
            Some(7),
            Some(1160),
        ));
        assert!(w.adopt(key()));
        assert_eq!(w.mss(key()), Some(1160));
        w.forget(key());
        w.observe(&segment(TcpControl::Syn, Some(1), 1000, None));
        assert!(w.adopt(key()));
        assert_eq!(w.mss(key()), Some(536));
    }

    #[test]
    fn a_reset_is_remembered_for_the_connection() {
        let mut w = PeerTcp::default();
        w.observe(&segment(TcpControl::Syn, Some(1), 1000, None));
        w.adopt(key());
        w.observe(&segment(TcpControl::None, Some(10), 900, None));
        assert!(!w.was_reset(key()));
        w.observe(&segment(TcpControl::Rst, Some(10), 0, None));
        assert!(w.was_reset(key()));
        assert_eq!(w.window(key()), Some(900), "a RST's window is not one");
    }

    #[test]
    fn frames_that_are_not_whole_tcp_segments_are_ignored() {
        let mut w = PeerTcp::default();
        let syn = segment(TcpControl::Syn, None, 8192, Some(3));
        for len in 0..syn.len() {
            w.observe(&syn[..len]);
        }
        assert!(!w.adopt(key()), "no truncated SYN was taken");
        let mut arp = syn.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        w.observe(&arp);
        assert!(!w.adopt(key()));
    }
}
