//! dpdk-sys
