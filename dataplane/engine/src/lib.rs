//! iwarp-engine
