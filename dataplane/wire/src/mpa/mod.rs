//! MPA
