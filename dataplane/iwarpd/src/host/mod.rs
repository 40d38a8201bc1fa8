//! The daemon-side glue between the shared rings of `iwarp-abi` and the engine.
//!
//! - [`convert`]: WQE records to engine work requests, engine completions to CQE records,
//!   engine events to async-event records and upcalls — every field of an application's
//!   record is checked, and a bad one becomes a completion with a Verbs status, never a panic.
//! - [`fastpath`]: per-QP and per-CQ pumps: poll the SQ/RQ producer indices, post to the
//!   engine, drain the engine's completions into CQ rings (an overflowing CQ ring raises
//!   `CqOverflow` and puts its QPs in Error, Verbs section 8.3.3).
//!
//! Not here yet: the command-ring consumer (map QP ring and memory segments, relay TCP
//! bytes until `QpRts`), which needs the node's connection API (README, "Not supported").

pub mod convert;
pub mod fastpath;
