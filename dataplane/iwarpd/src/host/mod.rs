//! The daemon-side glue between the shared rings of `iwarp-abi` and the engine.
//!
//! - [`convert`]: WQE records to engine work requests, engine completions to CQE records,
//!   engine events to async-event records and upcalls — every field of an application's
//!   record is checked, and a bad one becomes a completion with a Verbs status, never a panic.
//! - [`fastpath`]: per-QP and per-CQ pumps: poll the SQ/RQ producer indices, post to the
//!   engine, drain the engine's completions into CQ rings (an overflowing CQ ring raises
//!   `CqOverflow` and puts its QPs in Error, Verbs section 8.3.3).
//!
//! - [`service`]: the command-ring consumer: control's commands run on the node (resources,
//!   memory registrations under control's STags, connections relayed until `QpRts`), and
//!   once per poll-loop turn the fast path of every QP.
//! - [`owners`]: the processes owning QPs, watched for their exit.

pub mod convert;
pub mod fastpath;
pub mod owners;
pub mod service;
