//! The software side of TCP checksum offload (a device that computes the checksum of the TCP
//! segments it sends and checks those it receives, as most NICs do): the pseudo-header sum
//! such a device expects in the checksum field of a segment to send, and the check of a
//! received segment the device left unchecked.

#[cfg(any(feature = "dpdk", test))]
use smoltcp::wire::Ipv4Address;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpAddress, IpProtocol, Ipv4Packet, TcpPacket,
    ETHERNET_HEADER_LEN,
};

/// The Internet checksum's ones' complement sum of `data` as 16-bit big-endian words (RFC
/// 1071; an odd last octet padded with zero), folded to 16 bits and not complemented.
#[cfg(any(feature = "dpdk", test))]
fn ones_complement_sum(data: &[u8]) -> u16 {
    let mut acc: u64 = data
        .chunks(2)
        .map(|w| u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The sum of a TCP segment's IPv4 pseudo-header: source, destination, zero, protocol, TCP
/// length (RFC 9293 section 3.1).
#[cfg(any(feature = "dpdk", test))]
fn pseudo_header_sum(src: Ipv4Address, dst: Ipv4Address, tcp_len: u16) -> u16 {
    let mut header = [0u8; 12];
    header[..4].copy_from_slice(&src.octets());
    header[4..8].copy_from_slice(&dst.octets());
    header[9] = u8::from(IpProtocol::Tcp);
    header[10..].copy_from_slice(&tcp_len.to_be_bytes());
    ones_complement_sum(&header)
}

/// The IPv4 packet of an Ethernet frame carrying a whole TCP segment over IPv4 (no fragment),
/// with its header length; None for anything else.
fn ipv4_tcp(frame: &[u8]) -> Option<(Ipv4Packet<&[u8]>, usize)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(&frame[ETHERNET_HEADER_LEN..]).ok()?;
    if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
        return None;
    }
    let header = usize::from(ip.header_len());
    Some((ip, header))
}

/// Readies a frame to send for a device that fills in TCP checksums: writes into the TCP
/// checksum field the sum of the IPv4 pseudo-header (source, destination, protocol, TCP
/// length; RFC 9293 section 3.1), folded and not complemented, which such a device adds the
/// segment to. Returns the IPv4 header length (the device's `l3_len`), or None for a frame
/// that carries no TCP segment (left untouched: nothing for the device to do).
#[cfg(any(feature = "dpdk", test))]
pub fn prepare_for_offload(frame: &mut [u8]) -> Option<usize> {
    let (src, dst, header, tcp_len) = {
        let (ip, header) = ipv4_tcp(frame)?;
        let tcp_len = usize::from(ip.total_len()).checked_sub(header)?;
        (ip.src_addr(), ip.dst_addr(), header, tcp_len)
    };
    let start = ETHERNET_HEADER_LEN + header;
    let mut tcp = TcpPacket::new_checked(&mut frame[start..start + tcp_len]).ok()?;
    tcp.set_checksum(pseudo_header_sum(src, dst, tcp_len as u16));
    Some(header)
}

/// Whether a received frame's TCP checksum is right; true for a frame that carries no whole
/// TCP segment over IPv4 (nothing to check here; smoltcp checks the IPv4 header itself and
/// drops what it cannot take).
pub fn tcp_checksum_ok(frame: &[u8]) -> bool {
    let Some((ip, header)) = ipv4_tcp(frame) else {
        return true;
    };
    let Some(tcp_len) = usize::from(ip.total_len()).checked_sub(header) else {
        return false;
    };
    let start = ETHERNET_HEADER_LEN + header;
    match TcpPacket::new_checked(&frame[start..start + tcp_len]) {
        Ok(tcp) => tcp.verify_checksum(
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr()),
        ),
        Err(_) => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet frame with an IPv4 TCP segment carrying `payload`, its checksum filled in
    /// by smoltcp (with `ihl` 32-bit words of IPv4 header: options shift the TCP header).
    pub(crate) fn segment(payload: &[u8], ihl: u8) -> Vec<u8> {
        let ip_header = usize::from(ihl) * 4;
        let tcp_len = 20 + payload.len();
        let mut f = vec![0u8; ETHERNET_HEADER_LEN + ip_header + tcp_len];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let total = (ip_header + tcp_len) as u16;
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]);
            ip.set_version(4);
            ip.set_header_len((ip_header) as u8);
            ip.set_total_len(total);
            ip.set_hop_limit(64);
            ip.set_next_header(IpProtocol::Tcp);
            ip.set_src_addr(Ipv4Address::new(10, 0, 0, 1));
            ip.set_dst_addr(Ipv4Address::new(10, 0, 0, 2));
            ip.fill_checksum();
        }
        let start = ETHERNET_HEADER_LEN + ip_header;
        let mut tcp = TcpPacket::new_unchecked(&mut f[start..]);
        tcp.set_src_port(49152);
        tcp.set_dst_port(4791);
        tcp.set_seq_number(smoltcp::wire::TcpSeqNumber(0x1234_5678));
        tcp.set_header_len(20);
        tcp.set_window_len(65535);
        tcp.payload_mut().copy_from_slice(payload);
        tcp.fill_checksum(&IpAddress::v4(10, 0, 0, 1), &IpAddress::v4(10, 0, 0, 2));
        f
    }

    /// What a device does with a segment marked for TCP checksum offload: the ones'
    /// complement sum of the segment as it is (the field holding the pseudo-header sum),
    /// complemented, into the field.
    fn device_fills(frame: &mut [u8], l3_len: usize) {
        let start = ETHERNET_HEADER_LEN + l3_len;
        let sum = !ones_complement_sum(&frame[start..]);
        frame[start + 16..start + 18].copy_from_slice(&sum.to_be_bytes());
    }

    #[test]
    fn the_device_completes_the_pseudo_header_sum_into_the_checksum() {
        for (payload, ihl) in [
            (&b"MPA FPDU"[..], 5),
            (&b"odd"[..], 5),
            (&[0xffu8; 1460][..], 6),
        ] {
            let right = segment(payload, ihl);
            let mut f = right.clone();
            f[ETHERNET_HEADER_LEN + usize::from(ihl) * 4 + 16..][..2].copy_from_slice(&[0, 0]);
            let l3 = prepare_for_offload(&mut f).expect("a TCP segment");
            assert_eq!(l3, usize::from(ihl) * 4);
            assert_ne!(
                f, right,
                "the field holds the pseudo-header sum, not the checksum"
            );
            device_fills(&mut f, l3);
            assert_eq!(f, right, "{ihl} {}", payload.len());
        }
    }

    /// Wire input of any shape gets an answer, never a panic: every truncation of a segment
    /// (its headers then claim more than is there), and every single-octet change, of which
    /// only those in the Ethernet header or the IPv4 header (making it something else or
    /// malformed) can leave the TCP checksum right.
    #[test]
    fn any_frame_is_answered_and_a_changed_segment_fails() {
        let good = segment(b"0123456789abcdef", 6);
        for len in 0..good.len() {
            let _ = tcp_checksum_ok(&good[..len]);
            let mut f = good[..len].to_vec();
            let _ = prepare_for_offload(&mut f);
        }
        let tcp_start = ETHERNET_HEADER_LEN + 24;
        for i in 0..good.len() {
            let mut f = good.clone();
            f[i] ^= 0x5a;
            let ok = tcp_checksum_ok(&f);
            if i >= tcp_start {
                assert!(!ok, "octet {i} changed");
            }
            let _ = prepare_for_offload(&mut f);
        }
    }

    #[test]
    fn a_received_segment_is_checked_and_other_frames_pass() {
        let mut f = segment(b"RDMA Write", 5);
        assert!(tcp_checksum_ok(&f));
        let last = f.len() - 1;
        f[last] ^= 1;
        assert!(!tcp_checksum_ok(&f));
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(tcp_checksum_ok(&arp));
        assert_eq!(prepare_for_offload(&mut arp), None);
        assert!(
            tcp_checksum_ok(&[0u8; 3]),
            "too short to be anything: smoltcp drops it"
        );
        let mut udp = segment(b"x", 5);
        udp[ETHERNET_HEADER_LEN + 9] = 17;
        assert_eq!(prepare_for_offload(&mut udp), None);
    }
}
