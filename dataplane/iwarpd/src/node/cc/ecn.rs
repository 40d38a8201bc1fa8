//! ECN (RFC 3168) for a TCP that knows nothing of it: smoltcp neither sets nor reads the ECN
//! field or the ECE and CWR flags, so the device layer does, on the segments as they pass.
//! Here are the pieces that need no connection state: the flag and ECT(0) rewrites with
//! their checksums fixed incrementally (RFC 1624), and the receiver's echo of CE marks, in
//! RFC 3168's classic form or DCTCP's (RFC 8257 section 3.2).

/// The ECN field's codepoints (RFC 3168 section 5): not ECN-capable, ECT(0), CE.
pub const NOT_ECT: u8 = 0b00;
pub const ECT0: u8 = 0b10;
pub const CE: u8 = 0b11;

/// The TCP flags RFC 3168 section 6.1 adds, in the flags octet.
pub const CWR: u8 = 0x80;
pub const ECE: u8 = 0x40;

/// How a node answers the CE marks it receives, and whether it negotiates ECN at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Off,
    /// RFC 3168 section 6.1.3: ECE on every ACK from a CE mark until the sender's CWR.
    Classic,
    /// RFC 8257 section 3.2: ECE on an ACK says whether the data it acknowledges was marked.
    Dctcp,
}

/// What a connection's receiving side echoes to the sender.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo {
    /// Set ECE on our next segments.
    ece: bool,
}

impl Echo {
    /// A data segment arrived, its CE mark and CWR flag as given.
    pub fn on_data(&mut self, mode: Mode, ce: bool, cwr: bool) {
        match mode {
            Mode::Off => {}
            Mode::Classic => {
                // RFC 3168 section 6.1.3: CWR ends the echo, a CE mark (in the same
                // segment too) starts it again.
                if cwr {
                    self.ece = false;
                }
                if ce {
                    self.ece = true;
                }
            }
            // RFC 8257 section 3.2: the state is the mark of the latest segment. smoltcp
            // acknowledges a second full segment and out-of-order data at once and a lone
            // one within `tcp.ack_delay_us`, so an ACK rarely covers segments of both kinds;
            // when it does, its ECE is the latest segment's.
            Mode::Dctcp => self.ece = ce,
        }
    }

    /// Whether our segments carry ECE now.
    pub fn ece(&self) -> bool {
        self.ece
    }
}

/// Where a frame's IPv4 and TCP headers start, once it is known to be Ethernet + IPv4 + TCP.
#[derive(Debug, Clone, Copy)]
pub struct Offsets {
    pub ip: usize,
    pub tcp: usize,
}

/// RFC 1624 equation 3: the checksum `sum` of data in which the 16-bit word `old` became
/// `new`, without summing the data again.
pub fn adjust(sum: u16, old: u16, new: u16) -> u16 {
    let mut x = u32::from(!sum) + u32::from(!old) + u32::from(new);
    while x > 0xffff {
        x = (x & 0xffff) + (x >> 16);
    }
    !(x as u16)
}

fn word(frame: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([frame[at], frame[at + 1]])
}

/// Replaces the 16-bit word at `at` by `new` and fixes the checksum at `sum_at` to match.
fn rewrite(frame: &mut [u8], at: usize, new: u16, sum_at: usize) {
    let old = word(frame, at);
    if old == new {
        return;
    }
    frame[at..at + 2].copy_from_slice(&new.to_be_bytes());
    let sum = adjust(word(frame, sum_at), old, new);
    frame[sum_at..sum_at + 2].copy_from_slice(&sum.to_be_bytes());
}

/// Sets the TCP flags in `flags` (ECE, CWR) on the segment, its TCP checksum fixed (the
/// flags are not in the pseudo-header; a port that computes checksums itself overwrites it).
pub fn set_tcp_flags(frame: &mut [u8], at: Offsets, flags: u8) {
    let w = at.tcp + 12;
    let new = word(frame, w) | u16::from(flags);
    rewrite(frame, w, new, at.tcp + 16);
}

/// Sets the IPv4 header's ECN field to `codepoint`, its header checksum fixed (the TCP
/// checksum does not cover it).
pub fn set_ecn_field(frame: &mut [u8], at: Offsets, codepoint: u8) {
    let w = at.ip;
    let new = (word(frame, w) & !0b11) | u16::from(codepoint & 0b11);
    rewrite(frame, w, new, at.ip + 10);
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::{EthernetFrame, IpAddress, Ipv4Packet, TcpControl, TcpPacket};

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];
    const AT: Offsets = Offsets { ip: 14, tcp: 34 };

    fn frame(control: TcpControl, ack: bool, payload: &[u8]) -> Vec<u8> {
        let ack = ack.then_some(1234);
        crate::peer_tcp::test_segment((A, B), (7174, 5000), control, 77, ack, payload)
    }

    /// Both checksums of the frame verify; returns (ECN field, ECE, CWR, SYN, ACK).
    fn check(buf: &[u8]) -> (u8, bool, bool, bool, bool) {
        let f = EthernetFrame::new_checked(buf).unwrap();
        let ip = Ipv4Packet::new_checked(f.payload()).unwrap();
        assert!(ip.verify_checksum(), "IPv4 header checksum");
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        assert!(
            tcp.verify_checksum(
                &IpAddress::Ipv4(ip.src_addr()),
                &IpAddress::Ipv4(ip.dst_addr())
            ),
            "TCP checksum"
        );
        (ip.ecn(), tcp.ece(), tcp.cwr(), tcp.syn(), tcp.ack())
    }

    #[test]
    fn the_incremental_checksum_matches_rfc_1624s_example() {
        // RFC 1624 section 4: HC = 0xDD2F, a word 0x5555 becomes 0x3285, HC' = 0x0000.
        assert_eq!(adjust(0xdd2f, 0x5555, 0x3285), 0x0000);
        // And one that needs the end-around carry twice over.
        let data = [0xffffu16, 0x0001, 0x8000];
        let sum = |d: &[u16]| {
            let mut x: u32 = d.iter().map(|&w| u32::from(w)).sum();
            while x > 0xffff {
                x = (x & 0xffff) + (x >> 16);
            }
            !(x as u16)
        };
        let before = sum(&data);
        let after = sum(&[0xffff, 0xfffe, 0x8000]);
        assert_eq!(adjust(before, 0x0001, 0xfffe), after);
    }

    #[test]
    fn an_ecn_setup_syn_carries_ece_and_cwr_and_its_syn_ack_ece_alone() {
        // RFC 3168 section 6.1.1: "ECN-setup SYN packet" has ECE and CWR set; the
        // "ECN-setup SYN-ACK packet" ECE set and CWR clear. Neither is ECN-capable
        // (section 6.1.1: no ECT on a SYN or SYN-ACK).
        let mut syn = frame(TcpControl::Syn, false, &[]);
        set_tcp_flags(&mut syn, AT, ECE | CWR);
        assert_eq!(check(&syn), (NOT_ECT, true, true, true, false));
        let mut syn_ack = frame(TcpControl::Syn, true, &[]);
        set_tcp_flags(&mut syn_ack, AT, ECE);
        assert_eq!(check(&syn_ack), (NOT_ECT, true, false, true, true));
    }

    #[test]
    fn a_data_segment_becomes_ect0_and_its_checksums_stay_right() {
        // RFC 3168 section 5: ECT(0) is 0b10 in the ECN field, section 6.1.2's CWR on the
        // first new data after a reduction, section 6.1.3's ECE on ACKs.
        for len in [0usize, 1, 2, 3, 1460] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut f = frame(TcpControl::Psh, true, &payload);
            set_ecn_field(&mut f, AT, ECT0);
            assert_eq!(check(&f), (ECT0, false, false, false, true), "{len}");
            set_tcp_flags(&mut f, AT, CWR);
            assert_eq!(check(&f), (ECT0, false, true, false, true), "{len}");
            set_tcp_flags(&mut f, AT, ECE);
            assert_eq!(check(&f), (ECT0, true, true, false, true), "{len}");
            set_tcp_flags(&mut f, AT, ECE);
            assert_eq!(check(&f), (ECT0, true, true, false, true), "set twice");
        }
    }

    #[test]
    fn the_ecn_field_keeps_the_dscp_beside_it() {
        let mut f = frame(TcpControl::None, true, b"x");
        f[15] = 0xb8; // DSCP EF, not ECN-capable
        let sum = Ipv4Packet::new_unchecked(&mut f[14..]).checksum();
        let mut p = Ipv4Packet::new_unchecked(&mut f[14..]);
        p.fill_checksum();
        assert_ne!(sum, p.checksum());
        set_ecn_field(&mut f, AT, ECT0);
        assert_eq!(f[15], 0xba);
        assert_eq!(check(&f).0, ECT0);
    }

    #[test]
    fn the_classic_echo_runs_from_a_ce_mark_to_the_senders_cwr() {
        // RFC 3168 section 6.1.3: ECE on every ACK after a CE packet until a CWR packet; a
        // CE mark on the CWR packet itself starts it again.
        let mut e = Echo::default();
        e.on_data(Mode::Classic, false, false);
        assert!(!e.ece());
        e.on_data(Mode::Classic, true, false);
        assert!(e.ece());
        e.on_data(Mode::Classic, false, false);
        assert!(e.ece(), "unmarked data does not end it");
        e.on_data(Mode::Classic, false, true);
        assert!(!e.ece(), "CWR does");
        e.on_data(Mode::Classic, true, true);
        assert!(e.ece(), "CWR with CE");
    }

    #[test]
    fn the_dctcp_echo_follows_each_segments_mark() {
        // RFC 8257 section 3.2: the receiver's ECE is the CE state of the data it
        // acknowledges, and CWR means nothing to it.
        let mut e = Echo::default();
        e.on_data(Mode::Dctcp, true, false);
        assert!(e.ece());
        e.on_data(Mode::Dctcp, false, false);
        assert!(!e.ece(), "the next unmarked segment ends it, no CWR needed");
        e.on_data(Mode::Dctcp, true, false);
        e.on_data(Mode::Dctcp, true, true);
        assert!(e.ece());
        let mut off = Echo::default();
        off.on_data(Mode::Off, true, false);
        assert!(!off.ece());
    }
}
