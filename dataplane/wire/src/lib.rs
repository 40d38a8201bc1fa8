//! iwarp-wire
