//! The application <-> iwarp-control contract (control.sock): what an application asks
//! ([`Request`]), what control answers ([`Reply`]) and the events it sends meanwhile
//! ([`Event`]). Each message is a little-endian `u32` length and that many octets of the
//! contract's codec (serde and postcard); a bad message is a [`Malformed`] error, never a panic,
//! and the connection stays usable for the next one.

use crate::codec;
use crate::command::ShmPath;
use crate::id::{CqId, PdId, QpId, SrqId, Stag};
pub use crate::limits::Limits;
use crate::qp::{QpState, Terminated};
use core::fmt;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// The largest message body either side accepts.
pub const MAX_MESSAGE: usize = 4096;

/// A message that does not decode: what was wrong with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed application message: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// The RTR message kinds a peer-to-peer initiator offers or a responder accepts (RFC 6581
/// section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Rtr {
    /// A zero-length Send.
    pub send: bool,
    /// A zero-length RDMA Write.
    pub write: bool,
    /// A zero-length RDMA Read.
    pub read: bool,
}

impl Rtr {
    pub const NONE: Rtr = Rtr {
        send: false,
        write: false,
        read: false,
    };
    pub fn is_empty(&self) -> bool {
        !(self.send || self.write || self.read)
    }
}

/// MPA settings of a connection (RFC 5044 section 7, RFC 6581): what the application asks
/// for when it listens, connects or accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnSettings {
    pub crc: bool,
    /// Ask for markers in the stream we receive.
    pub markers: bool,
    /// MPA revision, 1 or 2.
    pub revision: u8,
    pub ird: u16,
    pub ord: u16,
    /// Peer-to-peer: the RTR kinds we offer (initiator) or accept (responder).
    pub peer_to_peer: Option<Rtr>,
    pub rdmap_v2: bool,
    /// The ULP's private data (at most 512 octets less the 4 of the enhanced data).
    #[serde(with = "codec::octets")]
    pub private_data: Vec<u8>,
}

impl Default for ConnSettings {
    fn default() -> ConnSettings {
        ConnSettings {
            crc: true,
            markers: false,
            revision: 2,
            ird: 16,
            ord: 16,
            peer_to_peer: None,
            rdmap_v2: false,
            private_data: Vec::new(),
        }
    }
}

/// What Create QP asks for (Verbs section 7.3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpAttrs {
    pub pd: PdId,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub srq: Option<SrqId>,
    pub sq_depth: u32,
    pub rq_depth: u32,
    pub max_sge: u32,
    pub max_inline: u32,
    pub ird: u16,
    pub ord: u16,
}

/// A request from an application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    QueryRnic,
    AllocPd,
    DeallocPd {
        pd: PdId,
    },
    CreateCq {
        depth: u32,
        ring: ShmPath,
    },
    DestroyCq {
        cq: CqId,
    },
    /// Query CQ (Verbs section 9.2.3.2): answered with [`Reply::Cq`].
    QueryCq {
        cq: CqId,
    },
    /// Modify CQ (Verbs section 9.2.3.3): resize to `depth` onto the new ring segment `ring`
    /// the application made; answered with [`Reply::Cq`], or refused (nothing changes) when
    /// more completions are present than `depth` holds.
    ModifyCq {
        cq: CqId,
        depth: u32,
        ring: ShmPath,
    },
    CreateSrq {
        pd: PdId,
        depth: u32,
        ring: ShmPath,
    },
    DestroySrq {
        srq: SrqId,
    },
    /// Query S-RQ (Verbs section 9.2.4.2): answered with [`Reply::Srq`].
    QuerySrq {
        srq: SrqId,
    },
    /// Which of the daemon's poll-mode workers serves this application (answered with
    /// [`Reply::Id`]), so that its posts ring only that worker's doorbell.
    Placement,
    /// Modify S-RQ (Verbs section 9.2.4.3): set and arm the S-RQ limit (the asynchronous
    /// event when fewer than `limit` receives remain). The depth cannot change.
    ModifySrq {
        srq: SrqId,
        limit: u32,
    },
    CreateQp {
        attrs: QpAttrs,
        sq: ShmPath,
        rq: ShmPath,
    },
    ModifyQp {
        qp: QpId,
        state: QpState,
    },
    QueryQp {
        qp: QpId,
    },
    DestroyQp {
        qp: QpId,
    },
    /// Register part of a segment control verified (its id from [`Request::AttachSegment`]).
    RegMr {
        pd: PdId,
        access: u32,
        segment: u32,
        offset: u64,
        len: u64,
    },
    ReregMr {
        stag: Stag,
        access: u32,
    },
    DeregMr {
        stag: Stag,
    },
    AllocMw {
        pd: PdId,
    },
    DeallocMw {
        stag: Stag,
    },
    /// Allocate Non-Shared Memory Region STag (Verbs section 9.2.6.1): an STag a Fast-Register
    /// work request gives memory later (here: part of a region of the same PD).
    AllocStag {
        pd: PdId,
    },
    /// Deallocate STag (section 9.2.6.4) of one from [`Request::AllocStag`].
    DeallocStag {
        stag: Stag,
    },
    /// Offer a shared segment (allocated through iwarp-verbs) for registration; control opens
    /// and verifies it. Answered with its id.
    AttachSegment {
        path: ShmPath,
    },
    /// Listen on a port with the MPA settings used for every connection accepted there until
    /// the application decides.
    Listen {
        port: u16,
        settings: ConnSettings,
    },
    /// Active open for `qp`; answered with the connection id, then events.
    Connect {
        qp: QpId,
        remote: SocketAddr,
        settings: ConnSettings,
    },
    Accept {
        conn: u32,
        qp: QpId,
        settings: ConnSettings,
    },
    Reject {
        conn: u32,
        #[serde(with = "codec::octets")]
        private_data: Vec<u8>,
    },
    Disconnect {
        conn: u32,
        abort: bool,
    },
    /// Register Memory Region, VA-based (Verbs section 7.2.3): as `RegMr`, with the tagged
    /// offset of the region's first octet `va` (the application's address of it, which
    /// peers are told) instead of 0.
    RegMrVa {
        pd: PdId,
        access: u32,
        segment: u32,
        offset: u64,
        len: u64,
        va: u64,
    },
    /// Stop listening on a port this application listens on: connections to it are
    /// refused from then on; those already requested or accepted stay.
    Unlisten {
        port: u16,
    },
}

/// Why control refused a request: one class per failure cause of a verb (Verbs section 7,
/// the "errors" lists of each verb). The number travels in [`Failure::code`].
#[repr(u16)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    InvalidHandle = 1,
    InvalidStag = 2,
    PdMismatch = 3,
    InUse = 4,
    InsufficientResources = 5,
    InvalidAttribute = 6,
    InvalidAccess = 7,
    InvalidRegion = 8,
    InvalidModify = 9,
    Protocol = 10,
    Refused = 11,
}

/// A refusal as it travels: its [`ErrorCode`] and a message that says why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub code: u16,
    pub message: String,
}

/// The answer to a request. Control builds it with its own error type as `F` and sends it
/// as a [`Failure`] ([`Reply::map_failed`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply<F = Failure> {
    Rnic(Limits),
    Done,
    /// The new resource's id (PD, CQ, S-RQ, QP number, connection) or STag.
    Id(u32),
    Qp {
        state: QpState,
    },
    /// A CQ's size (Query CQ, Modify CQ).
    Cq {
        depth: u32,
    },
    /// An S-RQ's depth and its limit (0: none armed since creation).
    Srq {
        depth: u32,
        limit: u32,
    },
    Failed(F),
}

impl<F> Reply<F> {
    /// The same reply with its failure, if any, turned by `f`.
    pub fn map_failed<G>(self, f: impl FnOnce(F) -> G) -> Reply<G> {
        match self {
            Reply::Rnic(l) => Reply::Rnic(l),
            Reply::Done => Reply::Done,
            Reply::Id(i) => Reply::Id(i),
            Reply::Qp { state } => Reply::Qp { state },
            Reply::Cq { depth } => Reply::Cq { depth },
            Reply::Srq { depth, limit } => Reply::Srq { depth, limit },
            Reply::Failed(e) => Reply::Failed(f(e)),
        }
    }
}

/// A connection request from a peer (on a port the application listens on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectRequest {
    pub conn: u32,
    pub port: u16,
    pub peer: SocketAddr,
    #[serde(with = "codec::octets")]
    pub private_data: Vec<u8>,
}

/// A connection in RTS, with what MPA negotiation settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Established {
    pub conn: u32,
    pub qp: QpId,
    /// Inbound Read/atomic requests this side accepts at once.
    pub ird: u16,
    /// Outbound Read/atomic requests this side may have outstanding (≤ the peer's IRD).
    pub ord: u16,
    pub rdmap_version: u8,
    /// The peer's private data.
    #[serde(with = "codec::octets")]
    pub private_data: Vec<u8>,
}

/// A connection or asynchronous event as the application sees it (Verbs section 8.3.3;
/// RFC 5040 section 7 for the Terminate).
/// Why a connect failed, as the RDMA CM tells it: Linux's iWARP connection manager reports
/// a refused or reset connect as UNREACHABLE, with the errno in the event's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConnectFailure {
    /// The peer answered the SYN with a RST: nothing listens on that port (ECONNREFUSED).
    Refused,
    /// The peer reset the connection during MPA setup (ECONNRESET).
    Reset,
    /// Nothing answered in time: the SYN, or a step of MPA setup (ETIMEDOUT).
    TimedOut,
    /// Anything else: a limit, a bad MPA frame, no common RTR, the daemon stopping.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    ConnectRequest(ConnectRequest),
    Established(Established),
    Rejected {
        conn: u32,
        #[serde(with = "codec::octets")]
        private_data: Vec<u8>,
    },
    ConnectFailed {
        conn: u32,
        cause: ConnectFailure,
        reason: String,
    },
    Disconnected {
        conn: u32,
        reason: String,
    },
    QpTerminated(Terminated),
    QpError {
        qp: QpId,
    },
    CqOverflow {
        cq: CqId,
    },
    SrqLimit {
        srq: SrqId,
    },
}

/// What control sends an application: the reply to its request, or an event in between.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToApp {
    Reply(Reply),
    Event(Event),
}

fn framed<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = codec::encode_append(v, vec![0; 4]);
    let n = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&n.to_le_bytes());
    out
}

/// The length of the first whole message in `buf`, once `buf` holds it (including its
/// 4-octet length), or an error for a length of 0 or above [`MAX_MESSAGE`].
pub fn message_len(buf: &[u8]) -> Result<Option<usize>, Malformed> {
    let Some(&[a, b, c, d]) = buf.get(..4) else {
        return Ok(None);
    };
    let n = u32::from_le_bytes([a, b, c, d]) as usize;
    if n == 0 || n > MAX_MESSAGE {
        return Err(Malformed("message length out of range"));
    }
    Ok((buf.len() >= 4 + n).then_some(4 + n))
}

/// A request, with its length.
pub fn encode_request(req: &Request) -> Vec<u8> {
    framed(req)
}

/// The request in one message body (without its length).
pub fn decode_request(body: &[u8]) -> Result<Request, Malformed> {
    codec::decode(body).map_err(Malformed)
}

/// A reply or an event, with its length.
pub fn encode_to_app(m: &ToApp) -> Vec<u8> {
    framed(m)
}

/// The reply or event in one message body (without its length).
pub fn decode_to_app(body: &[u8]) -> Result<ToApp, Malformed> {
    codec::decode(body).map_err(Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn body(framed: &[u8]) -> &[u8] {
        let n = message_len(framed).unwrap().unwrap();
        assert_eq!(n, framed.len());
        &framed[4..]
    }

    fn every_request() -> Vec<Request> {
        let p = |s: &str| ShmPath::new(Path::new(s)).unwrap();
        vec![
            Request::QueryRnic,
            Request::AllocPd,
            Request::DeallocPd { pd: PdId(3) },
            Request::CreateCq {
                depth: 64,
                ring: p("/dev/shm/iw-1-cq1"),
            },
            Request::DestroyCq { cq: CqId(1) },
            Request::CreateSrq {
                pd: PdId(1),
                depth: 8,
                ring: p("/dev/shm/iw-1-srq1"),
            },
            Request::DestroySrq { srq: SrqId(1) },
            Request::CreateQp {
                attrs: QpAttrs {
                    pd: PdId(1),
                    send_cq: CqId(2),
                    recv_cq: CqId(3),
                    srq: Some(SrqId(4)),
                    sq_depth: 5,
                    rq_depth: 6,
                    max_sge: 2,
                    max_inline: 64,
                    ird: 7,
                    ord: 8,
                },
                sq: p("/dev/shm/a"),
                rq: p("/dev/shm/b"),
            },
            Request::ModifyQp {
                qp: QpId(1),
                state: QpState::Closing,
            },
            Request::QueryQp { qp: QpId(9) },
            Request::DestroyQp { qp: QpId(9) },
            Request::RegMr {
                pd: PdId(1),
                access: 7,
                segment: 2,
                offset: 1 << 40,
                len: 4096,
            },
            Request::ReregMr {
                stag: Stag(0x101),
                access: 1,
            },
            Request::DeregMr { stag: Stag(0x101) },
            Request::AllocMw { pd: PdId(1) },
            Request::DeallocMw { stag: Stag(0x201) },
            Request::AttachSegment {
                path: p("/dev/shm/iw-1-buf"),
            },
            Request::Listen {
                port: 5000,
                settings: ConnSettings::default(),
            },
            Request::Unlisten { port: 5000 },
            Request::Connect {
                qp: QpId(3),
                remote: "10.0.0.2:5000".parse().unwrap(),
                settings: ConnSettings {
                    ird: 4,
                    ord: 8,
                    peer_to_peer: Some(Rtr {
                        write: true,
                        read: true,
                        ..Rtr::NONE
                    }),
                    rdmap_v2: true,
                    private_data: b"hello".to_vec(),
                    ..ConnSettings::default()
                },
            },
            Request::Accept {
                conn: 9,
                qp: QpId(3),
                settings: ConnSettings::default(),
            },
            Request::Reject {
                conn: 9,
                private_data: b"busy".to_vec(),
            },
            Request::Disconnect {
                conn: 9,
                abort: true,
            },
            Request::QueryCq { cq: CqId(2) },
            Request::ModifyCq {
                cq: CqId(2),
                depth: 512,
                ring: p("/dev/shm/iw-1-cq9"),
            },
            Request::ModifySrq {
                srq: SrqId(1),
                limit: 4,
            },
            Request::AllocStag { pd: PdId(1) },
            Request::DeallocStag { stag: Stag(0x301) },
            Request::QuerySrq { srq: SrqId(1) },
            Request::Placement,
        ]
    }

    fn every_message_to_app() -> Vec<ToApp> {
        let r = |r| ToApp::Reply(r);
        let e = |e| ToApp::Event(e);
        vec![
            r(Reply::Rnic(Limits::default())),
            r(Reply::Done),
            r(Reply::Id(42)),
            r(Reply::Qp {
                state: QpState::Terminate,
            }),
            r(Reply::Cq { depth: 300 }),
            r(Reply::Srq { depth: 8, limit: 2 }),
            r(Reply::Failed(Failure {
                code: ErrorCode::InvalidStag as u16,
                message: "invalid or stale STag".into(),
            })),
            e(Event::ConnectRequest(ConnectRequest {
                conn: 1,
                port: 5000,
                peer: "[fe80::1]:4000".parse().unwrap(),
                private_data: b"hi".to_vec(),
            })),
            e(Event::Established(Established {
                conn: 1,
                qp: QpId(2),
                ird: 3,
                ord: 4,
                rdmap_version: 2,
                private_data: vec![],
            })),
            e(Event::Rejected {
                conn: 1,
                private_data: b"no".to_vec(),
            }),
            e(Event::ConnectFailed {
                conn: 1,
                cause: ConnectFailure::TimedOut,
                reason: "timeout".into(),
            }),
            e(Event::Disconnected {
                conn: 1,
                reason: "Reset".into(),
            }),
            e(Event::QpTerminated(Terminated {
                qp: QpId(2),
                received: true,
                layer: 1,
                etype: 2,
                code: 3,
            })),
            e(Event::QpError { qp: QpId(2) }),
            e(Event::CqOverflow { cq: CqId(3) }),
            e(Event::SrqLimit { srq: SrqId(4) }),
        ]
    }

    /// Every message of [`every_request`] and [`every_message_to_app`], framed, one hex line
    /// each: the octets control.sock carries.
    fn every_message_hex() -> String {
        let requests = every_request();
        let to_app = every_message_to_app();
        let frames = requests
            .iter()
            .map(encode_request)
            .chain(to_app.iter().map(encode_to_app));
        let mut out = String::new();
        for f in frames {
            for b in f {
                out.push_str(&format!("{b:02x}"));
            }
            out.push('\n');
        }
        out
    }

    /// Every message encodes to the octets in `testdata/app-messages.hex`, so that no change
    /// of encoding goes unnoticed: the typed ids are their number on the wire, as when the
    /// messages carried bare `u32`s, and a change of format (`ConnectFailed`'s cause) comes
    /// with a new [`ABI_VERSION`](crate::ABI_VERSION).
    #[test]
    fn messages_encode_to_the_recorded_octets() {
        assert_eq!(
            every_message_hex(),
            include_str!("../testdata/app-messages.hex")
        );
    }

    #[test]
    fn every_request_reply_and_event_round_trips() {
        for req in every_request() {
            assert_eq!(decode_request(body(&encode_request(&req))).unwrap(), req);
        }
        for m in every_message_to_app() {
            assert_eq!(decode_to_app(body(&encode_to_app(&m))).unwrap(), m);
        }
    }

    #[test]
    fn truncated_extended_and_garbage_messages_are_errors_not_panics() {
        for req in every_request() {
            let framed = encode_request(&req);
            let b = &framed[4..];
            for cut in 0..b.len() {
                assert!(decode_request(&b[..cut]).is_err(), "{req:?} cut at {cut}");
            }
            let mut longer = b.to_vec();
            longer.push(0);
            assert_eq!(decode_request(&longer), Err(Malformed("trailing octets")));
        }
        for m in every_message_to_app() {
            let framed = encode_to_app(&m);
            let b = &framed[4..];
            for cut in 0..b.len() {
                assert!(decode_to_app(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
        }
        // A pseudo-random sweep of short bodies.
        let mut x = 0x9e37_79b9u32;
        for len in 0..64 {
            for _ in 0..64 {
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x as u8
                    })
                    .collect();
                let _ = decode_request(&v);
                let _ = decode_to_app(&v);
            }
        }
        assert!(message_len(&[0, 0, 0]).unwrap().is_none());
        assert!(message_len(&0u32.to_le_bytes()).is_err());
        assert!(message_len(&(MAX_MESSAGE as u32 + 1).to_le_bytes()).is_err());
        let good = encode_request(&Request::ModifyQp {
            qp: QpId(1),
            state: QpState::Rts,
        });
        let mut bad_state = good.clone();
        *bad_state.last_mut().unwrap() = 9;
        assert!(decode_request(&good[4..]).is_ok());
        assert_eq!(
            decode_request(&bad_state[4..]),
            Err(Malformed(
                "value out of range (unknown variant, bad path or chunk)"
            ))
        );
        // Private data that claims more octets than the message holds (4 GiB here) is
        // refused before anything is allocated for it.
        let reject = encode_request(&Request::Reject {
            conn: 9,
            private_data: b"busy".to_vec(),
        });
        let (tag_and_conn, rest) = reject[4..].split_at(2);
        assert_eq!(rest, b"\x04busy", "a length, then the octets");
        let mut huge = tag_and_conn.to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        huge.extend_from_slice(b"busy");
        assert_eq!(decode_request(&huge), Err(Malformed("message too short")));
        // A segment path with a NUL, or longer than a slot's path, is refused.
        let mut bad_path = encode_request(&Request::AttachSegment {
            path: ShmPath::new(Path::new("/dev/shm/x")).unwrap(),
        });
        *bad_path.last_mut().unwrap() = 0;
        assert_eq!(
            decode_request(&bad_path[4..]),
            Err(Malformed(
                "value out of range (unknown variant, bad path or chunk)"
            ))
        );
    }
}
