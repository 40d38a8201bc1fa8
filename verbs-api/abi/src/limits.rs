//! The RNIC's resource limits, what Query RNIC answers (Verbs section 8.1). The configuration's
//! `[limits]` table deserializes into this type; control enforces it and the library reports
//! it.

use serde::{Deserialize, Serialize};

/// Resource limits: the answers of Query RNIC (Verbs section 8.1).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_qp: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_srq: u32,
    pub max_mr: u32,
    pub max_mw: u32,
    pub max_pd: u32,
    pub max_sq_depth: u32,
    pub max_rq_depth: u32,
    pub max_sge: u32,
    pub max_ird: u16,
    pub max_ord: u16,
    pub max_inline: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_qp: 1024,
            max_cq: 1024,
            max_cqe: 65536,
            max_srq: 256,
            max_mr: 65536,
            max_mw: 65536,
            max_pd: 1024,
            max_sq_depth: 4096,
            max_rq_depth: 4096,
            max_sge: 4,
            max_ird: 128,
            max_ord: 128,
            max_inline: 64,
        }
    }
}
