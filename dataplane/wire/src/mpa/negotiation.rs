//! MPA connection setup (RFC 5044 section 7, RFC 6581 section 3), sans-IO: the initiator
//! sends a Request, the responder answers with a Reply that accepts or rejects; both then
//! know what the connection uses. The control plane drives this over the connection's first
//! bytes, then hands the stream to the RNIC engine.
//!
//! Rules applied:
//! - CRC: used in both directions if either side sets C (RFC 5044 section 7.1: a side that
//!   receives C set MUST use CRC; the responder echoes C when either wants it).
//! - Markers: a frame's M asks for markers in the stream *it receives*; so the initiator sends
//!   markers when the Reply has M, the responder when the Request has M.
//! - Revision: 2 (with the RFC 6581 enhanced data) when both sent 2; a revision 1 peer makes
//!   it 1, with no IRD/ORD exchange.
//! - IRD/ORD (RFC 6581 section 3): each side's ORD is lowered to the peer's IRD, so a side
//!   never has more Reads outstanding than its peer accepts.
//! - Peer-to-peer: the initiator offers RTR kinds, the responder picks exactly one, and the
//!   initiator sends that RTR first. A reply that picks none of the offered kinds fails.
//! - RDMAP version 2: only when both ask (the reserved-bit scheme of `frame.rs`).

use super::fpdu::MpaParams;
use super::frame::{EnhancedData, FrameKind, FrameRepr, Rtr, FRAME_HEADER_LEN, IRD_ORD_MAX};
use super::MAX_PRIVATE_DATA;
use crate::error::Error;

/// What this side wants: what the application asked for when it listened, connected or
/// accepted, unchanged.
pub use iwarp_abi::app::ConnSettings as Settings;

/// The outcome both sides agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    pub tx: MpaParams,
    pub rx: MpaParams,
    pub revision: u8,
    pub ird: u16,
    pub ord: u16,
    /// The RTR message agreed on for peer-to-peer mode, if any.
    pub rtr: Option<Rtr>,
    pub rdmap_version: u8,
    pub peer_private_data: Vec<u8>,
}

/// Why setup failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupError {
    /// The peer rejected the connection; its private data says why.
    Rejected { private_data: Vec<u8> },
    /// A frame that is not a valid MPA Request/Reply (or not the one expected).
    BadFrame(Error),
    /// Peer-to-peer was asked for, and no common RTR kind exists.
    NoMatchingRtr,
    /// Our private data does not fit.
    PrivateDataTooLong,
}

/// Collects one whole Request/Reply frame from the stream. Returns the frame's length once
/// `buf` holds it.
pub fn frame_complete(buf: &[u8]) -> Result<Option<usize>, SetupError> {
    if buf.len() < FRAME_HEADER_LEN {
        return Ok(None);
    }
    let n = FrameRepr::frame_len(buf).map_err(SetupError::BadFrame)?;
    Ok((buf.len() >= n).then_some(n))
}

fn enhanced(s: &Settings) -> Option<EnhancedData> {
    (s.revision == 2).then(|| EnhancedData {
        ird: s.ird.min(IRD_ORD_MAX),
        ord: s.ord.min(IRD_ORD_MAX),
        peer_to_peer: s.peer_to_peer.is_some(),
        rtr: s.peer_to_peer.unwrap_or_default(),
    })
}

fn emit(f: &FrameRepr<'_>) -> Result<Vec<u8>, SetupError> {
    if f.private_data.len() + 4 > MAX_PRIVATE_DATA {
        return Err(SetupError::PrivateDataTooLong);
    }
    let mut out = vec![0u8; f.buffer_len()];
    f.emit(&mut out).map_err(SetupError::BadFrame)?;
    Ok(out)
}

/// The initiator's MPA Request.
pub fn request(s: &Settings) -> Result<Vec<u8>, SetupError> {
    emit(&FrameRepr {
        kind: FrameKind::Request,
        markers: s.markers,
        crc: s.crc,
        reject: false,
        rdmap_v2: s.rdmap_v2,
        revision: s.revision,
        enhanced: enhanced(s),
        private_data: &s.private_data,
    })
}

/// What the responder learns from a Request, before it accepts or rejects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    pub markers: bool,
    pub crc: bool,
    pub revision: u8,
    pub enhanced: Option<EnhancedData>,
    pub rdmap_v2: bool,
    pub private_data: Vec<u8>,
}

/// Parses the initiator's Request (the whole frame, see [`frame_complete`]).
pub fn parse_request(frame: &[u8]) -> Result<Incoming, SetupError> {
    let f = FrameRepr::parse(frame).map_err(SetupError::BadFrame)?;
    if f.kind != FrameKind::Request {
        return Err(SetupError::BadFrame(Error::BadMpaKey));
    }
    Ok(Incoming {
        markers: f.markers,
        crc: f.crc,
        revision: f.revision,
        enhanced: f.enhanced,
        rdmap_v2: f.rdmap_v2,
        private_data: f.private_data.to_vec(),
    })
}

/// The responder accepts: returns the Reply to send and the outcome.
pub fn accept(req: &Incoming, s: &Settings) -> Result<(Vec<u8>, Negotiated), SetupError> {
    let revision = req.revision.min(s.revision);
    let crc = req.crc || s.crc;
    let v2 = req.rdmap_v2 && s.rdmap_v2;
    let (ird, ord, rtr, reply_enh) = match (revision, req.enhanced) {
        (2, Some(peer)) => {
            let ord = s.ord.min(peer.ird);
            let ird = s.ird;
            let rtr = if peer.peer_to_peer {
                let ours = s.peer_to_peer.unwrap_or(Rtr {
                    send: true,
                    write: true,
                    read: true,
                });
                // Pick one kind both support; prefer a zero-length Write, then Read, then
                // Send (siw accepts Write or Read, not Send, as responder).
                let pick = if peer.rtr.write && ours.write {
                    Rtr {
                        write: true,
                        ..Rtr::NONE
                    }
                } else if peer.rtr.read && ours.read {
                    Rtr {
                        read: true,
                        ..Rtr::NONE
                    }
                } else if peer.rtr.send && ours.send {
                    Rtr {
                        send: true,
                        ..Rtr::NONE
                    }
                } else {
                    return Err(SetupError::NoMatchingRtr);
                };
                Some(pick)
            } else {
                None
            };
            let e = EnhancedData {
                ird,
                ord,
                peer_to_peer: rtr.is_some(),
                rtr: rtr.unwrap_or_default(),
            };
            (ird, ord, rtr, Some(e))
        }
        _ => (s.ird, s.ord, None, None),
    };
    let reply = emit(&FrameRepr {
        kind: FrameKind::Reply,
        markers: s.markers,
        crc,
        reject: false,
        rdmap_v2: v2,
        revision,
        enhanced: reply_enh,
        private_data: &s.private_data,
    })?;
    Ok((
        reply,
        Negotiated {
            tx: MpaParams {
                crc,
                markers: req.markers,
            },
            rx: MpaParams {
                crc,
                markers: s.markers,
            },
            revision,
            ird,
            ord,
            rtr,
            rdmap_version: if v2 { 2 } else { 1 },
            peer_private_data: req.private_data.clone(),
        },
    ))
}

/// The responder rejects, with private data saying why.
pub fn reject(req: &Incoming, private_data: &[u8]) -> Result<Vec<u8>, SetupError> {
    emit(&FrameRepr {
        kind: FrameKind::Reply,
        markers: false,
        crc: req.crc,
        reject: true,
        rdmap_v2: false,
        revision: req.revision,
        enhanced: None,
        private_data,
    })
}

/// The initiator reads the Reply (the whole frame).
pub fn parse_reply(frame: &[u8], s: &Settings) -> Result<Negotiated, SetupError> {
    let f = FrameRepr::parse(frame).map_err(SetupError::BadFrame)?;
    if f.kind != FrameKind::Reply {
        return Err(SetupError::BadFrame(Error::BadMpaKey));
    }
    if f.reject {
        return Err(SetupError::Rejected {
            private_data: f.private_data.to_vec(),
        });
    }
    let crc = f.crc || s.crc;
    let (ird, ord, rtr) = match f.enhanced {
        Some(peer) if f.revision == 2 => {
            let rtr = match (s.peer_to_peer, peer.peer_to_peer) {
                (Some(offer), true) => {
                    let picked = peer.rtr;
                    let count = picked.send as u8 + picked.write as u8 + picked.read as u8;
                    let allowed = (!picked.send || offer.send)
                        && (!picked.write || offer.write)
                        && (!picked.read || offer.read);
                    if count != 1 || !allowed {
                        return Err(SetupError::NoMatchingRtr);
                    }
                    Some(picked)
                }
                (Some(_), false) => return Err(SetupError::NoMatchingRtr),
                (None, _) => None,
            };
            (s.ird, s.ord.min(peer.ird), rtr)
        }
        _ => (s.ird, s.ord, None),
    };
    Ok(Negotiated {
        tx: MpaParams {
            crc,
            markers: f.markers,
        },
        rx: MpaParams {
            crc,
            markers: s.markers,
        },
        revision: f.revision.min(s.revision),
        ird,
        ord,
        rtr,
        rdmap_version: if f.rdmap_v2 && s.rdmap_v2 { 2 } else { 1 },
        peer_private_data: f.private_data.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(i: &Settings, r: &Settings) -> (Negotiated, Negotiated) {
        let req = request(i).unwrap();
        assert_eq!(frame_complete(&req).unwrap(), Some(req.len()));
        let inc = parse_request(&req).unwrap();
        let (reply, rn) = accept(&inc, r).unwrap();
        let inn = parse_reply(&reply, i).unwrap();
        (inn, rn)
    }

    #[test]
    fn ird_ord_are_applied_per_side() {
        let i = Settings {
            ird: 4,
            ord: 32,
            private_data: b"hello".to_vec(),
            ..Settings::default()
        };
        let r = Settings {
            ird: 8,
            ord: 2,
            ..Settings::default()
        };
        let (a, b) = run(&i, &r);
        assert_eq!(
            (a.ird, a.ord),
            (4, 8),
            "initiator may have at most the responder's IRD out"
        );
        assert_eq!((b.ird, b.ord), (8, 2));
        assert_eq!(b.peer_private_data, b"hello");
        assert_eq!(a.revision, 2);
        assert!(a.tx.crc && b.rx.crc);
    }

    #[test]
    fn crc_if_either_asks_and_markers_per_direction() {
        let i = Settings {
            crc: false,
            markers: true,
            ..Settings::default()
        };
        let r = Settings {
            crc: true,
            markers: false,
            ..Settings::default()
        };
        let (a, b) = run(&i, &r);
        assert!(a.tx.crc && a.rx.crc && b.tx.crc && b.rx.crc);
        assert!(
            b.tx.markers && a.rx.markers,
            "the initiator asked to receive markers"
        );
        assert!(!a.tx.markers && !b.rx.markers);
    }

    #[test]
    fn revision_1_peer() {
        let i = Settings::default();
        let r = Settings {
            revision: 1,
            ..Settings::default()
        };
        let (a, b) = run(&i, &r);
        assert_eq!((a.revision, b.revision), (1, 1));
    }

    #[test]
    fn rdmap_v2_only_when_both_ask() {
        let v2 = Settings {
            rdmap_v2: true,
            ..Settings::default()
        };
        assert_eq!(run(&v2, &v2).0.rdmap_version, 2);
        assert_eq!(run(&v2, &Settings::default()).0.rdmap_version, 1);
        assert_eq!(run(&Settings::default(), &v2).1.rdmap_version, 1);
    }

    #[test]
    fn peer_to_peer_rtr() {
        let offer = Rtr {
            send: true,
            write: false,
            read: true,
        };
        let i = Settings {
            peer_to_peer: Some(offer),
            ..Settings::default()
        };
        let (a, b) = run(&i, &Settings::default());
        assert_eq!(
            a.rtr,
            Some(Rtr {
                read: true,
                ..Rtr::NONE
            })
        );
        assert_eq!(a.rtr, b.rtr);
        let r = Settings {
            peer_to_peer: Some(Rtr {
                write: true,
                ..Rtr::NONE
            }),
            ..Settings::default()
        };
        let inc = parse_request(&request(&i).unwrap()).unwrap();
        assert_eq!(accept(&inc, &r).unwrap_err(), SetupError::NoMatchingRtr);
    }

    #[test]
    fn reject_carries_private_data() {
        let i = Settings::default();
        let inc = parse_request(&request(&i).unwrap()).unwrap();
        let rep = reject(&inc, b"no room").unwrap();
        assert_eq!(
            parse_reply(&rep, &i).unwrap_err(),
            SetupError::Rejected {
                private_data: b"no room".to_vec()
            }
        );
    }

    #[test]
    fn garbage_is_a_bad_frame() {
        assert!(matches!(
            parse_request(&[0u8; 20]),
            Err(SetupError::BadFrame(_))
        ));
        assert_eq!(frame_complete(&[0u8; 10]).unwrap(), None);
    }
}
