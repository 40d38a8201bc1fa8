//! The bytes of the application socket (control.sock): each message is a little-endian `u32`
//! length followed by that many octets: a tag octet and the fields in order. Decoding checks
//! every length and value and never panics; a bad message is [`Error::Protocol`] and the
//! connection stays usable for the next one.

use crate::app_server::{Reply, Request};
use crate::conn_manager::AppEvent;
use crate::error::Error;
use crate::resources::{QpAttrs, QpState};
use iwarp_abi::command::ShmPath;
use iwarp_config::Limits;
use iwarp_wire::mpa::negotiation::Settings;
use iwarp_wire::mpa::Rtr;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// The largest message either side accepts.
pub const MAX_MESSAGE: usize = 4096;

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u16(b.len() as u16);
        self.0.extend_from_slice(b);
        self
    }
    fn path(&mut self, p: &ShmPath) -> &mut Self {
        self.bytes(p.as_bytes())
    }
    fn settings(&mut self, st: &Settings) -> &mut Self {
        let p2p = st.peer_to_peer.map_or(0, |r| {
            1 | (r.send as u8) << 1 | (r.write as u8) << 2 | (r.read as u8) << 3
        });
        self.u8(st.crc as u8)
            .u8(st.markers as u8)
            .u8(st.revision)
            .u16(st.ird)
            .u16(st.ord)
            .u8(p2p)
            .u8(st.rdmap_v2 as u8)
            .bytes(&st.private_data)
    }
    fn addr(&mut self, a: &SocketAddr) -> &mut Self {
        let ip = match a.ip() {
            IpAddr::V4(v) => v.to_ipv6_mapped(),
            IpAddr::V6(v) => v,
        };
        self.0.extend_from_slice(&ip.octets());
        self.u16(a.port())
    }
}

struct R<'a>(&'a [u8]);

fn short() -> Error {
    Error::Protocol {
        what: "message too short",
    }
}

impl R<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        if self.0.len() < N {
            return Err(short());
        }
        let (a, rest) = self.0.split_at(N);
        self.0 = rest;
        let mut out = [0; N];
        out.copy_from_slice(a);
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn bytes(&mut self) -> Result<&[u8], Error> {
        let n = self.u16()? as usize;
        if self.0.len() < n {
            return Err(short());
        }
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(a)
    }
    fn path(&mut self) -> Result<ShmPath, Error> {
        use std::os::unix::ffi::OsStrExt;
        let b = self.bytes()?;
        ShmPath::new(Path::new(std::ffi::OsStr::from_bytes(b))).map_err(|_| Error::Protocol {
            what: "bad segment path",
        })
    }
    fn state(&mut self) -> Result<QpState, Error> {
        Ok(match self.u8()? {
            0 => QpState::Idle,
            1 => QpState::Rts,
            2 => QpState::Closing,
            3 => QpState::Terminate,
            4 => QpState::Error,
            _ => {
                return Err(Error::Protocol {
                    what: "unknown QP state",
                })
            }
        })
    }
    fn flag(&mut self) -> Result<bool, Error> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Error::Protocol {
                what: "boolean not 0 or 1",
            }),
        }
    }
    fn settings(&mut self) -> Result<Settings, Error> {
        let crc = self.flag()?;
        let markers = self.flag()?;
        let revision = self.u8()?;
        if !(1..=2).contains(&revision) {
            return Err(Error::Protocol {
                what: "MPA revision not 1 or 2",
            });
        }
        let ird = self.u16()?;
        let ord = self.u16()?;
        let p2p = self.u8()?;
        if p2p & !0xf != 0 {
            return Err(Error::Protocol {
                what: "bad peer-to-peer flags",
            });
        }
        let peer_to_peer = (p2p & 1 != 0).then_some(Rtr {
            send: p2p & 2 != 0,
            write: p2p & 4 != 0,
            read: p2p & 8 != 0,
        });
        let rdmap_v2 = self.flag()?;
        let private_data = self.bytes()?.to_vec();
        Ok(Settings {
            crc,
            markers,
            revision,
            ird,
            ord,
            peer_to_peer,
            rdmap_v2,
            private_data,
        })
    }
    fn addr(&mut self) -> Result<SocketAddr, Error> {
        let ip = Ipv6Addr::from(self.take::<16>()?);
        let port = self.u16()?;
        let ip = match ip.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(ip),
        };
        Ok(SocketAddr::new(ip, port))
    }
    fn end(&self) -> Result<(), Error> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Error::Protocol {
                what: "trailing octets",
            })
        }
    }
}

fn state_u8(s: QpState) -> u8 {
    match s {
        QpState::Idle => 0,
        QpState::Rts => 1,
        QpState::Closing => 2,
        QpState::Terminate => 3,
        QpState::Error => 4,
    }
}

fn framed(w: W) -> Vec<u8> {
    let mut out = (w.0.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&w.0);
    out
}

/// The length of the first whole message in `buf`, once `buf` holds it (including its
/// 4-octet length), or an error for a length above [`MAX_MESSAGE`].
pub fn message_len(buf: &[u8]) -> Result<Option<usize>, Error> {
    let Some(l) = buf.get(..4) else {
        return Ok(None);
    };
    let n = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
    if n == 0 || n > MAX_MESSAGE {
        return Err(Error::Protocol {
            what: "message length out of range",
        });
    }
    Ok((buf.len() >= 4 + n).then_some(4 + n))
}

pub fn encode_request(req: &Request) -> Vec<u8> {
    let mut w = W(Vec::new());
    match req {
        Request::QueryRnic => w.u8(1),
        Request::AllocPd => w.u8(2),
        Request::DeallocPd { pd } => w.u8(3).u32(*pd),
        Request::CreateCq { depth, ring } => w.u8(4).u32(*depth).path(ring),
        Request::DestroyCq { cq } => w.u8(5).u32(*cq),
        Request::CreateSrq { pd, depth, ring } => w.u8(6).u32(*pd).u32(*depth).path(ring),
        Request::DestroySrq { srq } => w.u8(7).u32(*srq),
        Request::CreateQp { attrs: a, sq, rq } => w
            .u8(8)
            .u32(a.pd)
            .u32(a.send_cq)
            .u32(a.recv_cq)
            .u32(a.srq.unwrap_or(0))
            .u32(a.sq_depth)
            .u32(a.rq_depth)
            .u32(a.max_sge)
            .u32(a.max_inline)
            .u16(a.ird)
            .u16(a.ord)
            .path(sq)
            .path(rq),
        Request::ModifyQp { qp, state } => w.u8(9).u32(*qp).u8(state_u8(*state)),
        Request::QueryQp { qp } => w.u8(10).u32(*qp),
        Request::DestroyQp { qp } => w.u8(11).u32(*qp),
        Request::RegMr {
            pd,
            access,
            segment,
            offset,
            len,
        } => w
            .u8(12)
            .u32(*pd)
            .u32(*access)
            .u32(*segment)
            .u64(*offset)
            .u64(*len),
        Request::ReregMr { stag, access } => w.u8(13).u32(*stag).u32(*access),
        Request::DeregMr { stag } => w.u8(14).u32(*stag),
        Request::AllocMw { pd } => w.u8(15).u32(*pd),
        Request::DeallocMw { stag } => w.u8(16).u32(*stag),
        Request::AttachSegment { path } => w.u8(17).path(path),
        Request::Listen { port, settings } => w.u8(18).u16(*port).settings(settings),
        Request::Connect {
            qp,
            remote,
            settings,
        } => w.u8(19).u32(*qp).addr(remote).settings(settings),
        Request::Accept { conn, qp, settings } => w.u8(20).u32(*conn).u32(*qp).settings(settings),
        Request::Reject { conn, private_data } => w.u8(21).u32(*conn).bytes(private_data),
        Request::Disconnect { conn, abort } => w.u8(22).u32(*conn).u8(*abort as u8),
        Request::QueryCq { cq } => w.u8(23).u32(*cq),
        Request::ModifyCq { cq, depth, ring } => w.u8(24).u32(*cq).u32(*depth).path(ring),
        Request::ModifySrq { srq, limit } => w.u8(25).u32(*srq).u32(*limit),
        Request::AllocStag { pd } => w.u8(26).u32(*pd),
        Request::DeallocStag { stag } => w.u8(27).u32(*stag),
        Request::QuerySrq { srq } => w.u8(28).u32(*srq),
        Request::Placement => w.u8(29),
        Request::RegMrVa {
            pd,
            access,
            segment,
            offset,
            len,
            va,
        } => w
            .u8(30)
            .u32(*pd)
            .u32(*access)
            .u32(*segment)
            .u64(*offset)
            .u64(*len)
            .u64(*va),
    };
    framed(w)
}

/// Decodes one message body (without its length prefix).
pub fn decode_request(body: &[u8]) -> Result<Request, Error> {
    let mut r = R(body);
    let req = match r.u8()? {
        1 => Request::QueryRnic,
        2 => Request::AllocPd,
        3 => Request::DeallocPd { pd: r.u32()? },
        4 => Request::CreateCq {
            depth: r.u32()?,
            ring: r.path()?,
        },
        5 => Request::DestroyCq { cq: r.u32()? },
        6 => Request::CreateSrq {
            pd: r.u32()?,
            depth: r.u32()?,
            ring: r.path()?,
        },
        7 => Request::DestroySrq { srq: r.u32()? },
        8 => {
            let attrs = QpAttrs {
                pd: r.u32()?,
                send_cq: r.u32()?,
                recv_cq: r.u32()?,
                // S-RQ ids start at 1; 0 means none.
                srq: Some(r.u32()?).filter(|&s| s != 0),
                sq_depth: r.u32()?,
                rq_depth: r.u32()?,
                max_sge: r.u32()?,
                max_inline: r.u32()?,
                ird: r.u16()?,
                ord: r.u16()?,
            };
            Request::CreateQp {
                attrs,
                sq: r.path()?,
                rq: r.path()?,
            }
        }
        9 => Request::ModifyQp {
            qp: r.u32()?,
            state: r.state()?,
        },
        10 => Request::QueryQp { qp: r.u32()? },
        11 => Request::DestroyQp { qp: r.u32()? },
        12 => Request::RegMr {
            pd: r.u32()?,
            access: r.u32()?,
            segment: r.u32()?,
            offset: r.u64()?,
            len: r.u64()?,
        },
        30 => Request::RegMrVa {
            pd: r.u32()?,
            access: r.u32()?,
            segment: r.u32()?,
            offset: r.u64()?,
            len: r.u64()?,
            va: r.u64()?,
        },
        13 => Request::ReregMr {
            stag: r.u32()?,
            access: r.u32()?,
        },
        14 => Request::DeregMr { stag: r.u32()? },
        15 => Request::AllocMw { pd: r.u32()? },
        16 => Request::DeallocMw { stag: r.u32()? },
        17 => Request::AttachSegment { path: r.path()? },
        18 => Request::Listen {
            port: r.u16()?,
            settings: r.settings()?,
        },
        19 => Request::Connect {
            qp: r.u32()?,
            remote: r.addr()?,
            settings: r.settings()?,
        },
        20 => Request::Accept {
            conn: r.u32()?,
            qp: r.u32()?,
            settings: r.settings()?,
        },
        21 => Request::Reject {
            conn: r.u32()?,
            private_data: r.bytes()?.to_vec(),
        },
        22 => Request::Disconnect {
            conn: r.u32()?,
            abort: r.flag()?,
        },
        23 => Request::QueryCq { cq: r.u32()? },
        24 => Request::ModifyCq {
            cq: r.u32()?,
            depth: r.u32()?,
            ring: r.path()?,
        },
        25 => Request::ModifySrq {
            srq: r.u32()?,
            limit: r.u32()?,
        },
        26 => Request::AllocStag { pd: r.u32()? },
        27 => Request::DeallocStag { stag: r.u32()? },
        28 => Request::QuerySrq { srq: r.u32()? },
        29 => Request::Placement,
        _ => {
            return Err(Error::Protocol {
                what: "unknown request tag",
            })
        }
    };
    r.end()?;
    Ok(req)
}

/// Encodes a reply. A failure travels as its [`Error::code`] and its message.
pub fn encode_reply(rep: &Reply) -> Vec<u8> {
    let mut w = W(Vec::new());
    match rep {
        Reply::Rnic(l) => {
            w.u8(1);
            for v in [
                l.max_qp,
                l.max_cq,
                l.max_cqe,
                l.max_srq,
                l.max_mr,
                l.max_mw,
                l.max_pd,
                l.max_sq_depth,
                l.max_rq_depth,
                l.max_sge,
                l.max_inline,
            ] {
                w.u32(v);
            }
            w.u16(l.max_ird).u16(l.max_ord)
        }
        Reply::Done => w.u8(2),
        Reply::Id(id) => w.u8(3).u32(*id),
        Reply::Qp { state } => w.u8(4).u8(state_u8(*state)),
        Reply::Cq { depth } => w.u8(7).u32(*depth),
        Reply::Srq { depth, limit } => w.u8(8).u32(*depth).u32(*limit),
        Reply::Failed(e) => {
            let msg = e.to_string();
            let msg = &msg.as_bytes()[..msg.len().min(1024)];
            w.u8(5).u16(e.code()).bytes(msg)
        }
    };
    framed(w)
}

/// Encodes an unsolicited connection event (tag 6 in the reply stream).
pub fn encode_event(e: &AppEvent) -> Vec<u8> {
    let mut w = W(Vec::new());
    w.u8(6);
    match e {
        AppEvent::ConnectRequest {
            conn,
            port,
            peer,
            private_data,
        } => w.u8(1).u32(*conn).u16(*port).addr(peer).bytes(private_data),
        AppEvent::Established {
            conn,
            qp,
            ird,
            ord,
            rdmap_version,
            private_data,
        } => w
            .u8(2)
            .u32(*conn)
            .u32(*qp)
            .u16(*ird)
            .u16(*ord)
            .u8(*rdmap_version)
            .bytes(private_data),
        AppEvent::Rejected { conn, private_data } => w.u8(3).u32(*conn).bytes(private_data),
        AppEvent::Failed { conn, reason } => {
            w.u8(4).u32(*conn).bytes(reason.to_string().as_bytes())
        }
        AppEvent::Disconnected { conn, reason } => {
            w.u8(5).u32(*conn).bytes(format!("{reason:?}").as_bytes())
        }
        AppEvent::QpTerminated {
            qp,
            received,
            layer,
            etype,
            code,
        } => w
            .u8(7)
            .u32(*qp)
            .u8(*received as u8)
            .u8(*layer)
            .u8(*etype)
            .u8(*code),
        AppEvent::QpError { qp } => w.u8(8).u32(*qp),
        AppEvent::CqOverflow { cq } => w.u8(9).u32(*cq),
        AppEvent::SrqLimit { srq } => w.u8(10).u32(*srq),
    };
    framed(w)
}

/// A connection request from a peer (on a port the application listens on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    pub conn: u32,
    pub port: u16,
    pub peer: SocketAddr,
    pub private_data: Vec<u8>,
}

/// A connection in RTS, with what MPA negotiation settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Established {
    pub conn: u32,
    pub qp: u32,
    /// Inbound Read/atomic requests this side accepts at once.
    pub ird: u16,
    /// Outbound Read/atomic requests this side may have outstanding (≤ the peer's IRD).
    pub ord: u16,
    pub rdmap_version: u8,
    /// The peer's private data.
    pub private_data: Vec<u8>,
}

/// A connection or asynchronous event as the application sees it (Verbs section 8.3.3;
/// RFC 5040 section 7 for the Terminate). `iwarp-verbs` hands these out as its `Event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    ConnectRequest(ConnectRequest),
    Established(Established),
    Rejected {
        conn: u32,
        private_data: Vec<u8>,
    },
    ConnectFailed {
        conn: u32,
        reason: String,
    },
    Disconnected {
        conn: u32,
        reason: String,
    },
    /// A Terminate was sent (`received == false`) or received on `qp`, with its cause.
    QpTerminated {
        qp: u32,
        received: bool,
        layer: u8,
        etype: u8,
        code: u8,
    },
    QpError {
        qp: u32,
    },
    CqOverflow {
        cq: u32,
    },
    SrqLimit {
        srq: u32,
    },
}

/// A decoded reply as the application sees it: failures as code and text.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientReply {
    Rnic(Limits),
    Done,
    Id(u32),
    Qp { state: QpState },
    Cq { depth: u32 },
    Srq { depth: u32, limit: u32 },
    Failed { code: u16, message: String },
    Event(ClientEvent),
}

pub fn decode_reply(body: &[u8]) -> Result<ClientReply, Error> {
    let mut r = R(body);
    let rep = match r.u8()? {
        1 => {
            let mut v = [0u32; 11];
            for x in &mut v {
                *x = r.u32()?;
            }
            ClientReply::Rnic(Limits {
                max_qp: v[0],
                max_cq: v[1],
                max_cqe: v[2],
                max_srq: v[3],
                max_mr: v[4],
                max_mw: v[5],
                max_pd: v[6],
                max_sq_depth: v[7],
                max_rq_depth: v[8],
                max_sge: v[9],
                max_inline: v[10],
                max_ird: r.u16()?,
                max_ord: r.u16()?,
            })
        }
        2 => ClientReply::Done,
        3 => ClientReply::Id(r.u32()?),
        4 => ClientReply::Qp { state: r.state()? },
        7 => ClientReply::Cq { depth: r.u32()? },
        8 => ClientReply::Srq {
            depth: r.u32()?,
            limit: r.u32()?,
        },
        5 => ClientReply::Failed {
            code: r.u16()?,
            message: String::from_utf8_lossy(r.bytes()?).into_owned(),
        },
        6 => ClientReply::Event(match r.u8()? {
            1 => ClientEvent::ConnectRequest(ConnectRequest {
                conn: r.u32()?,
                port: r.u16()?,
                peer: r.addr()?,
                private_data: r.bytes()?.to_vec(),
            }),
            2 => ClientEvent::Established(Established {
                conn: r.u32()?,
                qp: r.u32()?,
                ird: r.u16()?,
                ord: r.u16()?,
                rdmap_version: r.u8()?,
                private_data: r.bytes()?.to_vec(),
            }),
            3 => ClientEvent::Rejected {
                conn: r.u32()?,
                private_data: r.bytes()?.to_vec(),
            },
            4 => ClientEvent::ConnectFailed {
                conn: r.u32()?,
                reason: String::from_utf8_lossy(r.bytes()?).into_owned(),
            },
            5 => ClientEvent::Disconnected {
                conn: r.u32()?,
                reason: String::from_utf8_lossy(r.bytes()?).into_owned(),
            },
            7 => ClientEvent::QpTerminated {
                qp: r.u32()?,
                received: r.u8()? != 0,
                layer: r.u8()?,
                etype: r.u8()?,
                code: r.u8()?,
            },
            8 => ClientEvent::QpError { qp: r.u32()? },
            9 => ClientEvent::CqOverflow { cq: r.u32()? },
            10 => ClientEvent::SrqLimit { srq: r.u32()? },
            _ => {
                return Err(Error::Protocol {
                    what: "unknown event kind",
                })
            }
        }),
        _ => {
            return Err(Error::Protocol {
                what: "unknown reply tag",
            })
        }
    };
    r.end()?;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(framed: &[u8]) -> &[u8] {
        let n = message_len(framed).unwrap().unwrap();
        assert_eq!(n, framed.len());
        &framed[4..]
    }

    fn all_requests() -> Vec<Request> {
        let p = |s: &str| ShmPath::new(Path::new(s)).unwrap();
        vec![
            Request::QueryRnic,
            Request::AllocPd,
            Request::DeallocPd { pd: 3 },
            Request::CreateCq {
                depth: 64,
                ring: p("/dev/shm/iw-1-cq1"),
            },
            Request::DestroyCq { cq: 1 },
            Request::CreateSrq {
                pd: 1,
                depth: 8,
                ring: p("/dev/shm/iw-1-srq1"),
            },
            Request::DestroySrq { srq: 1 },
            Request::CreateQp {
                attrs: QpAttrs {
                    pd: 1,
                    send_cq: 2,
                    recv_cq: 3,
                    srq: Some(4),
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
                qp: 1,
                state: QpState::Closing,
            },
            Request::QueryQp { qp: 9 },
            Request::DestroyQp { qp: 9 },
            Request::RegMr {
                pd: 1,
                access: 7,
                segment: 2,
                offset: 1 << 40,
                len: 4096,
            },
            Request::RegMrVa {
                pd: 1,
                access: 7,
                segment: 2,
                offset: 0x123,
                len: 4096,
                va: 0x7fff_0000_1123,
            },
            Request::ReregMr {
                stag: 0x101,
                access: 1,
            },
            Request::DeregMr { stag: 0x101 },
            Request::AllocMw { pd: 1 },
            Request::DeallocMw { stag: 0x201 },
            Request::AttachSegment {
                path: p("/dev/shm/iw-1-buf"),
            },
            Request::Listen {
                port: 5000,
                settings: Settings::default(),
            },
            Request::Connect {
                qp: 3,
                remote: "10.0.0.2:5000".parse().unwrap(),
                settings: Settings {
                    ird: 4,
                    ord: 8,
                    peer_to_peer: Some(Rtr {
                        write: true,
                        read: true,
                        ..Rtr::NONE
                    }),
                    rdmap_v2: true,
                    private_data: b"hello".to_vec(),
                    ..Settings::default()
                },
            },
            Request::Accept {
                conn: 9,
                qp: 3,
                settings: Settings::default(),
            },
            Request::Reject {
                conn: 9,
                private_data: b"busy".to_vec(),
            },
            Request::Disconnect {
                conn: 9,
                abort: true,
            },
            Request::QueryCq { cq: 2 },
            Request::ModifyCq {
                cq: 2,
                depth: 512,
                ring: p("/dev/shm/iw-1-cq9"),
            },
            Request::ModifySrq { srq: 1, limit: 4 },
            Request::AllocStag { pd: 1 },
            Request::DeallocStag { stag: 0x301 },
            Request::QuerySrq { srq: 1 },
            Request::Placement,
        ]
    }

    #[test]
    fn every_request_and_reply_round_trips() {
        for req in all_requests() {
            assert_eq!(decode_request(body(&encode_request(&req))).unwrap(), req);
        }
        let l = Limits::default();
        assert_eq!(
            decode_reply(body(&encode_reply(&Reply::Rnic(l.clone())))).unwrap(),
            ClientReply::Rnic(l)
        );
        assert_eq!(
            decode_reply(body(&encode_reply(&Reply::Id(42)))).unwrap(),
            ClientReply::Id(42)
        );
        assert_eq!(
            decode_reply(body(&encode_reply(&Reply::Cq { depth: 300 }))).unwrap(),
            ClientReply::Cq { depth: 300 }
        );
        assert_eq!(
            decode_reply(body(&encode_reply(&Reply::Srq { depth: 8, limit: 2 }))).unwrap(),
            ClientReply::Srq { depth: 8, limit: 2 }
        );
        let e = Error::InvalidStag { stag: 5 };
        assert_eq!(
            decode_reply(body(&encode_reply(&Reply::Failed(e.clone())))).unwrap(),
            ClientReply::Failed {
                code: e.code(),
                message: e.to_string()
            }
        );
    }

    #[test]
    fn truncated_extended_and_garbage_messages_are_errors_not_panics() {
        for req in all_requests() {
            let framed = encode_request(&req);
            let b = &framed[4..];
            for cut in 0..b.len() {
                assert!(decode_request(&b[..cut]).is_err(), "{req:?} cut at {cut}");
            }
            let mut longer = b.to_vec();
            longer.push(0);
            assert!(decode_request(&longer).is_err(), "trailing octet accepted");
        }
        // Every single-octet tag and a pseudo-random sweep of short bodies.
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
                let _ = decode_reply(&v);
            }
        }
        assert!(message_len(&[0, 0, 0]).unwrap().is_none());
        assert!(message_len(&0u32.to_le_bytes()).is_err());
        assert!(message_len(&(MAX_MESSAGE as u32 + 1).to_le_bytes()).is_err());
        let mut bad_state = encode_request(&Request::ModifyQp {
            qp: 1,
            state: QpState::Rts,
        });
        *bad_state.last_mut().unwrap() = 9;
        assert_eq!(
            decode_request(&bad_state[4..]),
            Err(Error::Protocol {
                what: "unknown QP state"
            })
        );
    }
}
