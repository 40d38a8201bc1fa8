//! Keeps smoltcp's neighbour (ARP) entries alive for their real-time lifetime.
//!
//! smoltcp keeps a neighbour's MAC for 60 s of its time after the neighbour's last ARP packet
//! (or unicast IPv4 frame from that MAC), which the dilated clock (`clock.rs`) makes 60 ms
//! of real time. Past that, the next frame to an idle peer waits for an ARP exchange, and
//! one sent in the meantime is dropped (a reset after an idle spell, a keep-alive). The
//! keeper notes each neighbour's MAC as its frames arrive, as smoltcp does (learned from ARP
//! aimed at us, refreshed by IPv4 from the same MAC), and while the neighbour was heard within
//! [`LIFETIME`] of real time hands smoltcp, every [`REFRESH`], an ARP reply from it to us as if
//! it had just answered. The entry then lives as long as it would without the dilation. The
//! replies are made here and never reach the wire (nor a capture).

use crate::arp::{ipv4_arp, Arp};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Ipv4Address, Ipv4Packet,
};

/// How long a neighbour heard from stays known, in real time: smoltcp's own entry lifetime,
/// undilated.
pub const LIFETIME: std::time::Duration = std::time::Duration::from_secs(60);
/// How often the entries are renewed, in real time: a third of their dilated lifetime.
pub const REFRESH: std::time::Duration = std::time::Duration::from_millis(20);

/// Neighbours kept at most, as many as smoltcp's own cache holds (its default,
/// `IFACE_NEIGHBOR_CACHE_COUNT`): renewing more would have them evict each other there. The
/// one heard from longest ago makes room.
const NEIGHBOURS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Neighbour {
    ip: [u8; 4],
    mac: [u8; 6],
    heard: Instant,
}

/// See the module's doc. Times are smoltcp's (dilated).
#[derive(Debug)]
pub struct NeighbourKeeper {
    mac: [u8; 6],
    ip: [u8; 4],
    lifetime: Duration,
    refresh: Duration,
    last_refresh: Option<Instant>,
    known: Vec<Neighbour>,
}

impl NeighbourKeeper {
    /// For the interface with `mac` and `ip`; `lifetime` and `refresh` in smoltcp's time.
    pub fn new(mac: [u8; 6], ip: [u8; 4], lifetime: Duration, refresh: Duration) -> Self {
        NeighbourKeeper {
            mac,
            ip,
            lifetime,
            refresh,
            last_refresh: None,
            known: Vec::with_capacity(NEIGHBOURS),
        }
    }

    /// A received frame: an ARP packet aimed at us teaches its sender's MAC; an IPv4 frame to
    /// us from a known neighbour's MAC says it is still there.
    pub fn heard(&mut self, frame: &[u8], now: Instant) {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return;
        };
        match eth.ethertype() {
            EthernetProtocol::Arp => {
                let Some((ip, mac)) = ipv4_arp(frame).and_then(|a| sender_to(&a, self.ip)) else {
                    return;
                };
                if let Some(n) = self.known.iter_mut().find(|n| n.ip == ip) {
                    n.mac = mac;
                    n.heard = now;
                } else {
                    if self.known.len() == NEIGHBOURS {
                        let oldest = (0..self.known.len())
                            .min_by_key(|&i| self.known[i].heard)
                            .unwrap_or(0);
                        self.known.swap_remove(oldest);
                    }
                    self.known.push(Neighbour {
                        ip,
                        mac,
                        heard: now,
                    });
                }
            }
            EthernetProtocol::Ipv4 => {
                let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
                    return;
                };
                if ip.dst_addr().octets() != self.ip {
                    return;
                }
                let (src, mac) = (ip.src_addr().octets(), eth.src_addr().0);
                if let Some(n) = self.known.iter_mut().find(|n| n.ip == src && n.mac == mac) {
                    n.heard = now;
                }
            }
            _ => {}
        }
    }

    /// Once every refresh interval: an ARP reply, to hand smoltcp, from each neighbour heard
    /// within the lifetime; those heard earlier are forgotten (smoltcp's entry for them then
    /// expires on its own).
    pub fn refresh(&mut self, now: Instant, mut hand: impl FnMut(Vec<u8>)) {
        if self
            .last_refresh
            .is_some_and(|last| now < last + self.refresh)
        {
            return;
        }
        self.last_refresh = Some(now);
        let lifetime = self.lifetime;
        self.known.retain(|n| now < n.heard + lifetime);
        for n in &self.known {
            hand(reply_from(n, self.mac, self.ip));
        }
    }
}

/// The sender of an ARP request or reply whose target is `us`, if smoltcp would learn it.
fn sender_to(arp: &Arp, us: [u8; 4]) -> Option<([u8; 4], [u8; 6])> {
    let known_op = matches!(arp.op, ArpOperation::Request | ArpOperation::Reply);
    let unicast = arp.sender_mac.is_unicast() && !arp.sender.is_broadcast();
    (known_op && unicast && arp.target.octets() == us)
        .then(|| (arp.sender.octets(), arp.sender_mac.0))
}

/// An ARP reply from neighbour `n` to us (`mac`, `ip`), in an Ethernet frame.
fn reply_from(n: &Neighbour, mac: [u8; 6], ip: [u8; 4]) -> Vec<u8> {
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Reply,
        source_hardware_addr: EthernetAddress(n.mac),
        source_protocol_addr: Ipv4Address::from(n.ip),
        target_hardware_addr: EthernetAddress(mac),
        target_protocol_addr: Ipv4Address::from(ip),
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress(n.mac),
        dst_addr: EthernetAddress(mac),
        ethertype: EthernetProtocol::Arp,
    };
    let mut frame = vec![0u8; eth.buffer_len() + arp.buffer_len()];
    let mut f = EthernetFrame::new_unchecked(&mut frame[..]);
    eth.emit(&mut f);
    arp.emit(&mut ArpPacket::new_unchecked(f.payload_mut()));
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    const US_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const US: [u8; 4] = [10, 0, 0, 1];
    const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const PEER: [u8; 4] = [10, 0, 0, 2];

    fn ms(ms: i64) -> Instant {
        Instant::from_millis(ms)
    }

    fn keeper() -> NeighbourKeeper {
        NeighbourKeeper::new(
            US_MAC,
            US,
            Duration::from_millis(1000),
            Duration::from_millis(20),
        )
    }

    fn arp(op: ArpOperation, from: ([u8; 6], [u8; 4]), to: [u8; 4]) -> Vec<u8> {
        let n = Neighbour {
            ip: from.1,
            mac: from.0,
            heard: ms(0),
        };
        let mut f = reply_from(&n, [0xff; 6], to);
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        let mut a = ArpPacket::new_unchecked(eth.payload_mut());
        a.set_operation(op);
        f
    }

    fn ipv4(from_mac: [u8; 6], src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20];
        f[6..12].copy_from_slice(&from_mac);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
        ip.set_version(4);
        ip.set_header_len(20);
        ip.set_total_len(20);
        ip.set_src_addr(Ipv4Address::from(src));
        ip.set_dst_addr(Ipv4Address::from(dst));
        f
    }

    fn refreshed(k: &mut NeighbourKeeper, now: Instant) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        k.refresh(now, |f| out.push(f));
        out
    }

    /// What smoltcp learns from an ARP reply: the sender, aimed at us.
    fn parse(frame: &[u8]) -> ([u8; 6], ArpRepr) {
        let eth = EthernetFrame::new_checked(frame).unwrap();
        let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        (eth.dst_addr().0, arp)
    }

    #[test]
    fn a_neighbour_heard_by_arp_is_renewed_each_interval_until_its_lifetime_ends() {
        let mut k = keeper();
        assert!(refreshed(&mut k, ms(0)).is_empty());
        k.heard(&arp(ArpOperation::Request, (PEER_MAC, PEER), US), ms(5));
        assert!(refreshed(&mut k, ms(10)).is_empty(), "within the interval");
        let out = refreshed(&mut k, ms(20));
        assert_eq!(out.len(), 1);
        let (dst, repr) = parse(&out[0]);
        assert_eq!(dst, US_MAC);
        assert_eq!(
            repr,
            ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                source_hardware_addr: EthernetAddress(PEER_MAC),
                source_protocol_addr: Ipv4Address::from(PEER),
                target_hardware_addr: EthernetAddress(US_MAC),
                target_protocol_addr: Ipv4Address::from(US),
            }
        );
        // Unicast IPv4 from the same MAC keeps it; it is forgotten a lifetime after.
        k.heard(&ipv4(PEER_MAC, PEER, US), ms(500));
        assert_eq!(refreshed(&mut k, ms(1400)).len(), 1);
        assert!(
            refreshed(&mut k, ms(1500)).is_empty(),
            "not heard for a lifetime"
        );
        assert!(refreshed(&mut k, ms(1600)).is_empty());
    }

    #[test]
    fn only_what_smoltcp_would_learn_is_kept() {
        let mut k = keeper();
        // ARP aimed at another host, IPv4 from an unknown or another MAC: nothing learned.
        k.heard(
            &arp(ArpOperation::Reply, (PEER_MAC, PEER), [10, 0, 0, 9]),
            ms(0),
        );
        k.heard(&ipv4(PEER_MAC, PEER, US), ms(0));
        k.heard(
            &arp(ArpOperation::Request, ([4, 0, 0, 0, 0, 2], PEER), US),
            ms(0),
        );
        k.heard(&ipv4(PEER_MAC, PEER, US), ms(900));
        assert!(
            refreshed(&mut k, ms(1100)).is_empty(),
            "the MAC it was learned with was not heard again"
        );
        // A broadcast sender address is not a neighbour; junk is ignored.
        k.heard(&arp(ArpOperation::Request, ([0xff; 6], PEER), US), ms(1200));
        k.heard(&[0u8; 7], ms(1200));
        k.heard(&[], ms(1200));
        assert!(refreshed(&mut k, ms(1300)).is_empty());
    }

    #[test]
    fn the_neighbour_heard_longest_ago_makes_room() {
        let mut k = keeper();
        for i in 0..=NEIGHBOURS as u8 {
            let from = ([2, 0, 0, 0, 1, i], [10, 0, 1, i]);
            k.heard(&arp(ArpOperation::Reply, from, US), ms(i64::from(i)));
        }
        let out = refreshed(&mut k, ms(100));
        assert_eq!(out.len(), NEIGHBOURS);
        assert!(out.iter().all(|f| {
            let (
                _,
                ArpRepr::EthernetIpv4 {
                    source_protocol_addr,
                    ..
                },
            ) = parse(f)
            else {
                return false;
            };
            source_protocol_addr.octets() != [10, 0, 1, 0]
        }));
    }
}
