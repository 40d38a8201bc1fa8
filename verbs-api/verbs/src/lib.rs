//! iwarp-verbs: the library applications link, shaped by the RDMA Verbs specification
//! (draft-hilland-rddp-verbs) and named as libibverbs users expect.
//!
//! The slow path ([`Context`]: open the RNIC, PDs, CQs, QPs, registered [`SharedBuffer`]s,
//! connections, events) talks to `iwarp-control` over its Unix socket. The fast path: [`QueuePair::post_send`] / [`QueuePair::post_recv`] write
//! work queue entries into shared-memory rings and publish them with one release store of the
//! producer index (the doorbell); [`CompletionQueue::poll_cq`] reads completions from a ring.
//! No system call is made on either path.
//!
//! Ownership encodes the destroy order: a [`QueuePair`] holds its [`CompletionQueue`]s alive;
//! a posted work request holds the [`MemoryRegion`]s it names alive until its completion is
//! polled, so a region cannot be deregistered while posted work uses it
//! ([`MemoryRegion::deregister`] says [`Error::MrInUse`] instead).
//!
//! A failed verb is an [`Error`]; a failed *completion* is data: [`WorkCompletion::status`].

pub mod adopt;
mod bell;
pub mod buffer;
pub mod context;
pub mod cq;
pub mod error;
mod link;
pub mod mr;
pub mod qp;
mod shm;
pub mod srq;
pub mod wr;

pub use adopt::UserMr;
pub use buffer::SharedBuffer;
pub use context::{
    ConnSettings, ConnectFailure, ConnectRequest, Context, Established, Event, ProtectionDomain,
    QpInitAttr, RnicAttr, Rtr,
};
pub use cq::{CompletionQueue, WcOpcode, WcStatus, WorkCompletion};
pub use error::Error;
pub use iwarp_abi::app::ErrorCode;
pub use iwarp_abi::id::{CqId, PdId, QpId, SrqId, Stag};
pub use iwarp_abi::qp::{QpState, Terminated};
pub use iwarp_abi::wqe::access;
pub use mr::{FastRegStag, MemoryRegion, MemoryWindow};
pub use qp::{PostBatch, QueuePair, SendWr, WrOpcode};
pub use srq::SharedReceiveQueue;
pub use wr::{RecvWr, Sg};
