//! iwarp-control
