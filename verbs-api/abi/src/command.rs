//! The control <-> daemon contract: commands (iwarp-control -> iwarpd) and upcalls (replies
//! and events, iwarpd -> iwarp-control), carried in fixed-size [`Msg`] slots of the two rings
//! of [`crate::daemon_shm`].
//!
//! A [`Msg`] is `#[repr(C)]`: a `u32` tag (which ring's messages it holds), a `u32` payload
//! length, a `u64` request id and [`MSG_PAYLOAD`] octets holding a [`Command`] or an
//! [`Upcall`] in the contract's one codec (serde and postcard), so a corrupted slot decodes to
//! [`Error::Decode`] and never to a bad value.
//!
//! Segment paths travel as a [`ShmPath`]: up to [`SHM_PATH_LEN`] octets (the size of
//! `sun_path`), naming a file the receiver opens with [`crate::segment::Segment::open`].
//! Ids (QP number, CQ, S-RQ, PD, STag, connection) are chosen by iwarp-control; iwarpd maps
//! them to its engine's ids. `req_id` is chosen by control and echoed in the [`Upcall::Reply`].

use crate::codec;
use crate::error::Error;
use crate::id::{CqId, PdId, QpId, SrqId, Stag};
use crate::qp::{QpState, Terminated};
use crate::ring::Slot;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::net::SocketAddr;
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
/// "No S-RQ" in [`Command::CreateQp`].
pub const NO_SRQ: SrqId = SrqId(NO_ID);

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
        ShmPath::from_bytes(path.as_os_str().as_bytes()).ok_or(Error::InvalidName)
    }
    /// The path of these octets: 1 to [`SHM_PATH_LEN`] of them, no NUL.
    pub fn from_bytes(b: &[u8]) -> Option<ShmPath> {
        if b.is_empty() || b.len() > SHM_PATH_LEN || b.contains(&0) {
            return None;
        }
        let mut a = [0; SHM_PATH_LEN];
        a[..b.len()].copy_from_slice(b);
        Some(ShmPath(a))
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

impl Serialize for ShmPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.as_bytes())
    }
}

impl<'de> Deserialize<'de> for ShmPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ShmPath, D::Error> {
        codec::from_octets(d, "a segment path", ShmPath::from_bytes)
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

impl Serialize for Chunk {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.as_bytes())
    }
}

impl<'de> Deserialize<'de> for Chunk {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Chunk, D::Error> {
        codec::from_octets(d, "at most MAX_CHUNK octets", |b| {
            (b.len() <= MAX_CHUNK).then(|| Chunk::new(b))
        })
    }
}

impl core::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Chunk({} octets)", self.len)
    }
}

/// The Ready-To-Receive message peer-to-peer mode agreed on (RFC 6581 section 3).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RtrKind {
    None = 0,
    ZeroLengthSend = 1,
    ZeroLengthWrite = 2,
    ZeroLengthRead = 3,
}

/// What the MPA negotiation (RFC 5044 section 7, RFC 6581) settled, for [`Command::QpRts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// Handshakes a connection manager's listening port takes at once (its `TcpListen` backlog):
/// a SYN past them is refused, so a client keeping more connects in flight to one port
/// sees refusals rather than a faster setup.
pub const LISTEN_BACKLOG: u16 = 64;

/// Requests iwarp-control sends to iwarpd.
// Values of this enum are built and consumed one at a time next to a 640-octet slot; boxing
// the large variants would allocate per message for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    AllocPd {
        pd: PdId,
    },
    DeallocPd {
        pd: PdId,
    },
    /// Map a CQ ring segment (a ring of [`crate::wqe::Cqe`]) and create the CQ.
    CreateCq {
        cq: CqId,
        depth: u32,
        ring: ShmPath,
    },
    DestroyCq {
        cq: CqId,
    },
    /// Resize CQ (Verbs Modify CQ, section 5.3.3): completions go to the new ring segment from
    /// now on; the application drains what the old ring still holds. Refused with
    /// [`reply_status::IN_USE`] when more completions are present than `depth` holds.
    ResizeCq {
        cq: CqId,
        depth: u32,
        ring: ShmPath,
    },
    /// Map an S-RQ ring segment (a ring of [`crate::wqe::RecvWqe`]).
    CreateSrq {
        srq: SrqId,
        pd: PdId,
        depth: u32,
        ring: ShmPath,
    },
    /// Arm the S-RQ limit event (Verbs section 8.4).
    ArmSrq {
        srq: SrqId,
        limit: u32,
    },
    DestroySrq {
        srq: SrqId,
    },
    /// Map the SQ ring (of [`crate::wqe::SendWqe`]) and RQ ring (of [`crate::wqe::RecvWqe`];
    /// unused with an S-RQ) and create the QP; `srq` is [`NO_SRQ`] without one.
    CreateQp {
        qp: QpId,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        srq: SrqId,
        sq_depth: u32,
        rq_depth: u32,
        sq: ShmPath,
        rq: ShmPath,
    },
    /// Destroy QP: refused with [`reply_status::IN_USE`], the QP untouched, while memory
    /// windows are bound on it (Verbs section 6.1.4).
    DestroyQp {
        qp: QpId,
    },
    ModifyQp {
        qp: QpId,
        state: QpState,
    },
    /// Register `len` octets at `offset` of the data area of segment `segment` as region
    /// `stag` (control chose it: index + key), VA-based at `va` or zero-based.
    RegisterMr {
        stag: Stag,
        pd: PdId,
        access: u32,
        zero_based: bool,
        offset: u64,
        len: u64,
        va: u64,
        segment: ShmPath,
    },
    DeregisterMr {
        stag: Stag,
    },
    AllocMw {
        stag: Stag,
        pd: PdId,
    },
    DeallocMw {
        stag: Stag,
    },
    /// Reserve `stag` for Fast-Register work requests of `pd`.
    AllocFastRegStag {
        stag: Stag,
        pd: PdId,
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
        qp: QpId,
        remote: SocketAddr,
    },
    /// Accept an incoming connection (from [`Upcall::TcpIncoming`]) for `qp`.
    TcpAccept {
        conn: u32,
        qp: QpId,
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
        qp: QpId,
        conn: u32,
        params: RtsParams,
    },
    Shutdown,
}

/// Why a TCP connection ended.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CloseReason {
    /// FIN exchanged.
    Graceful = 0,
    /// RST received or sent.
    Reset = 1,
    /// Retransmissions or keep-alives gave up, or a connect's SYNs went unanswered.
    Timeout = 2,
    /// Connect refused: the peer answered the SYN with a RST.
    Refused = 3,
    /// The daemon is shutting down.
    Shutdown = 4,
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
    /// a QP with bound windows, a CQ holding more completions than the size asked for.
    pub const IN_USE: u32 = 8;
}

/// Replies and events iwarpd sends to iwarp-control.
#[allow(clippy::large_enum_variant)] // as for Command
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A Terminate was received or sent on a QP (RFC 5040 section 7).
    QpTerminated(Terminated),
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
    /// The peer closed the stream gracefully while the QP was in RTS (Verbs section
    /// 6.2.2.2): the QP left RTS for Closing, and for Idle once nothing was left to do; an
    /// [`Upcall::QpError`] follows when it went on to Error instead.
    QpClosed {
        qp: u32,
    },
}

/// [`Msg::tag`] of a command slot and of an upcall slot, so a slot on the wrong ring is
/// refused.
const COMMAND_TAG: u32 = 1;
const UPCALL_TAG: u32 = 0x100;

fn slot<T: Serialize>(tag: u32, req_id: u64, v: &T) -> Msg {
    let mut m = Msg {
        tag,
        req_id,
        ..Msg::default()
    };
    // The largest value (a full chunk, or two paths) takes well under MSG_PAYLOAD octets,
    // which the tests check for every variant at its largest.
    let n = codec::encode_into(v, &mut m.payload).expect("every command and upcall fits a slot");
    m.len = n as u32;
    m
}

fn unslot<'a, T: Deserialize<'a>>(m: &'a Msg, tag: u32) -> Result<T, Error> {
    let err = |what| Error::Decode { tag: m.tag, what };
    if m.tag != tag {
        return Err(err("slot of the other ring"));
    }
    let body = m
        .payload
        .get(..m.len as usize)
        .ok_or(err("payload length above MSG_PAYLOAD"))?;
    codec::decode(body).map_err(err)
}

impl Command {
    /// The slot for this command with request id `req_id`.
    pub fn encode(&self, req_id: u64) -> Msg {
        slot(COMMAND_TAG, req_id, self)
    }

    /// The command in `m` and its request id; a corrupted or foreign slot is an error.
    pub fn decode(m: &Msg) -> Result<(u64, Command), Error> {
        Ok((m.req_id, unslot(m, COMMAND_TAG)?))
    }
}

impl Upcall {
    pub fn encode(&self) -> Msg {
        let req_id = match *self {
            Upcall::Reply { req_id, .. } => req_id,
            _ => 0,
        };
        slot(UPCALL_TAG, req_id, self)
    }

    pub fn decode(m: &Msg) -> Result<Upcall, Error> {
        unslot(m, UPCALL_TAG)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn path(s: &str) -> ShmPath {
        ShmPath::new(Path::new(s)).unwrap()
    }

    fn every_command() -> Vec<Command> {
        use Command::*;
        let long = "/dev/hugepages/".to_string() + &"q".repeat(SHM_PATH_LEN - 15);
        vec![
            AllocPd { pd: PdId(1) },
            DeallocPd { pd: PdId(2) },
            CreateCq {
                cq: CqId(3),
                depth: 64,
                ring: path("/dev/shm/cq3"),
            },
            DestroyCq { cq: CqId(3) },
            ResizeCq {
                cq: CqId(3),
                depth: 256,
                ring: path("/dev/shm/cq3b"),
            },
            CreateSrq {
                srq: SrqId(4),
                pd: PdId(1),
                depth: 128,
                ring: path("/dev/shm/srq4"),
            },
            ArmSrq {
                srq: SrqId(4),
                limit: 10,
            },
            DestroySrq { srq: SrqId(4) },
            CreateQp {
                qp: QpId(5),
                pd: PdId(1),
                send_cq: CqId(3),
                recv_cq: CqId(6),
                srq: NO_SRQ,
                sq_depth: 256,
                rq_depth: 512,
                sq: path(&long),
                rq: path("/dev/shm/rq5"),
            },
            DestroyQp { qp: QpId(5) },
            ModifyQp {
                qp: QpId(5),
                state: QpState::Error,
            },
            RegisterMr {
                stag: Stag(0x1234_56ab),
                pd: PdId(1),
                access: 0x1f,
                zero_based: true,
                offset: 4096,
                len: 1 << 40,
                va: u64::MAX,
                segment: path("/dev/shm/mem"),
            },
            DeregisterMr { stag: Stag(7) },
            AllocMw {
                stag: Stag(8),
                pd: PdId(1),
            },
            DeallocMw { stag: Stag(8) },
            AllocFastRegStag {
                stag: Stag(9),
                pd: PdId(1),
            },
            TcpListen {
                port: 4791,
                backlog: 16,
            },
            TcpUnlisten { port: 4791 },
            TcpConnect {
                conn: 10,
                qp: QpId(5),
                remote: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4791),
            },
            TcpConnect {
                conn: 11,
                qp: QpId(5),
                remote: "[fe80::1]:99".parse().unwrap(),
            },
            TcpAccept {
                conn: 12,
                qp: QpId(5),
            },
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
                qp: QpId(5),
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
            QpTerminated(Terminated {
                qp: QpId(5),
                received: true,
                layer: 1,
                etype: 2,
                code: 3,
            }),
            QpError { qp: 5 },
            CqOverflow { cq: 3 },
            SrqLimit { srq: 4 },
            Heartbeat {
                generation: 1,
                counter: 2,
            },
            QpClosed { qp: 6 },
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
        // TcpSend of connection 1: its variant, the connection, then the chunk's length (a
        // varint, 600 here) and octets.
        let mut m = Command::TcpSend {
            conn: 1,
            bytes: Chunk::new(b"x"),
        }
        .encode(0);
        m.payload[2..4].copy_from_slice(&[0xd8, 0x04]);
        m.len = 4 + 600;
        assert!(Command::decode(&m).is_err(), "chunk length over MAX_CHUNK");
        m.payload[2] = 1;
        m.len = 4;
        assert!(
            Command::decode(&m).is_ok(),
            "the same slot with a 1-octet chunk"
        );
        // ModifyQp: variant, QP number, state.
        let mut m = Command::ModifyQp {
            qp: QpId(1),
            state: QpState::Rts,
        }
        .encode(0);
        assert_eq!(m.len, 3);
        m.payload[2] = 9;
        assert!(Command::decode(&m).is_err(), "bad QP state");
        m.payload[2] = 1;
        assert!(Command::decode(&m).is_ok());
        m.payload[0] = 0x7f;
        assert!(Command::decode(&m).is_err(), "unknown variant");
        m.payload[0] = 10;
        m.tag = 0xdead;
        assert!(Command::decode(&m).is_err(), "unknown tag");
    }

    #[test]
    fn the_largest_values_fit_a_slot() {
        let long = path(&"/".repeat(SHM_PATH_LEN));
        for c in [
            Command::CreateQp {
                qp: QpId(u32::MAX),
                pd: PdId(u32::MAX),
                send_cq: CqId(u32::MAX),
                recv_cq: CqId(u32::MAX),
                srq: SrqId(u32::MAX),
                sq_depth: u32::MAX,
                rq_depth: u32::MAX,
                sq: long,
                rq: long,
            },
            Command::RegisterMr {
                stag: Stag(u32::MAX),
                pd: PdId(u32::MAX),
                access: u32::MAX,
                zero_based: false,
                offset: u64::MAX,
                len: u64::MAX,
                va: u64::MAX,
                segment: long,
            },
            Command::TcpSend {
                conn: u32::MAX,
                bytes: Chunk::new(&[0xff; MAX_CHUNK]),
            },
            Command::TcpConnect {
                conn: u32::MAX,
                qp: QpId(u32::MAX),
                remote: "[ffff::1]:65535".parse().unwrap(),
            },
        ] {
            assert_eq!(Command::decode(&c.encode(u64::MAX)).unwrap(), (u64::MAX, c));
        }
        let u = Upcall::TcpBytes {
            conn: u32::MAX,
            bytes: Chunk::new(&[0xff; MAX_CHUNK]),
        };
        assert_eq!(Upcall::decode(&u.encode()).unwrap(), u);
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
