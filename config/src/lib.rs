//! iwarp-config
