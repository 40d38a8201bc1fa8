//! The iWARP RNIC engine, sans-IO: deterministic, with no socket, NIC, thread or clock. The
//! caller feeds each QP's TCP byte stream to [`Rnic::handle_stream`], takes FPDUs from
//! [`Rnic::poll_transmit`] (each fits one TCP segment), posts work ([`Rnic::post_send`],
//! [`Rnic::post_recv`]) and collects [`Rnic::poll_cq`] and [`Rnic::poll_event`]. Memory is
//! registered by pointer and length and only copied into or operated on atomically after
//! STag, PD, rights, bounds and alignment are checked (`raw.rs` holds all the `unsafe`).
//! Nothing is timed: teardown deadlines are TCP's, ending in [`Rnic::connection_lost`].
//! The call sequence and files are in docs/engine.md.

mod cq;
pub mod fifo;
mod id_index;
mod mem;
mod qp;
mod raw;
mod rnic;
mod rx;
mod tx;
mod types;

pub use cq::Notify;
pub use id_index::{IdIndex, DENSE_IDS};
pub use iwarp_abi::id::{CqId, PdId, QpId, SrqId};
pub use mem::AccessError;
pub use qp::{ConnParams, PeerToPeer, QpState, RtrKind, RTR_STAG};
pub use raw::masked_add;
pub use rnic::{QpCaps, Rnic, Stats};
pub use types::{
    Access, AsyncEvent, RecvWr, SendOp, SendWr, Sge, Status, VerbsError, WcOpcode, WorkCompletion,
    MAX_INLINE, MAX_SGE,
};
