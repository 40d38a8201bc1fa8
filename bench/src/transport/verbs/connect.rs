//! The slow path of the verbs transport: a context on each endpoint (iwarp-control's
//! `control.sock`), then per connected pair a PD, send and receive CQs, a QP and a registered
//! shared buffer on each side, and the connection itself (listen on `b`, connect from `a`,
//! accept), which is all an application does before its first work request.
//!
//! This is the one part of the harness that depends on iwarp-verbs' context and connection
//! API; everything after it uses only the fast path (post send, post receive, poll CQ).

use super::Pair;
use crate::daemons::Endpoints;
use crate::error::{BenchError, Result};
use std::path::PathBuf;

/// A verbs context on each endpoint.
pub struct Contexts {
    a: PathBuf,
    b: PathBuf,
}

impl Contexts {
    /// Opens a context on each endpoint (through its control socket).
    pub fn open(endpoints: &Endpoints) -> Result<Contexts> {
        let contexts = Contexts {
            a: endpoints.a.control_socket(),
            b: endpoints.b.control_socket(),
        };
        Err(contexts.unavailable())
    }

    fn unavailable(&self) -> BenchError {
        BenchError::transport(
            "verbs",
            format!(
                "iwarp-verbs cannot open a context yet (no client for {} and {}): its \
                 connection API is not written; run with --ops none for the baselines alone",
                self.a.display(),
                self.b.display()
            ),
        )
    }

    /// Creates and connects one pair of QPs with `depth`-deep queues and `buf_len`-octet
    /// registered buffers (local write, remote read / write / atomic access).
    pub fn connect_pair(&self, _depth: usize, _buf_len: usize) -> Result<Pair> {
        Err(self.unavailable())
    }
}
