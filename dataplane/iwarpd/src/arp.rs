//! ARP as the device layer and the neighbour keeper read it: one parse of an Ethernet/IPv4
//! ARP packet (smoltcp's), and the pacer that holds back repeats of unanswered requests.

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol, Ipv4Address,
};

/// What the ARP pacer and the neighbour keeper read of an ARP packet.
pub(crate) struct Arp {
    pub op: ArpOperation,
    pub sender_mac: EthernetAddress,
    pub sender: Ipv4Address,
    pub target: Ipv4Address,
}

/// An Ethernet/IPv4 ARP packet as smoltcp reads it (`ArpRepr::parse`); None for any other
/// frame.
pub(crate) fn ipv4_arp(frame: &[u8]) -> Option<Arp> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Arp {
        return None;
    }
    let ArpRepr::EthernetIpv4 {
        operation,
        source_hardware_addr,
        source_protocol_addr,
        target_protocol_addr,
        ..
    } = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?
    else {
        return None;
    };
    Some(Arp {
        op: operation,
        sender_mac: source_hardware_addr,
        sender: source_protocol_addr,
        target: target_protocol_addr,
    })
}

/// Paces ARP requests: one per target address per interval, the rest dropped.
///
/// smoltcp repeats an unanswered request once a second of its time, which the dilated clock
/// (see `clock.rs`) makes a millisecond: a neighbour that does not answer (a host still
/// booting, a dead peer being dialled) would get a thousand broadcasts a second. The pacer
/// restores a real-time rate. Only repeats of unanswered requests are dropped: the first
/// request to a target goes out at once, any ARP packet from the target clears its pacing
/// (smoltcp's entries expire after 60 ms of real time, and the refresh must not wait), and
/// smoltcp keeps asking, so the next repeat passes when the interval is over.
#[derive(Debug)]
pub struct ArpPacer {
    interval: Duration,
    /// The latest request sent per target (a few; the oldest is replaced).
    recent: Vec<([u8; 4], Instant)>,
    pub dropped: u64,
}

impl ArpPacer {
    const TARGETS: usize = 8;

    /// `interval` in the clock smoltcp runs on; zero lets every request through.
    pub fn new(interval: Duration) -> ArpPacer {
        ArpPacer {
            interval,
            recent: Vec::with_capacity(Self::TARGETS),
            dropped: 0,
        }
    }

    /// A received frame: ARP from a target means it answers; its next request may go at once.
    pub fn heard(&mut self, frame: &[u8]) {
        if self.recent.is_empty() {
            return;
        }
        if let Some(arp) = ipv4_arp(frame) {
            let sender = arp.sender.octets();
            self.recent.retain(|(t, _)| *t != sender);
        }
    }

    /// Whether `frame` may go out at `now`: anything but an ARP request always may.
    pub fn admits(&mut self, frame: &[u8], now: Instant) -> bool {
        if self.interval == Duration::ZERO {
            return true;
        }
        let target = match ipv4_arp(frame) {
            Some(arp) if arp.op == ArpOperation::Request => arp.target.octets(),
            _ => return true,
        };
        match self.recent.iter_mut().find(|(t, _)| *t == target) {
            Some((_, last)) if now < *last + self.interval => {
                self.dropped += 1;
                false
            }
            Some((_, last)) => {
                *last = now;
                true
            }
            None => {
                if self.recent.len() == Self::TARGETS {
                    let oldest = (0..self.recent.len())
                        .min_by_key(|&i| self.recent[i].1)
                        .unwrap_or(0);
                    self.recent.swap_remove(oldest);
                }
                self.recent.push((target, now));
                true
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet/IPv4 ARP packet of operation `op` (1 request, 2 reply) asking for `target`.
    pub(crate) fn arp(op: u16, target: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0; 42];
        f[12..14].copy_from_slice(&[8, 6]);
        // Hardware Ethernet (1), protocol IPv4, address lengths 6 and 4.
        f[14..20].copy_from_slice(&[0, 1, 8, 0, 6, 4]);
        f[20..22].copy_from_slice(&op.to_be_bytes());
        f[38..42].copy_from_slice(&target);
        f
    }

    /// An ARP reply from `sender`.
    fn reply_from(sender: [u8; 4]) -> Vec<u8> {
        let mut f = arp(2, [10, 0, 0, 1]);
        f[28..32].copy_from_slice(&sender);
        f
    }

    #[test]
    fn a_target_that_answered_is_asked_again_at_once() {
        let mut p = ArpPacer::new(Duration::from_millis(100));
        let to_a = arp(1, [10, 0, 0, 2]);
        assert!(p.admits(&to_a, Instant::from_millis(0)));
        p.heard(&reply_from([10, 0, 0, 9]));
        assert!(
            !p.admits(&to_a, Instant::from_millis(60)),
            "another's reply"
        );
        p.heard(&reply_from([10, 0, 0, 2]));
        // Its cache entry expired 60 ms later: the refresh must not wait out the interval.
        assert!(p.admits(&to_a, Instant::from_millis(60)));
    }

    #[test]
    fn repeated_requests_to_one_target_are_paced() {
        let mut p = ArpPacer::new(Duration::from_millis(100));
        let t = |ms| Instant::from_millis(ms);
        let to_a = arp(1, [10, 0, 0, 2]);
        assert!(p.admits(&to_a, t(0)), "the first request goes at once");
        assert!(!p.admits(&to_a, t(1)));
        assert!(!p.admits(&to_a, t(99)));
        assert!(
            p.admits(&arp(1, [10, 0, 0, 3]), t(50)),
            "another target is not held"
        );
        assert!(
            p.admits(&arp(2, [10, 0, 0, 2]), t(50)),
            "replies are never held"
        );
        let mut ip = to_a.clone();
        ip[12..14].copy_from_slice(&[8, 0]);
        assert!(p.admits(&ip, t(50)), "only ARP is paced");
        assert!(
            p.admits(&to_a, t(100)),
            "the next request after the interval"
        );
        assert_eq!(p.dropped, 2);
    }

    #[test]
    fn the_oldest_target_makes_room_and_zero_paces_nothing() {
        let mut p = ArpPacer::new(Duration::from_millis(100));
        for i in 0..=ArpPacer::TARGETS as u8 {
            assert!(p.admits(&arp(1, [10, 0, 0, i]), Instant::from_millis(i64::from(i))));
        }
        assert_eq!(p.recent.len(), ArpPacer::TARGETS);
        // Target 0 was the oldest and was forgotten, so it is asked again at once.
        assert!(p.admits(&arp(1, [10, 0, 0, 0]), Instant::from_millis(20)));
        let mut off = ArpPacer::new(Duration::ZERO);
        let f = arp(1, [10, 0, 0, 2]);
        assert!((0..5).all(|i| off.admits(&f, Instant::from_millis(i))));
    }
}
