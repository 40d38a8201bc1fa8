//! Work requests, work completions, statuses and errors, as the Verbs specification
//! (draft-hilland-rddp-verbs-00) names them.

use core::fmt;
use iwarp_abi::id::{CqId, QpId, SrqId};
/// Memory access rights, completion statuses and opcodes are the ring records' own: the
/// engine's completions are the CQEs' values before they are written out.
pub use iwarp_abi::wqe::{Access, CqeOpcode as WcOpcode, CqeStatus as Status};
/// A work request's scatter/gather elements and inline data are the ring entries' too, so
/// converting a posted entry copies them as they are.
pub use iwarp_abi::wqe::{Sge, MAX_INLINE, MAX_SGE};

/// The operation of a Send Queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send {
        solicited: bool,
        invalidate: Option<u32>,
    },
    Write {
        remote_stag: u32,
        remote_to: u64,
    },
    /// RDMA Write followed by Immediate Data (RFC 7306 section 6: two messages, one WR);
    /// `solicited` sends the Immediate Data with SE, as rdma-core's Write with Immediate
    /// and `IBV_SEND_SOLICITED` asks.
    WriteImm {
        remote_stag: u32,
        remote_to: u64,
        imm: u64,
        solicited: bool,
    },
    /// Sink is the WR's single SGE, which must be registered with remote write access.
    Read {
        remote_stag: u32,
        remote_to: u64,
    },
    /// The original value lands in the WR's single 8-byte SGE.
    FetchAdd {
        remote_stag: u32,
        remote_to: u64,
        add: u64,
        add_mask: u64,
    },
    /// Swap is CmpSwap with a zero compare mask.
    CmpSwap {
        remote_stag: u32,
        remote_to: u64,
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    },
    Immediate {
        imm: u64,
        solicited: bool,
    },
    LocalInvalidate {
        stag: u32,
    },
    /// Send with Immediate Data, the four variants of the RDMAP version 2 draft (needs
    /// version 2 negotiated).
    SendImm {
        solicited: bool,
        invalidate: Option<u32>,
        imm: u64,
    },
    /// RDMA Read V2 (version 2 draft): the response is untagged, so the sink needs only
    /// local write access and is never exposed to the peer.
    ReadV2 {
        remote_stag: u32,
        remote_to: u64,
    },
    /// Bind a memory window (allocated with `alloc_mw`) to `len` bytes at tagged offset `to`
    /// of the memory region `mr`, with `access` (Verbs section 7.3).
    BindMw {
        mw: u32,
        mr: u32,
        to: u64,
        len: u64,
        access: Access,
    },
    /// Fast-register: make the reserved STag `stag` name `len` bytes at `offset` of the memory
    /// the region `source` maps, with `access`, VA-based at `base_to` (0 for zero-based).
    FastRegister {
        stag: u32,
        source: u32,
        offset: u64,
        len: u64,
        access: Access,
        base_to: u64,
    },
}

impl SendOp {
    /// Swap, offered as CmpSwap with a zero compare mask (always equal) and an all-ones swap
    /// mask: an unconditional 64-bit swap per RFC 7306 section 5.1.2's pseudocode.
    pub fn swap(remote_stag: u32, remote_to: u64, swap: u64) -> SendOp {
        SendOp::CmpSwap {
            remote_stag,
            remote_to,
            compare: 0,
            compare_mask: 0,
            swap,
            swap_mask: u64::MAX,
        }
    }

    /// A plain compare-and-swap: all compare and swap bits count.
    pub fn cmp_swap(remote_stag: u32, remote_to: u64, compare: u64, swap: u64) -> SendOp {
        SendOp::CmpSwap {
            remote_stag,
            remote_to,
            compare,
            compare_mask: u64::MAX,
            swap,
            swap_mask: u64::MAX,
        }
    }
}

/// A Send Queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    pub sgl: [Sge; MAX_SGE],
    pub num_sge: u8,
    pub signaled: bool,
    /// Read fence: wait until all prior Reads and atomics completed (Verbs 8.2.2.2).
    pub read_fence: bool,
    /// Local fence: wait until every prior WR completed (Verbs 8.2.2.2).
    pub local_fence: bool,
    /// Inline data: the payload travels in the WR (`inline[..inline_len]`), not by STag.
    pub inline: [u8; MAX_INLINE],
    pub inline_len: u8,
    pub is_inline: bool,
    /// Set when the WR was accepted although it cannot run (see [`crate::Rnic::post_send_failed`]):
    /// it completes with this status in its turn instead of running.
    pub(crate) refused: Option<Status>,
}

impl SendWr {
    pub fn new(wr_id: u64, op: SendOp, sgl: &[Sge]) -> SendWr {
        let mut s = [Sge::default(); MAX_SGE];
        let n = sgl.len().min(MAX_SGE);
        s[..n].copy_from_slice(&sgl[..n]);
        SendWr {
            wr_id,
            op,
            sgl: s,
            num_sge: n as u8,
            signaled: true,
            read_fence: false,
            local_fence: false,
            inline: [0; MAX_INLINE],
            inline_len: 0,
            is_inline: false,
            refused: None,
        }
    }

    /// A Send or Write whose payload is copied into the WR (at most [`MAX_INLINE`] bytes).
    pub fn with_inline(wr_id: u64, op: SendOp, data: &[u8]) -> Option<SendWr> {
        if data.len() > MAX_INLINE {
            return None;
        }
        let mut wr = SendWr::new(wr_id, op, &[]);
        wr.inline[..data.len()].copy_from_slice(data);
        wr.inline_len = data.len() as u8;
        wr.is_inline = true;
        Some(wr)
    }
    pub fn sgl(&self) -> &[Sge] {
        &self.sgl[..self.num_sge as usize]
    }
    pub fn length(&self) -> u64 {
        if self.is_inline {
            return self.inline_len as u64;
        }
        self.sgl().iter().map(|s| s.len as u64).sum()
    }
}

/// A Receive Queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sgl: [Sge; MAX_SGE],
    pub num_sge: u8,
    /// Set when the WR was accepted although it cannot be used (see
    /// [`crate::Rnic::post_recv_failed`]): the message that consumes it completes it with
    /// this status and ends the stream.
    pub(crate) refused: Option<Status>,
}

impl RecvWr {
    pub fn new(wr_id: u64, sgl: &[Sge]) -> RecvWr {
        let mut s = [Sge::default(); MAX_SGE];
        let n = sgl.len().min(MAX_SGE);
        s[..n].copy_from_slice(&sgl[..n]);
        RecvWr {
            wr_id,
            sgl: s,
            num_sge: n as u8,
            refused: None,
        }
    }
    pub fn sgl(&self) -> &[Sge] {
        &self.sgl[..self.num_sge as usize]
    }
    pub fn capacity(&self) -> u64 {
        self.sgl().iter().map(|s| s.len as u64).sum()
    }
}

/// A work completion. `Default` is a blank slot for `poll_cq` output arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub qp: QpId,
    pub opcode: WcOpcode,
    pub status: Status,
    pub byte_len: u32,
    pub imm: Option<u64>,
    pub invalidated_stag: Option<u32>,
    pub solicited: bool,
}

impl WorkCompletion {
    /// A completion with no immediate data, invalidated STag or solicited flag.
    pub fn new(
        wr_id: u64,
        qp: QpId,
        opcode: WcOpcode,
        status: Status,
        byte_len: u32,
    ) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            qp,
            opcode,
            status,
            byte_len,
            ..WorkCompletion::default()
        }
    }
}

/// A failed verb (the Verbs spec's immediate errors), returned at post/modify time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerbsError {
    InvalidQp,
    InvalidCq,
    InvalidPd,
    InvalidStag,
    /// The QP's state does not allow the verb (e.g. posting sends in Idle).
    InvalidQpState,
    /// The requested transition is not in the Verbs spec's state diagram.
    InvalidModify,
    QueueFull,
    TooManySge,
    /// The Read sink must be registered with remote write access on iWARP (RFC 5040 places
    /// the Read Response as a tagged write into it).
    ReadSinkNeedsRemoteWrite,
    /// Atomics need exactly one 8-byte, 8-byte aligned result SGE.
    InvalidAtomicSge,
    /// The operation needs RDMAP version 2 (negotiated) or extensions the peer lacks.
    NotNegotiated,
    OutOfResources,
    /// Inline data only for Send and Write, up to MAX_INLINE bytes.
    InvalidInline,
    InvalidSrq,
    /// Valid windows or fast-registered STags still depend on it: a region they point into,
    /// or a QP windows are bound on.
    StagInUse,
    /// More completions are on the CQ than the size asked for (Modify CQ).
    CqTooSmall,
    /// "Invalid Access Rights requested" of Register MR (Verbs section 9.2.6.2): Remote
    /// Write, or the atomics that write too, without Local Write (section 7.4.2, figure 18).
    InvalidAccess,
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::ReadSinkNeedsRemoteWrite => f.write_str(
                "RDMA Read sink must be registered with remote write access on iWARP (the Read \
                 Response is placed as a tagged write, RFC 5040 section 4.5)",
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

impl std::error::Error for VerbsError {}

/// Asynchronous events (Verbs section 8.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// The peer sent a Terminate.
    TerminateReceived {
        qp: QpId,
        cause: iwarp_wire::TermCause,
    },
    /// We sent a Terminate because of what the peer sent.
    TerminateSent {
        qp: QpId,
        cause: iwarp_wire::TermCause,
    },
    /// A CQ overflowed: completions were lost, the QPs using it go to Error.
    CqOverflow { cq: CqId },
    /// The QP entered Error.
    QpError { qp: QpId },
    /// The peer closed the connection gracefully.
    ConnectionClosed { qp: QpId },
    /// An S-RQ fell below the limit its consumer armed (Verbs section 8.4).
    SrqLimitReached { srq: SrqId },
}
