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
//! # The calls a daemon makes
//!
//! Set-up (slow path): [`Rnic::new`], [`Rnic::alloc_pd`], [`Rnic::create_cq`],
//! [`Rnic::create_srq`], [`Rnic::create_qp`] (QP in Idle), `register_mr` (unsafe: the memory
//! must stay mapped until [`Rnic::deregister_mr`]), [`Rnic::alloc_mw`],
//! [`Rnic::alloc_fastreg_stag`]. When MPA negotiation is done: [`Rnic::connect`]`(qp,
//! ConnParams)` moves the QP Idle -> RTS with CRC/markers per direction, IRD/ORD, RDMAP
//! version, the maximum FPDU (the MSS) and, in peer-to-peer mode, [`PeerToPeer`] (the RTR
//! kind and which side initiated MPA: the initiator's first FPDU is the RTR, the responder
//! sends nothing until it has it, RFC 6581 section 5).
//!
//! Per poll-loop turn, per QP: feed every received stream byte to [`Rnic::handle_stream`]
//! (it always consumes all of them); while [`Rnic::wants_transmit`], call
//! [`Rnic::poll_transmit`] into a buffer of at least the maximum FPDU and put each FPDU in
//! its own TCP segment; drain [`Rnic::poll_cq`] and [`Rnic::poll_event`]. Application
//! commands: [`Rnic::post_send`], [`Rnic::post_recv`], [`Rnic::post_srq_recv`],
//! [`Rnic::req_notify_cq`], [`Rnic::modify_qp`] (Closing for a graceful close, Error for
//! an abort, Terminate to send one; only the transitions of the Verbs state table). When TCP
//! ends: [`Rnic::connection_lost`]`(qp, graceful)`: the QP goes to Error (or Idle after a
//! finished graceful close) with every outstanding WR flushed. The daemon's own teardown
//! (destroy, a broken ring) uses [`Rnic::force_error`], which any state allows.
//!
//! Time: nothing in the engine is timed. iWARP has no RDMAP-level retransmission or
//! acknowledgement timers (TCP provides reliability), so teardown deadlines (a Closing that
//! never finishes, a peer that never closes after a Terminate) belong to the LLP: the
//! daemon's TCP user timeout ends in [`Rnic::connection_lost`]. This is why no call takes
//! `now` and there is no `next_timeout`.
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
pub use qp::{transition_allowed, ConnParams, PeerToPeer, QpState, RtrKind, RTR_STAG};
pub use raw::masked_add;
pub use rnic::{QpCaps, Rnic, Stats};
pub use types::{
    Access, AsyncEvent, RecvWr, SendOp, SendWr, Sge, Status, VerbsError, WcOpcode, WorkCompletion,
    MAX_INLINE, MAX_SGE,
};
