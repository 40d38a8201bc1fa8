//! The shared-memory contract of the stack: what iwarpd, iwarp-control and applications
//! agree on, byte for byte.
//!
//! - [`segment`]: named shared-memory segments backed by hugepages (a hugetlbfs mount or
//!   `memfd_create(MFD_HUGETLB)`) when free ones exist, else ordinary shared memory
//!   (`/dev/shm`) with one clear warning; every segment starts with a header (magic, ABI
//!   version, kind, size, creator pid).
//! - [`fdpass`]: segments passed as file descriptors over a Unix socket (`SCM_RIGHTS`).
//! - [`ring`]: a single-producer single-consumer ring of fixed-size `#[repr(C)]` slots in
//!   such a segment, with back-pressure (a full ring refuses, never overwrites) and batches
//!   published by one index store (one doorbell).
//! - [`wqe`]: the fast-path records: [`wqe::SendWqe`], [`wqe::RecvWqe`], [`wqe::Cqe`],
//!   [`wqe::AsyncEvent`].
//! - [`command`]: the control <-> daemon messages ([`command::Command`],
//!   [`command::Upcall`]) in fixed-size [`command::Msg`] slots.
//! - [`app`]: the application <-> control messages of control.sock ([`app::Request`],
//!   [`app::Reply`], [`app::Event`]).
//! - [`id`]: the typed ids of QPs, CQs, PDs, S-RQs and STags, control's, used by all.
//! - [`limits`]: the RNIC's resource limits (Query RNIC), which the configuration sets.
//! - [`qp`]: the QP state and Terminate cause both of those speak of.
//! - `codec`: the one encoding of every message (serde and postcard), panic-free on any
//!   input.
//! - [`daemon_shm`]: iwarpd's segment: per worker a command ring, an upcall ring and a
//!   heartbeat; the generation words.
//! - [`doorbell`]: per application a queue of the rings it posted to, so a daemon turn
//!   visits those rings and not every ring.
//! - [`wake`]: each worker's sleep word and doorbell pipe, so an idle worker sleeps in the
//!   kernel and a post from another process wakes it (no system call while it runs).
//! - [`process`]: whether a process named by pid (a segment's creator, a daemon) still
//!   runs, a zombie counting as gone.
//! - [`port_file`]: the endpoint's port (name, MAC, IPv4, MTU) as a file in its runtime
//!   directory, for libraries that describe the device without opening it.
//! - [`prefetch`]: cache hints, for the daemon's loops over many rings and connections;
//!   here because the rings are the lowest layer that asks for them.
//! - [`sync`]: the one place atomics come from, switched to `loom` under `cfg(loom)` so the
//!   ring's protocol is model-checked.
//!
//! Model check: `RUSTFLAGS="--cfg loom" cargo test -p iwarp-abi --release loom`.

pub mod app;
mod codec;
pub mod command;
pub mod daemon_shm;
pub mod doorbell;
pub mod error;
pub mod fdpass;
pub mod id;
pub mod limits;
#[cfg(not(loom))]
pub mod notify;
pub mod port_file;
pub mod prefetch;
pub mod process;
pub mod qp;
pub mod ring;
pub mod segment;
pub mod sync;
#[cfg(not(loom))]
pub mod wake;
pub mod wqe;

pub use error::Error;

/// The version of everything in this crate that crosses a process boundary. Bump it on any
/// change of a `#[repr(C)]` layout, a tag or an enum value, or of the order of a message's
/// variants or fields (the codec writes them in order, without names).
pub const ABI_VERSION: u32 = 7;
