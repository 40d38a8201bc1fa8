//! iwarp-verbs
