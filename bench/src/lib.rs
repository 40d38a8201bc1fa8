//! iwarp-bench
