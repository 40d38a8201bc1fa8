//! The iWARP RNIC engine, sans-IO.
//!
//! The engine is deterministic: it owns no socket, NIC, thread or clock. Its caller (the
//! daemon's poll loop, or a test) hands it the bytes of each QP's TCP stream
//! ([`Rnic::handle_stream`]), asks it for FPDUs to send ([`Rnic::poll_transmit`], one FPDU
//! per call, never larger than the negotiated maximum so each fits one TCP segment), posts
//! work ([`Rnic::post_send`], [`Rnic::post_recv`]) and collects completions
//! ([`Rnic::poll_cq`]) and asynchronous events ([`Rnic::poll_event`]).
//!
//! Memory is registered by pointer and length ([`Rnic::register_mr`]); the engine only ever
//! copies into it or runs atomic instructions on it (`raw.rs` is the one module with
//! `unsafe`), after checking STag, PD, access rights, bounds and alignment.
//!
//! Files follow siw's split: `qp.rs` (states, connection state), `tx.rs` (transmit),
//! `rx.rs` (receive and placement), `mem.rs` (STags and checks), `cq.rs` (completions),
//! `types.rs` (work requests, completions, statuses).

mod cq;
mod mem;
mod qp;
mod raw;
mod rnic;
mod rx;
mod tx;
mod types;

pub use cq::Notify;
pub use mem::AccessError;
pub use qp::{transition_allowed, ConnParams, QpState};
pub use raw::masked_add;
pub use rnic::{QpCaps, Rnic};
pub use types::{
    Access, AsyncEvent, RecvWr, SendOp, SendWr, Sge, Status, VerbsError, WcOpcode, WorkCompletion,
    MAX_SGE,
};
