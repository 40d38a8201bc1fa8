//! The fast-path records applications and iwarpd exchange through SQ, RQ, S-RQ and CQ rings.
//!
//! Every record is `#[repr(C)]`, 8-byte aligned, made only of integers with explicit padding
//! (so any bit pattern is a valid value: a corrupted entry decodes to an error, never to
//! undefined behaviour), and its size is fixed by a `const` assertion: changing it is an ABI
//! change and needs [`crate::ABI_VERSION`] bumped. Field meanings follow the Verbs
//! specification (draft-hilland-rddp-verbs-00, section 8.2 Post Send / Post Receive and 8.3
//! Poll for Completion), RFC 5040 (STag, tagged offset), RFC 7306 (atomics, Immediate Data)
//! and the RDMAP version 2 draft (Send with Immediate, Read V2).

use crate::error::Error;
use crate::ring::Slot;
use num_enum::TryFromPrimitive;
use serde::{Deserialize, Serialize};

/// The error of an octet (or word) that names no value of its enum.
mod unknown {
    use crate::Error;

    fn decode(tag: u32, what: &'static str) -> Error {
        Error::Decode { tag, what }
    }
    pub(super) fn send_opcode(v: u8) -> Error {
        decode(v.into(), "unknown send opcode")
    }
    pub(super) fn completion_status(v: u8) -> Error {
        decode(v.into(), "unknown completion status")
    }
    pub(super) fn completion_opcode(v: u8) -> Error {
        decode(v.into(), "unknown completion opcode")
    }
    pub(super) fn async_event_kind(v: u32) -> Error {
        decode(v, "unknown async event kind")
    }
}

/// Scatter/gather elements per work request (a WQE and the engine's work requests alike).
pub const MAX_SGE: usize = 4;
/// Inline data a Send or Write may carry in the work request itself.
pub const MAX_INLINE: usize = 64;

/// A scatter/gather element: `len` octets at tagged offset `to` of the region `stag`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    pub stag: u32,
    pub len: u32,
    pub to: u64,
}
const _: () = assert!(core::mem::size_of::<Sge>() == 16);

/// Send Queue operations (`SendWqe::opcode`). Values are ABI: never renumber. A solicited
/// event is the [`send_flags::SOLICITED`] flag of a Send or Immediate Data operation, not an
/// opcode of its own; the values 1, 3, 11, 13 and 15 are unused.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, TryFromPrimitive)]
#[num_enum(error_type(name = Error, constructor = unknown::send_opcode))]
pub enum SendOpcode {
    Send = 0,
    /// Send with Invalidate (`invalidate_stag`).
    SendInv = 2,
    Write = 4,
    /// RDMA Write followed by Immediate Data (RFC 7306 section 6), `imm`.
    WriteImm = 5,
    /// Sink: the WR's single SGE; source: `remote_stag`/`remote_to`.
    Read = 6,
    /// RDMA Read V2 (RDMAP version 2 draft): untagged response.
    ReadV2 = 7,
    /// RFC 7306 Fetch and Add: `compare_add` (add), `compare_add_mask` (add mask); the
    /// original value lands in the single 8-octet SGE.
    FetchAdd = 8,
    /// RFC 7306 Compare and Swap with masks. Swap is CmpSwap with `compare_add_mask == 0`.
    CmpSwap = 9,
    /// Immediate Data (RFC 7306 section 6), `imm`.
    Immediate = 10,
    /// Send with Immediate, RDMAP version 2 draft.
    SendImm = 12,
    /// Send with Invalidate and Immediate, RDMAP version 2 draft.
    SendInvImm = 14,
    /// Local Invalidate of `local_stag`.
    LocalInv = 16,
    /// Fast-register `local_stag` over `mr_len` octets at `mr_offset` of region `mr_stag`,
    /// access `access`, VA-based at `mr_to` (0: zero-based).
    FastReg = 17,
    /// Bind memory window `local_stag` to `mr_len` octets at tagged offset `mr_to` of region
    /// `mr_stag`, access `access` (Verbs section 7.3).
    BindMw = 18,
}

/// `SendWqe::flags` bits (Verbs section 8.2.2).
pub mod send_flags {
    /// Generate a completion even on success.
    pub const SIGNALED: u8 = 1 << 0;
    /// Read fence: wait until prior Reads and atomics completed.
    pub const FENCE: u8 = 1 << 1;
    /// Local fence: wait until every prior WR completed.
    pub const LOCAL_FENCE: u8 = 1 << 2;
    /// Solicited event (Verbs section 8.2.2): the Send or Immediate Data message asks the
    /// peer for a completion event.
    pub const SOLICITED: u8 = 1 << 3;
    /// The payload is `inline_data[..inline_len]`, not the SGL.
    pub const INLINE: u8 = 1 << 4;
    /// Every defined bit; others must be zero.
    pub const ALL: u8 = 0x1f;
}

/// Memory access rights (Verbs section 7.2): what a registration, a window bind or a
/// fast-register grants, and what the engine checks every access against. Local Read is
/// always held, so it is no bit.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Access(pub u32);

impl Access {
    pub const LOCAL_READ: Access = Access(0);
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_READ: Access = Access(2);
    pub const REMOTE_WRITE: Access = Access(4);
    pub const REMOTE_ATOMIC: Access = Access(8);
    pub const BIND: Access = Access(16);
    pub const ALL: Access = Access(31);

    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The rights `bits` name, or `None` when a bit outside [`Access::ALL`] is set.
    pub const fn from_bits(bits: u32) -> Option<Access> {
        if bits & !Access::ALL.0 == 0 {
            Some(Access(bits))
        } else {
            None
        }
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// [`Access`]'s bits as the integers records and messages carry (`SendWqe::access`).
pub mod access {
    use super::Access;
    pub const LOCAL_WRITE: u32 = Access::LOCAL_WRITE.0;
    pub const REMOTE_READ: u32 = Access::REMOTE_READ.0;
    pub const REMOTE_WRITE: u32 = Access::REMOTE_WRITE.0;
    pub const REMOTE_ATOMIC: u32 = Access::REMOTE_ATOMIC.0;
    pub const BIND: u32 = Access::BIND.0;
    pub const ALL: u32 = Access::ALL.0;
}

/// A Send Queue entry, 256 octets (four cache lines).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWqe {
    pub wr_id: u64,
    /// A [`SendOpcode`] value.
    pub opcode: u8,
    /// [`send_flags`] bits.
    pub flags: u8,
    pub num_sge: u8,
    pub inline_len: u8,
    /// [`access`] bits for FastReg and BindMw.
    pub access: u32,
    pub remote_stag: u32,
    /// For the Send-with-Invalidate opcodes (RFC 5040 section 6.10).
    pub invalidate_stag: u32,
    /// LocalInv, FastReg and BindMw: the STag acted on (MW for BindMw).
    pub local_stag: u32,
    /// FastReg: the region mapped; BindMw: the region bound to.
    pub mr_stag: u32,
    pub remote_to: u64,
    /// Immediate Data (8 octets in RFC 7306; the V2 draft's Send with Immediate uses 4,
    /// carried in the low half).
    pub imm: u64,
    /// Atomics: compare (CmpSwap) or add (FetchAdd) operand.
    pub compare_add: u64,
    pub compare_add_mask: u64,
    pub swap: u64,
    pub swap_mask: u64,
    pub mr_offset: u64,
    pub mr_len: u64,
    pub mr_to: u64,
    pub _reserved: [u64; 3],
    pub sgl: [Sge; MAX_SGE],
    pub inline_data: [u8; MAX_INLINE],
}
const _: () = assert!(core::mem::size_of::<SendWqe>() == 256);
const _: () = assert!(core::mem::align_of::<SendWqe>() == 8);

impl Default for SendWqe {
    fn default() -> SendWqe {
        SendWqe {
            wr_id: 0,
            opcode: 0,
            flags: 0,
            num_sge: 0,
            inline_len: 0,
            access: 0,
            remote_stag: 0,
            invalidate_stag: 0,
            local_stag: 0,
            mr_stag: 0,
            remote_to: 0,
            imm: 0,
            compare_add: 0,
            compare_add_mask: 0,
            swap: 0,
            swap_mask: 0,
            mr_offset: 0,
            mr_len: 0,
            mr_to: 0,
            _reserved: [0; 3],
            sgl: [Sge::default(); MAX_SGE],
            inline_data: [0; MAX_INLINE],
        }
    }
}

impl SendWqe {
    /// A WQE of `opcode` with `sgl` (at most [`MAX_SGE`]; extra entries are an error).
    pub fn new(wr_id: u64, opcode: SendOpcode, sgl: &[Sge]) -> Result<SendWqe, Error> {
        let mut w = SendWqe {
            wr_id,
            opcode: opcode as u8,
            flags: send_flags::SIGNALED,
            ..SendWqe::default()
        };
        w.set_sgl(sgl)?;
        Ok(w)
    }

    pub fn set_sgl(&mut self, sgl: &[Sge]) -> Result<(), Error> {
        if sgl.len() > MAX_SGE {
            return Err(Error::Decode {
                tag: sgl.len() as u32,
                what: "more than MAX_SGE scatter/gather elements",
            });
        }
        self.sgl = [Sge::default(); MAX_SGE];
        self.sgl[..sgl.len()].copy_from_slice(sgl);
        self.num_sge = sgl.len() as u8;
        Ok(())
    }

    /// Copies `data` inline and sets [`send_flags::INLINE`].
    pub fn set_inline(&mut self, data: &[u8]) -> Result<(), Error> {
        if data.len() > MAX_INLINE {
            return Err(Error::Decode {
                tag: data.len() as u32,
                what: "inline data longer than MAX_INLINE",
            });
        }
        self.inline_data = [0; MAX_INLINE];
        self.inline_data[..data.len()].copy_from_slice(data);
        self.inline_len = data.len() as u8;
        self.flags |= send_flags::INLINE;
        Ok(())
    }

    /// The opcode, or an error for a corrupted entry.
    pub fn op(&self) -> Result<SendOpcode, Error> {
        SendOpcode::try_from(self.opcode)
    }

    /// Checks everything a consumer must not trust: opcode, flags, SGE count, inline length.
    /// A WQE that fails completes with `CqeStatus::LocalQpOperationError`.
    pub fn validate(&self) -> Result<SendOpcode, Error> {
        let op = self.op()?;
        if self.flags & !send_flags::ALL != 0 {
            return Err(Error::Decode {
                tag: self.flags as u32,
                what: "undefined send flag",
            });
        }
        if self.num_sge as usize > MAX_SGE {
            return Err(Error::Decode {
                tag: self.num_sge as u32,
                what: "num_sge above MAX_SGE",
            });
        }
        if self.inline_len as usize > MAX_INLINE {
            return Err(Error::Decode {
                tag: self.inline_len as u32,
                what: "inline_len above MAX_INLINE",
            });
        }
        if self.access & !access::ALL != 0 {
            return Err(Error::Decode {
                tag: self.access,
                what: "undefined access bit",
            });
        }
        Ok(op)
    }

    /// The used scatter/gather elements (clamped, so a corrupted count cannot overrun).
    pub fn sgl(&self) -> &[Sge] {
        &self.sgl[..(self.num_sge as usize).min(MAX_SGE)]
    }

    /// The inline payload (clamped).
    pub fn inline(&self) -> &[u8] {
        &self.inline_data[..(self.inline_len as usize).min(MAX_INLINE)]
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A Receive Queue or S-RQ entry, 80 octets.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub num_sge: u8,
    pub _pad: [u8; 7],
    pub sgl: [Sge; MAX_SGE],
}
const _: () = assert!(core::mem::size_of::<RecvWqe>() == 80);
const _: () = assert!(core::mem::align_of::<RecvWqe>() == 8);

impl RecvWqe {
    pub fn new(wr_id: u64, sgl: &[Sge]) -> Result<RecvWqe, Error> {
        if sgl.len() > MAX_SGE {
            return Err(Error::Decode {
                tag: sgl.len() as u32,
                what: "more than MAX_SGE scatter/gather elements",
            });
        }
        let mut w = RecvWqe {
            wr_id,
            num_sge: sgl.len() as u8,
            ..RecvWqe::default()
        };
        w.sgl[..sgl.len()].copy_from_slice(sgl);
        Ok(w)
    }

    pub fn validate(&self) -> Result<(), Error> {
        if self.num_sge as usize > MAX_SGE {
            return Err(Error::Decode {
                tag: self.num_sge as u32,
                what: "num_sge above MAX_SGE",
            });
        }
        Ok(())
    }

    pub fn sgl(&self) -> &[Sge] {
        &self.sgl[..(self.num_sge as usize).min(MAX_SGE)]
    }
}

/// Completion statuses (Verbs section 8.3.2, with libibverbs' spellings in mind), the
/// engine's completions' too. Values are ABI.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, TryFromPrimitive)]
#[num_enum(error_type(name = Error, constructor = unknown::completion_status))]
pub enum CqeStatus {
    #[default]
    Success = 0,
    /// The message was longer than the receive buffers.
    LocalLengthError = 1,
    /// A local STag was invalid, of another PD, lacked the right, or out of bounds.
    LocalProtectionError = 2,
    /// Also: a corrupted WQE (bad opcode, flags or counts).
    LocalQpOperationError = 3,
    /// The QP went to Error before the WR completed.
    WrFlushed = 4,
    /// The remote peer reported a protection error (Terminate, RDMAP remote protection).
    RemoteAccessError = 5,
    /// The remote peer reported another error (Terminate).
    RemoteOperationError = 6,
    /// The connection ended abnormally.
    LlpError = 7,
}

impl core::fmt::Display for CqeStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            CqeStatus::Success => "success",
            CqeStatus::LocalLengthError => "local length error",
            CqeStatus::LocalProtectionError => "local protection error",
            CqeStatus::LocalQpOperationError => "local QP operation error",
            CqeStatus::WrFlushed => "work request flushed",
            CqeStatus::RemoteAccessError => "remote access error",
            CqeStatus::RemoteOperationError => "remote operation error",
            CqeStatus::LlpError => "LLP (connection) error",
        })
    }
}

/// What a completion completed, the engine's completions' too. Values are ABI.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, TryFromPrimitive)]
#[num_enum(error_type(name = Error, constructor = unknown::completion_opcode))]
pub enum CqeOpcode {
    #[default]
    Send = 0,
    Write = 1,
    Read = 2,
    FetchAdd = 3,
    CmpSwap = 4,
    Immediate = 5,
    LocalInv = 6,
    BindMw = 7,
    FastReg = 8,
    Recv = 9,
    /// Receive of Immediate Data, or the immediate part of Write with Immediate.
    RecvImm = 10,
}

/// `Cqe::flags` bits.
pub mod cqe_flags {
    /// `imm` is valid.
    pub const IMM: u8 = 1 << 0;
    /// `invalidated_stag` is valid (Send with Invalidate received).
    pub const INVALIDATED: u8 = 1 << 1;
    /// The message carried the Solicited Event bit.
    pub const SOLICITED: u8 = 1 << 2;
}

/// A completion, one cache line.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cqe {
    pub wr_id: u64,
    pub qp_num: u32,
    /// A [`CqeOpcode`] value.
    pub opcode: u8,
    /// A [`CqeStatus`] value.
    pub status: u8,
    /// [`cqe_flags`] bits.
    pub flags: u8,
    pub _pad0: u8,
    pub byte_len: u32,
    pub invalidated_stag: u32,
    pub imm: u64,
    pub _reserved: [u64; 4],
}
const _: () = assert!(core::mem::size_of::<Cqe>() == 64);
const _: () = assert!(core::mem::align_of::<Cqe>() == 8);

impl Cqe {
    pub fn op(&self) -> Result<CqeOpcode, Error> {
        CqeOpcode::try_from(self.opcode)
    }
    pub fn status(&self) -> Result<CqeStatus, Error> {
        CqeStatus::try_from(self.status)
    }
    pub fn imm(&self) -> Option<u64> {
        (self.flags & cqe_flags::IMM != 0).then_some(self.imm)
    }
    pub fn invalidated(&self) -> Option<u32> {
        (self.flags & cqe_flags::INVALIDATED != 0).then_some(self.invalidated_stag)
    }
}

/// Kinds of asynchronous events (Verbs section 8.4) an [`AsyncEvent`] carries. Values are ABI.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, TryFromPrimitive)]
#[num_enum(error_type(name = Error, constructor = unknown::async_event_kind))]
pub enum AsyncEventKind {
    /// The QP entered Error (`qp`).
    QpError = 1,
    /// A CQ overflowed (`cq`): completions were lost, its QPs go to Error.
    CqOverflow = 2,
    /// An S-RQ fell below its armed limit (`srq`).
    SrqLimit = 3,
    /// The peer sent a Terminate (`qp`, `term_*`).
    TerminateReceived = 4,
    /// We sent a Terminate (`qp`, `term_*`).
    TerminateSent = 5,
    /// The connection was established (`qp`).
    Established = 6,
    /// The peer closed gracefully (`qp`).
    ConnectionClosed = 7,
    /// The connection was reset or lost (`qp`).
    ConnectionLost = 8,
    /// The connection request was rejected (`qp`, `value` = reason).
    Rejected = 9,
    /// iwarpd or iwarp-control went away or restarted (`value` = new generation or 0).
    ServiceLost = 10,
}

/// An asynchronous event record, 32 octets; the identifiers not named by the kind are zero.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AsyncEvent {
    /// An [`AsyncEventKind`] value.
    pub kind: u32,
    pub qp: u32,
    pub cq: u32,
    pub srq: u32,
    /// Terminate layer, error type and error code (RFC 5040 section 7.2).
    pub term_layer: u8,
    pub term_type: u8,
    pub term_code: u8,
    pub _pad: [u8; 5],
    pub value: u64,
}
const _: () = assert!(core::mem::size_of::<AsyncEvent>() == 32);

impl AsyncEvent {
    pub fn new(kind: AsyncEventKind) -> AsyncEvent {
        AsyncEvent {
            kind: kind as u32,
            ..AsyncEvent::default()
        }
    }
    pub fn kind(&self) -> Result<AsyncEventKind, Error> {
        AsyncEventKind::try_from(self.kind)
    }
}

// SAFETY: all of these are `#[repr(C)]` structs of integers and integer arrays with explicit
// padding fields: every bit pattern is a valid value.
unsafe impl Slot for SendWqe {}
// SAFETY: as above.
unsafe impl Slot for RecvWqe {}
// SAFETY: as above.
unsafe impl Slot for Cqe {}
// SAFETY: as above.
unsafe impl Slot for AsyncEvent {}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn layouts_are_fixed() {
        assert_eq!(offset_of!(SendWqe, remote_stag), 16);
        assert_eq!(offset_of!(SendWqe, remote_to), 32);
        assert_eq!(offset_of!(SendWqe, sgl), 128);
        assert_eq!(offset_of!(SendWqe, inline_data), 192);
        assert_eq!(offset_of!(RecvWqe, sgl), 16);
        assert_eq!(offset_of!(Cqe, byte_len), 16);
        assert_eq!(offset_of!(Cqe, imm), 24);
        assert_eq!(offset_of!(AsyncEvent, value), 24);
    }

    #[test]
    fn opcodes_round_trip_and_unknown_is_an_error() {
        for v in 0..=255u8 {
            match SendOpcode::try_from(v) {
                Ok(op) => assert_eq!(op as u8, v),
                // The solicited variants are a flag, so their values stay unused.
                Err(_) => assert!(v > SendOpcode::BindMw as u8 || [1, 3, 11, 13, 15].contains(&v)),
            }
            match CqeStatus::try_from(v) {
                Ok(s) => assert_eq!(s as u8, v),
                Err(_) => assert!(v > CqeStatus::LlpError as u8),
            }
            match CqeOpcode::try_from(v) {
                Ok(s) => assert_eq!(s as u8, v),
                Err(_) => assert!(v > CqeOpcode::RecvImm as u8),
            }
        }
        for v in 0..20u32 {
            match AsyncEventKind::try_from(v) {
                Ok(k) => assert_eq!(k as u32, v),
                Err(_) => assert!(v == 0 || v > AsyncEventKind::ServiceLost as u32),
            }
        }
    }

    #[test]
    fn corrupted_wqes_are_refused_not_trusted() {
        let sge = Sge {
            stag: 7,
            len: 10,
            to: 0,
        };
        let mut w = SendWqe::new(1, SendOpcode::Write, &[sge]).unwrap();
        assert_eq!(w.validate().unwrap(), SendOpcode::Write);
        assert_eq!(w.sgl(), &[sge]);
        w.num_sge = 200;
        assert!(w.validate().is_err());
        assert_eq!(w.sgl().len(), MAX_SGE, "accessors clamp");
        w.num_sge = 1;
        w.opcode = 99;
        assert!(w.validate().is_err());
        w.opcode = SendOpcode::Send as u8;
        w.flags = 0x80;
        assert!(w.validate().is_err());
        w.flags = 0;
        w.inline_len = 255;
        assert!(w.validate().is_err());
        assert_eq!(w.inline().len(), MAX_INLINE);
        assert!(SendWqe::new(1, SendOpcode::Send, &[sge; 5]).is_err());
        let mut w = SendWqe::new(2, SendOpcode::Send, &[]).unwrap();
        w.set_inline(b"hello").unwrap();
        assert!(w.has(send_flags::INLINE));
        assert_eq!(w.inline(), b"hello");
        assert!(w.set_inline(&[0; MAX_INLINE + 1]).is_err());
        let mut r = RecvWqe::new(3, &[sge, sge]).unwrap();
        assert_eq!(r.sgl().len(), 2);
        r.num_sge = 9;
        assert!(r.validate().is_err());
    }

    #[test]
    fn cqe_optional_fields_follow_flags() {
        let mut c = Cqe {
            imm: 5,
            invalidated_stag: 9,
            ..Cqe::default()
        };
        assert_eq!((c.imm(), c.invalidated()), (None, None));
        c.flags = cqe_flags::IMM | cqe_flags::INVALIDATED;
        assert_eq!((c.imm(), c.invalidated()), (Some(5), Some(9)));
        c.status = 42;
        assert!(c.status().is_err());
    }
}
