//! iwarp-bench: measurements of the stack.
//!
//! Today it holds `engine-pair`, the throughput micro-benchmark of the sans-IO engine alone
//! (two engines on one thread, bytes moved through memory). The latency harness over the
//! verbs library (issue 6) comes with the daemon and the control plane.
