//! iwarp-bench: the harness that says whether this iWARP stack is fast enough.
//!
//! It measures through the public verbs library, as an application would, and measures the
//! alternatives in the same run so that a ratio holds on a noisy machine: kernel TCP on
//! loopback (what users would otherwise pick) and the shared-memory floor (two pinned threads
//! or processes bouncing a cache line).
//!
//! - [`cli`]: the command line and its checks ([`cli::Plan::resolve`] refuses nonsense).
//! - [`transport`]: the [`transport::PingPong`] / [`transport::Stream`] traits and the
//!   transports: [`transport::tcp`], [`transport::shm`], [`transport::verbs`].
//! - [`runner`]: the latency, closed-loop and open-loop measurement loops; [`setup_rate`]:
//!   connections per second through the connection manager.
//! - [`limits`]: the descriptor and mapping limits runs of thousands of QPs meet.
//! - [`bench`](mod@bench): runs a plan; [`report`]: the results; [`output`]: table, JSON, HdrHistogram
//!   log, SVG plots; [`stages`]: the per-stage breakdown.
//!
//! The engine alone and the daemon's frame path alone are measured next to their code:
//! `iwarp-engine`'s `engine-pair` and `iwarpd`'s `node-pair` examples.

pub mod bench;
pub mod cli;
pub mod daemons;
pub mod error;
pub mod limits;
pub mod output;
pub mod report;
pub mod runner;
pub mod scale;
pub mod setup_rate;
pub mod stages;
pub mod transport;
pub mod workload;

pub use error::{BenchError, Result};
