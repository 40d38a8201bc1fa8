//! The control <-> daemon contract: commands (iwarp-control -> iwarpd) and upcalls (replies
//! and events, iwarpd -> iwarp-control), carried in fixed-size [`Msg`] slots of the two rings
//! of [`crate::daemon_shm`].
//!
//! A [`Msg`] is `#[repr(C)]`: a `u32` tag, a `u32` payload length, a `u64` request id and
//! [`MSG_PAYLOAD`] octets. There is no C union: [`Command`] and [`Upcall`] are Rust enums that
//! [`Command::encode`] / [`Command::decode`] write and read field by field, little-endian, at
//! fixed offsets, so a corrupted slot decodes to [`Error::Decode`] and never to a bad value.
//!
//! Segment paths travel as a [`ShmPath`]: up to [`SHM_PATH_LEN`] octets, NUL-padded (the size
//! of `sun_path`), naming a file the receiver opens with [`crate::segment::Segment::open`].
//! Ids (QP number, CQ, S-RQ, PD, STag, connection) are chosen by iwarp-control; iwarpd maps
//! them to its engine's ids. `req_id` is chosen by control and echoed in the [`Upcall::Reply`].

use crate::error::Error;
use crate::ring::Slot;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// Octets of a path in a message (as `sockaddr_un::sun_path`).
pub const SHM_PATH_LEN: usize = 108;
/// The most MPA / private-data octets one `TcpSend` or `TcpBytes` carries (RFC 5044 limits
/// private data to 512 octets, so one MPA Request/Reply fits in two messages at most).
pub const MAX_CHUNK: usize = 512;
/// Payload octets of a [`Msg`].
pub const MSG_PAYLOAD: usize = 624;
/// "No S-RQ" / "no id" in id fields.
pub const NO_ID: u32 = u32::MAX;

/// One ring slot: 640 octets, ten cache lines.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg {
    pub tag: u32,
    pub len: u32,
    pub req_id: u64,
    pub payload: [u8; MSG_PAYLOAD],
}
const _: () = assert!(core::mem::size_of::<Msg>() == 640);
const _: () = assert!(core::mem::align_of::<Msg>() == 8);

// SAFETY: integers and an octet array: every bit pattern is valid.
unsafe impl Slot for Msg {}

impl Default for Msg {
    fn default() -> Msg {
        Msg {
            tag: 0,
            len: 0,
            req_id: 0,
            payload: [0; MSG_PAYLOAD],
        }
    }
}

/// A NUL-padded path of at most [`SHM_PATH_LEN`] octets (no NUL inside).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ShmPath([u8; SHM_PATH_LEN]);

impl ShmPath {
    pub fn new(path: &Path) -> Result<ShmPath, Error> {
        use std::os::unix::ffi::OsStrExt;
        let b = path.as_os_str().as_bytes();
        if b.is_empty() || b.len() > SHM_PATH_LEN || b.contains(&0) {
            return Err(Error::InvalidName);
        }
        let mut a = [0; SHM_PATH_LEN];
        a[..b.len()].copy_from_slice(b);
        Ok(ShmPath(a))
    }
    pub fn as_bytes(&self) -> &[u8] {
        let n = self.0.iter().position(|&c| c == 0).unwrap_or(SHM_PATH_LEN);
        &self.0[..n]
    }
    pub fn to_path(&self) -> PathBuf {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(self.as_bytes()))
    }
}

impl core::fmt::Debug for ShmPath {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", self.to_path())
    }
}

/// Up to [`MAX_CHUNK`] octets of a TCP byte stream.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    len: u16,
    data: [u8; MAX_CHUNK],
}

impl Chunk {
    /// The first `min(bytes.len(), MAX_CHUNK)` octets of `bytes`; the caller sends the rest in
    /// further chunks (see [`Chunk::split`]).
    pub fn new(bytes: &[u8]) -> Chunk {
        let n = bytes.len().min(MAX_CHUNK);
        let mut data = [0; MAX_CHUNK];
        data[..n].copy_from_slice(&bytes[..n]);
        Chunk {
            len: n as u16,
            data,
        }
    }
    /// `bytes` cut into chunks, in order.
    pub fn split(bytes: &[u8]) -> impl Iterator<Item = Chunk> + '_ {
        bytes.chunks(MAX_CHUNK).map(Chunk::new)
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.data[..self.len as usize]
    }
}

impl core::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Chunk({} octets)", self.len)
    }
}

/// QP states as the Verbs spec names them (section 6.2), for [`Command::ModifyQp`].
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    Idle = 0,
    Rts = 1,
    Closing = 2,
    Terminate = 3,
    Error = 4,
}

impl TryFrom<u8> for QpState {
    type Error = Error;
    fn try_from(v: u8) -> Result<QpState, Error> {
        use QpState::*;
        [Idle, Rts, Closing, Terminate, Error]
            .get(v as usize)
            .copied()
            .ok_or(crate::Error::Decode {
                tag: v as u32,
                what: "unknown QP state",
            })
    }
}

/// The Ready-To-Receive message peer-to-peer mode agreed on (RFC 6581 section 3).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtrKind {
    None = 0,
    ZeroLengthSend = 1,
    ZeroLengthWrite = 2,
    ZeroLengthRead = 3,
}

impl TryFrom<u8> for RtrKind {
    type Error = Error;
    fn try_from(v: u8) -> Result<RtrKind, Error> {
        use RtrKind::*;
        [None, ZeroLengthSend, ZeroLengthWrite, ZeroLengthRead]
            .get(v as usize)
            .copied()
            .ok_or(Error::Decode {
                tag: v as u32,
                what: "unknown RTR kind",
            })
    }
}

/// What the MPA negotiation (RFC 5044 section 7, RFC 6581) settled, for [`Command::QpRts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsParams {
    /// CRC on what we send / on what we receive (RFC 5044 section 7.1: each side may ask).
    pub crc_tx: bool,
    pub crc_rx: bool,
    /// Markers on what we send / receive.
    pub markers_tx: bool,
    pub markers_rx: bool,
    /// Stream position of the first octet after the MPA Request/Reply, from which marker
    /// positions count (RFC 5044 section 4.3); 0 when markers start right after the frames.
    pub marker_offset: u32,
    /// MPA revision negotiated (1 or 2).
    pub mpa_rev: u8,
    /// Inbound Read/atomic queue depth we accept.
    pub ird: u16,
    /// Outbound Read/atomic requests we may have outstanding (≤ the peer's IRD).
    pub ord: u16,
    pub rtr: RtrKind,
    /// Whether we are the peer-to-peer initiator that sends the RTR message.
    pub rtr_initiator: bool,
    /// RDMAP version 1, or 2 when both sides asked (V2 draft).
    pub rdmap_version: u8,
    /// TCP MSS: every FPDU fits one segment (RFC 5044 section 8).
    pub mss: u32,
}

/// Requests iwarp-control sends to iwarpd.
// Values of this enum are built and consumed one at a time next to a 640-octet slot; boxing
// the large variants would allocate per message for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    AllocPd {
        pd: u32,
    },
    DeallocPd {
        pd: u32,
    },
    /// Map a CQ ring segment (a ring of [`crate::wqe::Cqe`]) and create the CQ.
    CreateCq {
        cq: u32,
        depth: u32,
        ring: ShmPath,
    },
    DestroyCq {
        cq: u32,
    },
    /// Resize CQ (Verbs Modify CQ, section 5.3.3): completions go to the new ring segment from
    /// now on; the application drains what the old ring still holds. Refused with
    /// [`reply_status::IN_USE`] when more completions are present than `depth` holds.
    ResizeCq {
        cq: u32,
        depth: u32,
        ring: ShmPath,
    },
    /// Map an S-RQ ring segment (a ring of [`crate::wqe::RecvWqe`]).
    CreateSrq {
        srq: u32,
        pd: u32,
        depth: u32,
        ring: ShmPath,
    },
    /// Arm the S-RQ limit event (Verbs section 8.4).
    ArmSrq {
        srq: u32,
        limit: u32,
    },
    DestroySrq {
        srq: u32,
    },
    /// Map the SQ ring (of [`crate::wqe::SendWqe`]) and RQ ring (of [`crate::wqe::RecvWqe`];
    /// unused with an S-RQ) and create the QP; `srq` is [`NO_ID`] without one.
    CreateQp {
        qp: u32,
        pd: u32,
        send_cq: u32,
        recv_cq: u32,
        srq: u32,
        sq_depth: u32,
        rq_depth: u32,
        sq: ShmPath,
        rq: ShmPath,
    },
    DestroyQp {
        qp: u32,
    },
    ModifyQp {
        qp: u32,
        state: QpState,
    },
    /// Register `len` octets at `offset` of the data area of segment `segment` as region
    /// `stag` (control chose it: index + key), VA-based at `va` or zero-based.
    RegisterMr {
        stag: u32,
        pd: u32,
        access: u32,
        zero_based: bool,
        offset: u64,
        len: u64,
        va: u64,
        segment: ShmPath,
    },
    DeregisterMr {
        stag: u32,
    },
    AllocMw {
        stag: u32,
        pd: u32,
    },
    DeallocMw {
        stag: u32,
    },
    /// Reserve `stag` for Fast-Register work requests of `pd`.
    AllocFastRegStag {
        stag: u32,
        pd: u32,
    },
    TcpListen {
        port: u16,
        backlog: u16,
    },
    TcpUnlisten {
        port: u16,
    },
    /// Open connection `conn` (control's id) for `qp` to `remote`.
    TcpConnect {
        conn: u32,
        qp: u32,
        remote: SocketAddr,
    },
    /// Accept an incoming connection (from [`Upcall::TcpIncoming`]) for `qp`.
    TcpAccept {
        conn: u32,
        qp: u32,
    },
    /// Bytes to send on a connection not yet in RTS (MPA frames).
    TcpSend {
        conn: u32,
        bytes: Chunk,
    },
    TcpClose {
        conn: u32,
    },
    TcpAbort {
        conn: u32,
    },
    /// MPA is done: from now on the connection's byte stream belongs to the QP's engine.
    QpRts {
        qp: u32,
        conn: u32,
        params: RtsParams,
    },
    Shutdown,
}

/// Why a TCP connection ended.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// FIN exchanged.
    Graceful = 0,
    /// RST received or sent.
    Reset = 1,
    /// Retransmissions or keep-alives gave up.
    Timeout = 2,
    /// Connect failed (refused or unreachable).
    Refused = 3,
    /// The daemon is shutting down.
    Shutdown = 4,
}

impl TryFrom<u8> for CloseReason {
    type Error = Error;
    fn try_from(v: u8) -> Result<CloseReason, Error> {
        use CloseReason::*;
        [Graceful, Reset, Timeout, Refused, Shutdown]
            .get(v as usize)
            .copied()
            .ok_or(Error::Decode {
                tag: v as u32,
                what: "unknown close reason",
            })
    }
}

/// Reply statuses ([`Upcall::Reply`]). Values are ABI.
pub mod reply_status {
    pub const OK: u32 = 0;
    /// An id named in the command does not exist.
    pub const NO_SUCH_ID: u32 = 1;
    /// The id exists already.
    pub const EXISTS: u32 = 2;
    /// A segment could not be opened or mapped, or is too small / of the wrong kind.
    pub const BAD_SEGMENT: u32 = 3;
    /// The engine refused (invalid state, transition, parameters).
    pub const INVALID: u32 = 4;
    pub const NO_RESOURCES: u32 = 5;
    /// The slot could not be decoded.
    pub const BAD_COMMAND: u32 = 6;
    /// Socket-level failure (address in use, ...).
    pub const NETWORK: u32 = 7;
    /// The resource is still in use: a region with bound windows or fast-registered STags,
    /// a CQ holding more completions than the size asked for.
    pub const IN_USE: u32 = 8;
}

/// Replies and events iwarpd sends to iwarp-control.
#[allow(clippy::large_enum_variant)] // as for Command
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upcall {
    /// The answer to the command with `req_id` (in [`Msg::req_id`]); `value` carries a result
    /// where one exists (e.g. the bound port).
    Reply {
        req_id: u64,
        status: u32,
        value: u64,
    },
    TcpEstablished {
        conn: u32,
    },
    TcpIncoming {
        conn: u32,
        local_port: u16,
        peer: SocketAddr,
    },
    /// Bytes received on a connection not yet in RTS.
    TcpBytes {
        conn: u32,
        bytes: Chunk,
    },
    TcpClosed {
        conn: u32,
        reason: CloseReason,
    },
    /// A Terminate was received or sent on `qp` (RFC 5040 section 7).
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
    Heartbeat {
        generation: u64,
        counter: u64,
    },
}

// Tags. Commands 1.., upcalls 0x100.. so a slot on the wrong ring is refused.
const T_ALLOC_PD: u32 = 1;
const T_DEALLOC_PD: u32 = 2;
const T_CREATE_CQ: u32 = 3;
const T_DESTROY_CQ: u32 = 4;
const T_CREATE_SRQ: u32 = 5;
const T_ARM_SRQ: u32 = 6;
const T_DESTROY_SRQ: u32 = 7;
const T_CREATE_QP: u32 = 8;
const T_DESTROY_QP: u32 = 9;
const T_MODIFY_QP: u32 = 10;
const T_REGISTER_MR: u32 = 11;
const T_DEREGISTER_MR: u32 = 12;
const T_ALLOC_MW: u32 = 13;
const T_DEALLOC_MW: u32 = 14;
const T_ALLOC_FASTREG: u32 = 15;
const T_TCP_LISTEN: u32 = 16;
const T_TCP_UNLISTEN: u32 = 17;
const T_TCP_CONNECT: u32 = 18;
const T_TCP_ACCEPT: u32 = 19;
const T_TCP_SEND: u32 = 20;
const T_TCP_CLOSE: u32 = 21;
const T_TCP_ABORT: u32 = 22;
const T_QP_RTS: u32 = 23;
const T_SHUTDOWN: u32 = 24;
const T_RESIZE_CQ: u32 = 25;

const U_REPLY: u32 = 0x100;
const U_ESTABLISHED: u32 = 0x101;
const U_INCOMING: u32 = 0x102;
const U_BYTES: u32 = 0x103;
const U_CLOSED: u32 = 0x104;
const U_TERMINATED: u32 = 0x105;
const U_QP_ERROR: u32 = 0x106;
const U_CQ_OVERFLOW: u32 = 0x107;
const U_SRQ_LIMIT: u32 = 0x108;
const U_HEARTBEAT: u32 = 0x109;

/// Writes fields in order; the payload is large enough for every variant (checked by tests).
struct W<'a> {
    buf: &'a mut [u8; MSG_PAYLOAD],
    at: usize,
}

impl W<'_> {
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
        self
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes(&[v])
    }
    fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(v as u8)
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    fn path(&mut self, p: &ShmPath) -> &mut Self {
        self.bytes(&p.0)
    }
    fn chunk(&mut self, c: &Chunk) -> &mut Self {
        self.u16(c.len).bytes(&c.data)
    }
    fn addr(&mut self, a: &SocketAddr) -> &mut Self {
        let (fam, ip) = match a.ip() {
            IpAddr::V4(v) => (4, v.to_ipv6_mapped().octets()),
            IpAddr::V6(v) => (6, v.octets()),
        };
        self.u8(fam).bytes(&ip).u16(a.port())
    }
}

/// Reads fields in order; every read is bounds-checked against `len`.
struct R<'a> {
    buf: &'a [u8],
    at: usize,
    tag: u32,
}

impl R<'_> {
    fn err(&self, what: &'static str) -> Error {
        Error::Decode {
            tag: self.tag,
            what,
        }
    }
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let s = self
            .buf
            .get(self.at..self.at + N)
            .ok_or(self.err("payload too short"))?;
        self.at += N;
        let mut a = [0; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.bytes::<1>()?[0])
    }
    fn bool(&mut self) -> Result<bool, Error> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.err("boolean not 0 or 1")),
        }
    }
    fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_le_bytes(self.bytes()?))
    }
    fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn path(&mut self) -> Result<ShmPath, Error> {
        let p = ShmPath(self.bytes()?);
        let n = p.as_bytes().len();
        if n == 0 || p.0[n..].iter().any(|&c| c != 0) {
            return Err(self.err("malformed segment path"));
        }
        Ok(p)
    }
    fn chunk(&mut self) -> Result<Chunk, Error> {
        let len = self.u16()?;
        let data = self.bytes()?;
        if len as usize > MAX_CHUNK {
            return Err(self.err("chunk longer than MAX_CHUNK"));
        }
        Ok(Chunk { len, data })
    }
    fn addr(&mut self) -> Result<SocketAddr, Error> {
        let fam = self.u8()?;
        let ip = Ipv6Addr::from(self.bytes::<16>()?);
        let port = self.u16()?;
        let ip = match fam {
            4 => IpAddr::V4(
                ip.to_ipv4_mapped()
                    .ok_or(self.err("IPv4 address not v4-mapped"))?,
            ),
            6 => IpAddr::V6(ip),
            _ => return Err(self.err("unknown address family")),
        };
        Ok(SocketAddr::new(ip, port))
    }
}

fn msg(tag: u32, req_id: u64, f: impl FnOnce(&mut W)) -> Msg {
    let mut m = Msg {
        tag,
        req_id,
        ..Msg::default()
    };
    let mut w = W {
        buf: &mut m.payload,
        at: 0,
    };
    f(&mut w);
    m.len = w.at as u32;
    m
}

fn reader(m: &Msg) -> Result<R<'_>, Error> {
    let len = m.len as usize;
    if len > MSG_PAYLOAD {
        return Err(Error::Decode {
            tag: m.tag,
            what: "payload length above MSG_PAYLOAD",
        });
    }
    Ok(R {
        buf: &m.payload[..len],
        at: 0,
        tag: m.tag,
    })
}

impl Command {
    /// The slot for this command with request id `req_id`.
    pub fn encode(&self, req_id: u64) -> Msg {
        use Command::*;
        match *self {
            AllocPd { pd } => msg(T_ALLOC_PD, req_id, |w| {
                w.u32(pd);
            }),
            DeallocPd { pd } => msg(T_DEALLOC_PD, req_id, |w| {
                w.u32(pd);
            }),
            CreateCq { cq, depth, ring } => msg(T_CREATE_CQ, req_id, |w| {
                w.u32(cq).u32(depth).path(&ring);
            }),
            DestroyCq { cq } => msg(T_DESTROY_CQ, req_id, |w| {
                w.u32(cq);
            }),
            ResizeCq { cq, depth, ring } => msg(T_RESIZE_CQ, req_id, |w| {
                w.u32(cq).u32(depth).path(&ring);
            }),
            CreateSrq {
                srq,
                pd,
                depth,
                ring,
            } => msg(T_CREATE_SRQ, req_id, |w| {
                w.u32(srq).u32(pd).u32(depth).path(&ring);
            }),
            ArmSrq { srq, limit } => msg(T_ARM_SRQ, req_id, |w| {
                w.u32(srq).u32(limit);
            }),
            DestroySrq { srq } => msg(T_DESTROY_SRQ, req_id, |w| {
                w.u32(srq);
            }),
            CreateQp {
                qp,
                pd,
                send_cq,
                recv_cq,
                srq,
                sq_depth,
                rq_depth,
                sq,
                rq,
            } => msg(T_CREATE_QP, req_id, |w| {
                w.u32(qp)
                    .u32(pd)
                    .u32(send_cq)
                    .u32(recv_cq)
                    .u32(srq)
                    .u32(sq_depth)
                    .u32(rq_depth)
                    .path(&sq)
                    .path(&rq);
            }),
            DestroyQp { qp } => msg(T_DESTROY_QP, req_id, |w| {
                w.u32(qp);
            }),
            ModifyQp { qp, state } => msg(T_MODIFY_QP, req_id, |w| {
                w.u32(qp).u8(state as u8);
            }),
            RegisterMr {
                stag,
                pd,
                access,
                zero_based,
                offset,
                len,
                va,
                segment,
            } => msg(T_REGISTER_MR, req_id, |w| {
                w.u32(stag)
                    .u32(pd)
                    .u32(access)
                    .bool(zero_based)
                    .u64(offset)
                    .u64(len)
                    .u64(va)
                    .path(&segment);
            }),
            DeregisterMr { stag } => msg(T_DEREGISTER_MR, req_id, |w| {
                w.u32(stag);
            }),
            AllocMw { stag, pd } => msg(T_ALLOC_MW, req_id, |w| {
                w.u32(stag).u32(pd);
            }),
            DeallocMw { stag } => msg(T_DEALLOC_MW, req_id, |w| {
                w.u32(stag);
            }),
            AllocFastRegStag { stag, pd } => msg(T_ALLOC_FASTREG, req_id, |w| {
                w.u32(stag).u32(pd);
            }),
            TcpListen { port, backlog } => msg(T_TCP_LISTEN, req_id, |w| {
                w.u16(port).u16(backlog);
            }),
            TcpUnlisten { port } => msg(T_TCP_UNLISTEN, req_id, |w| {
                w.u16(port);
            }),
            TcpConnect { conn, qp, remote } => msg(T_TCP_CONNECT, req_id, |w| {
                w.u32(conn).u32(qp).addr(&remote);
            }),
            TcpAccept { conn, qp } => msg(T_TCP_ACCEPT, req_id, |w| {
                w.u32(conn).u32(qp);
            }),
            TcpSend { conn, bytes } => msg(T_TCP_SEND, req_id, |w| {
                w.u32(conn).chunk(&bytes);
            }),
            TcpClose { conn } => msg(T_TCP_CLOSE, req_id, |w| {
                w.u32(conn);
            }),
            TcpAbort { conn } => msg(T_TCP_ABORT, req_id, |w| {
                w.u32(conn);
            }),
            QpRts {
                qp,
                conn,
                params: p,
            } => msg(T_QP_RTS, req_id, |w| {
                w.u32(qp)
                    .u32(conn)
                    .bool(p.crc_tx)
                    .bool(p.crc_rx)
                    .bool(p.markers_tx)
                    .bool(p.markers_rx)
                    .u32(p.marker_offset)
                    .u8(p.mpa_rev)
                    .u16(p.ird)
                    .u16(p.ord)
                    .u8(p.rtr as u8)
                    .bool(p.rtr_initiator)
                    .u8(p.rdmap_version)
                    .u32(p.mss);
            }),
            Shutdown => msg(T_SHUTDOWN, req_id, |_| {}),
        }
    }

    /// The command in `m` and its request id; a corrupted or foreign slot is an error.
    pub fn decode(m: &Msg) -> Result<(u64, Command), Error> {
        use Command::*;
        let mut r = reader(m)?;
        let c = match m.tag {
            T_ALLOC_PD => AllocPd { pd: r.u32()? },
            T_DEALLOC_PD => DeallocPd { pd: r.u32()? },
            T_CREATE_CQ => CreateCq {
                cq: r.u32()?,
                depth: r.u32()?,
                ring: r.path()?,
            },
            T_DESTROY_CQ => DestroyCq { cq: r.u32()? },
            T_RESIZE_CQ => ResizeCq {
                cq: r.u32()?,
                depth: r.u32()?,
                ring: r.path()?,
            },
            T_CREATE_SRQ => CreateSrq {
                srq: r.u32()?,
                pd: r.u32()?,
                depth: r.u32()?,
                ring: r.path()?,
            },
            T_ARM_SRQ => ArmSrq {
                srq: r.u32()?,
                limit: r.u32()?,
            },
            T_DESTROY_SRQ => DestroySrq { srq: r.u32()? },
            T_CREATE_QP => CreateQp {
                qp: r.u32()?,
                pd: r.u32()?,
                send_cq: r.u32()?,
                recv_cq: r.u32()?,
                srq: r.u32()?,
                sq_depth: r.u32()?,
                rq_depth: r.u32()?,
                sq: r.path()?,
                rq: r.path()?,
            },
            T_DESTROY_QP => DestroyQp { qp: r.u32()? },
            T_MODIFY_QP => ModifyQp {
                qp: r.u32()?,
                state: QpState::try_from(r.u8()?)?,
            },
            T_REGISTER_MR => RegisterMr {
                stag: r.u32()?,
                pd: r.u32()?,
                access: r.u32()?,
                zero_based: r.bool()?,
                offset: r.u64()?,
                len: r.u64()?,
                va: r.u64()?,
                segment: r.path()?,
            },
            T_DEREGISTER_MR => DeregisterMr { stag: r.u32()? },
            T_ALLOC_MW => AllocMw {
                stag: r.u32()?,
                pd: r.u32()?,
            },
            T_DEALLOC_MW => DeallocMw { stag: r.u32()? },
            T_ALLOC_FASTREG => AllocFastRegStag {
                stag: r.u32()?,
                pd: r.u32()?,
            },
            T_TCP_LISTEN => TcpListen {
                port: r.u16()?,
                backlog: r.u16()?,
            },
            T_TCP_UNLISTEN => TcpUnlisten { port: r.u16()? },
            T_TCP_CONNECT => TcpConnect {
                conn: r.u32()?,
                qp: r.u32()?,
                remote: r.addr()?,
            },
            T_TCP_ACCEPT => TcpAccept {
                conn: r.u32()?,
                qp: r.u32()?,
            },
            T_TCP_SEND => TcpSend {
                conn: r.u32()?,
                bytes: r.chunk()?,
            },
            T_TCP_CLOSE => TcpClose { conn: r.u32()? },
            T_TCP_ABORT => TcpAbort { conn: r.u32()? },
            T_QP_RTS => QpRts {
                qp: r.u32()?,
                conn: r.u32()?,
                params: RtsParams {
                    crc_tx: r.bool()?,
                    crc_rx: r.bool()?,
                    markers_tx: r.bool()?,
                    markers_rx: r.bool()?,
                    marker_offset: r.u32()?,
                    mpa_rev: r.u8()?,
                    ird: r.u16()?,
                    ord: r.u16()?,
                    rtr: RtrKind::try_from(r.u8()?)?,
                    rtr_initiator: r.bool()?,
                    rdmap_version: r.u8()?,
                    mss: r.u32()?,
                },
            },
            T_SHUTDOWN => Shutdown,
            _ => return Err(r.err("unknown command tag")),
        };
        Ok((m.req_id, c))
    }
}

impl Upcall {
    pub fn encode(&self) -> Msg {
        use Upcall::*;
        match *self {
            Reply {
                req_id,
                status,
                value,
            } => msg(U_REPLY, req_id, |w| {
                w.u32(status).u64(value);
            }),
            TcpEstablished { conn } => msg(U_ESTABLISHED, 0, |w| {
                w.u32(conn);
            }),
            TcpIncoming {
                conn,
                local_port,
                peer,
            } => msg(U_INCOMING, 0, |w| {
                w.u32(conn).u16(local_port).addr(&peer);
            }),
            TcpBytes { conn, bytes } => msg(U_BYTES, 0, |w| {
                w.u32(conn).chunk(&bytes);
            }),
            TcpClosed { conn, reason } => msg(U_CLOSED, 0, |w| {
                w.u32(conn).u8(reason as u8);
            }),
            QpTerminated {
                qp,
                received,
                layer,
                etype,
                code,
            } => msg(U_TERMINATED, 0, |w| {
                w.u32(qp).bool(received).u8(layer).u8(etype).u8(code);
            }),
            QpError { qp } => msg(U_QP_ERROR, 0, |w| {
                w.u32(qp);
            }),
            CqOverflow { cq } => msg(U_CQ_OVERFLOW, 0, |w| {
                w.u32(cq);
            }),
            SrqLimit { srq } => msg(U_SRQ_LIMIT, 0, |w| {
                w.u32(srq);
            }),
            Heartbeat {
                generation,
                counter,
            } => msg(U_HEARTBEAT, 0, |w| {
                w.u64(generation).u64(counter);
            }),
        }
    }

    pub fn decode(m: &Msg) -> Result<Upcall, Error> {
        use Upcall::*;
        let mut r = reader(m)?;
        Ok(match m.tag {
            U_REPLY => Reply {
                req_id: m.req_id,
                status: r.u32()?,
                value: r.u64()?,
            },
            U_ESTABLISHED => TcpEstablished { conn: r.u32()? },
            U_INCOMING => TcpIncoming {
                conn: r.u32()?,
                local_port: r.u16()?,
                peer: r.addr()?,
            },
            U_BYTES => TcpBytes {
                conn: r.u32()?,
                bytes: r.chunk()?,
            },
            U_CLOSED => TcpClosed {
                conn: r.u32()?,
                reason: CloseReason::try_from(r.u8()?)?,
            },
            U_TERMINATED => QpTerminated {
                qp: r.u32()?,
                received: r.bool()?,
                layer: r.u8()?,
                etype: r.u8()?,
                code: r.u8()?,
            },
            U_QP_ERROR => QpError { qp: r.u32()? },
            U_CQ_OVERFLOW => CqOverflow { cq: r.u32()? },
            U_SRQ_LIMIT => SrqLimit { srq: r.u32()? },
            U_HEARTBEAT => Heartbeat {
                generation: r.u64()?,
                counter: r.u64()?,
            },
            _ => return Err(r.err("unknown upcall tag")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn path(s: &str) -> ShmPath {
        ShmPath::new(Path::new(s)).unwrap()
    }

    fn every_command() -> Vec<Command> {
        use Command::*;
        let long = "/dev/hugepages/".to_string() + &"q".repeat(SHM_PATH_LEN - 15);
        vec![
            AllocPd { pd: 1 },
            DeallocPd { pd: 2 },
            CreateCq {
                cq: 3,
                depth: 64,
                ring: path("/dev/shm/cq3"),
            },
            DestroyCq { cq: 3 },
            ResizeCq {
                cq: 3,
                depth: 256,
                ring: path("/dev/shm/cq3b"),
            },
            CreateSrq {
                srq: 4,
                pd: 1,
                depth: 128,
                ring: path("/dev/shm/srq4"),
            },
            ArmSrq { srq: 4, limit: 10 },
            DestroySrq { srq: 4 },
            CreateQp {
                qp: 5,
                pd: 1,
                send_cq: 3,
                recv_cq: 6,
                srq: NO_ID,
                sq_depth: 256,
                rq_depth: 512,
                sq: path(&long),
                rq: path("/dev/shm/rq5"),
            },
            DestroyQp { qp: 5 },
            ModifyQp {
                qp: 5,
                state: QpState::Error,
            },
            RegisterMr {
                stag: 0x1234_56ab,
                pd: 1,
                access: 0x1f,
                zero_based: true,
                offset: 4096,
                len: 1 << 40,
                va: u64::MAX,
                segment: path("/dev/shm/mem"),
            },
            DeregisterMr { stag: 7 },
            AllocMw { stag: 8, pd: 1 },
            DeallocMw { stag: 8 },
            AllocFastRegStag { stag: 9, pd: 1 },
            TcpListen {
                port: 4791,
                backlog: 16,
            },
            TcpUnlisten { port: 4791 },
            TcpConnect {
                conn: 10,
                qp: 5,
                remote: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4791),
            },
            TcpConnect {
                conn: 11,
                qp: 5,
                remote: "[fe80::1]:99".parse().unwrap(),
            },
            TcpAccept { conn: 12, qp: 5 },
            TcpSend {
                conn: 10,
                bytes: Chunk::new(&[0xa5; MAX_CHUNK]),
            },
            TcpSend {
                conn: 10,
                bytes: Chunk::new(&[]),
            },
            TcpClose { conn: 10 },
            TcpAbort { conn: 10 },
            QpRts {
                qp: 5,
                conn: 10,
                params: RtsParams {
                    crc_tx: true,
                    crc_rx: false,
                    markers_tx: false,
                    markers_rx: true,
                    marker_offset: 123,
                    mpa_rev: 2,
                    ird: 16,
                    ord: 8,
                    rtr: RtrKind::ZeroLengthRead,
                    rtr_initiator: true,
                    rdmap_version: 2,
                    mss: 1460,
                },
            },
            Shutdown,
        ]
    }

    fn every_upcall() -> Vec<Upcall> {
        use Upcall::*;
        vec![
            Reply {
                req_id: 99,
                status: reply_status::BAD_SEGMENT,
                value: 7,
            },
            TcpEstablished { conn: 1 },
            TcpIncoming {
                conn: 2,
                local_port: 4791,
                peer: "192.168.1.9:40000".parse().unwrap(),
            },
            TcpBytes {
                conn: 2,
                bytes: Chunk::new(b"MPA ID Rep Frame"),
            },
            TcpClosed {
                conn: 2,
                reason: CloseReason::Reset,
            },
            QpTerminated {
                qp: 5,
                received: true,
                layer: 1,
                etype: 2,
                code: 3,
            },
            QpError { qp: 5 },
            CqOverflow { cq: 3 },
            SrqLimit { srq: 4 },
            Heartbeat {
                generation: 1,
                counter: 2,
            },
        ]
    }

    #[test]
    fn every_command_round_trips() {
        for (i, c) in every_command().into_iter().enumerate() {
            let m = c.encode(i as u64 + 1000);
            assert!(m.len as usize <= MSG_PAYLOAD);
            assert_eq!(Command::decode(&m).unwrap(), (i as u64 + 1000, c));
            assert!(Upcall::decode(&m).is_err(), "a command is not an upcall");
        }
    }

    #[test]
    fn every_upcall_round_trips() {
        for u in every_upcall() {
            let m = u.encode();
            assert_eq!(Upcall::decode(&m).unwrap(), u);
            assert!(Command::decode(&m).is_err(), "an upcall is not a command");
        }
    }

    #[test]
    fn truncated_or_corrupted_slots_are_errors_never_panics() {
        for c in every_command() {
            let m = c.encode(1);
            for len in 0..m.len {
                let mut t = m;
                t.len = len;
                assert!(Command::decode(&t).is_err(), "{c:?} cut to {len}");
            }
            let mut t = m;
            t.len = MSG_PAYLOAD as u32 + 1;
            assert!(Command::decode(&t).is_err());
            // Flip every payload octet in turn: decode may succeed (a different valid value)
            // or fail, but must not panic.
            for i in 0..m.len as usize {
                let mut t = m;
                t.payload[i] ^= 0xff;
                let _ = Command::decode(&t);
            }
        }
        let mut m = Command::TcpSend {
            conn: 1,
            bytes: Chunk::new(b"x"),
        }
        .encode(0);
        m.payload[4..6].copy_from_slice(&600u16.to_le_bytes());
        assert!(Command::decode(&m).is_err(), "chunk length over MAX_CHUNK");
        let mut m = Command::ModifyQp {
            qp: 1,
            state: QpState::Rts,
        }
        .encode(0);
        m.payload[4] = 9;
        assert!(Command::decode(&m).is_err(), "bad QP state");
        m.tag = 0xdead;
        assert!(Command::decode(&m).is_err(), "unknown tag");
    }

    #[test]
    fn paths_and_chunks() {
        assert!(ShmPath::new(Path::new("")).is_err());
        assert!(ShmPath::new(Path::new(&"x".repeat(SHM_PATH_LEN + 1))).is_err());
        let p = path("/dev/shm/x");
        assert_eq!(p.to_path(), Path::new("/dev/shm/x"));
        let data: Vec<u8> = (0..1300u32).map(|i| i as u8).collect();
        let chunks: Vec<Chunk> = Chunk::split(&data).collect();
        assert_eq!(chunks.len(), 3);
        let back: Vec<u8> = chunks.iter().flat_map(|c| c.as_bytes().to_vec()).collect();
        assert_eq!(back, data);
    }
}
