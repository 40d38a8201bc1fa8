//! iwarp-control: the control plane of the software RNIC (the part a kernel driver, the
//! connection manager and the port mapper play for a hardware RNIC).
//!
//! Everything in this library is sans-IO: no sockets, no clock of its own (callers pass `now`
//! in milliseconds), no shared memory. The `iwarp-control` binary (src/main.rs) wires these
//! pieces to the application socket and to the daemon's command ring.
//!
//! - [`stag`]: STag allocation, a 24-bit index and an 8-bit key (RFC 5040 section 2.1),
//!   re-keyed on re-registration and invalidation so a stale STag is refused.
//! - [`resources`]: the tables of PDs, CQs, S-RQs, QPs, MRs and MWs of every application,
//!   with the limits of the configuration (the Query RNIC answers, Verbs section 8.1),
//!   ownership checks, destroy-order checks and per-application cleanup.
//! - [`app_proto`]: control.sock as control speaks it: the protocol of `iwarp_abi::app`,
//!   with control's errors and events turned into the protocol's.
//! - [`app_server`]: each application request checked and turned into a reply plus the
//!   daemon commands to run; per-application cleanup on socket EOF.
//! - [`client`]: the bounded queue of replies and events waiting for one application's
//!   socket, written without blocking.
//! - [`cm`]: one connection's setup as a state machine: MPA Request/Reply (RFC 5044 section 7,
//!   RFC 6581), private data, accept/reject, timeouts with a reason.
//! - [`conn_manager`]: listen/connect/accept/reject/disconnect for applications over the
//!   daemon's TCP upcalls, one [`cm::Connection`] each, QpRts when setup is done.
//! - [`daemon_link`]: negotiated parameters and per-application teardown as daemon
//!   commands, and the watcher of the daemon's generation/heartbeat words.
//! - [`error`]: the crate's one error type, one variant per cause the Verbs spec names.

pub mod app_proto;
pub mod app_server;
pub mod client;
pub mod cm;
pub mod conn_manager;
pub mod daemon_link;
pub mod error;
pub mod resources;
pub mod stag;

pub use error::Error;
