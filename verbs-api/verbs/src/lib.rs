//! iwarp-verbs: the library applications link, shaped by the RDMA Verbs specification
//! (draft-hilland-rddp-verbs) and named as libibverbs users expect.
//!
//! This crate holds the fast path: [`QueuePair::post_send`] / [`QueuePair::post_recv`] write
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

pub mod cq;
pub mod error;
pub mod mr;
pub mod qp;

pub use cq::{CompletionQueue, WcOpcode, WcStatus, WorkCompletion};
pub use error::Error;
pub use mr::MemoryRegion;
pub use qp::{PostBatch, QueuePair, RecvWr, SendWr, Sg, WrOpcode};
