//! Generates bindings against the distribution's DPDK (found with pkg-config) and compiles
//! the C shim for DPDK's inline fast-path functions.

use std::env;
use std::path::PathBuf;

fn main() {
    let lib = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .expect("DPDK 22.11 not found by pkg-config: install libdpdk-dev (scripts/setup.sh does)");
    // DPDK's cflags carry `-include rte_config.h` (every DPDK header needs it first) and
    // `-march=corei7` (Debian's baseline build): pass them all to cc and to bindgen's clang.
    // The pkg-config crate above already printed the link flags: Debian's shared librte_*
    // libraries (`-Wl,--as-needed` keeps only those we call). The PMDs (net_memif,
    // net_af_packet, net_ring, NIC drivers) are not linked: Debian's librte_eal loads every
    // plugin in /usr/lib/<triplet>/dpdk/pmds-23.0 at rte_eal_init.
    let extra: Vec<String> = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();

    let mut build = cc::Build::new();
    build.file("src/shim.c").warnings(false);
    for f in &extra {
        build.flag(f);
    }
    build.compile("iwdpdkshim");

    let mut bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("rte_eal_init|rte_eal_cleanup|rte_eth_dev_count_avail|rte_eth_dev_configure|rte_eth_rx_queue_setup|rte_eth_tx_queue_setup|rte_eth_dev_start|rte_eth_dev_stop|rte_eth_dev_close|rte_eth_macaddr_get|rte_eth_promiscuous_enable|rte_eth_dev_socket_id|rte_eth_dev_info_get|rte_eth_dev_get_port_by_name|rte_pktmbuf_pool_create|rte_mempool_free|rte_strerror|rte_socket_id|rte_eth_link_get_nowait|iw_.*")
        .allowlist_type("rte_eth_conf|rte_ether_addr|rte_mbuf|rte_mempool|rte_eth_dev_info|rte_eth_link")
        .allowlist_var("RTE_MBUF_DEFAULT_BUF_SIZE|RTE_ETHER_.*|IW_.*")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false);
    for f in &extra {
        bindings = bindings.clang_arg(f);
    }
    for p in &lib.include_paths {
        bindings = bindings.clang_arg(format!("-I{}", p.display()));
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindings
        .generate()
        .expect("bindgen failed on DPDK's headers")
        .write_to_file(out.join("bindings.rs"))
        .unwrap();
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed=src/shim.h");
}
