//! iwarpd
