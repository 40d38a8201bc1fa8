//! Devices through Debian's unmodified `ibv_devices` and `ibv_devinfo`: one device per
//! reachable endpoint of `IWARP_RUNTIME_DIR`, described as an iWARP RNIC on an Ethernet port
//! whose GID 0 and node GUID come from the MAC as Linux siw forms them.

mod common;

use common::{compile, joined, pair, run};

#[test]
fn ibv_devices_lists_each_reachable_endpoint() {
    if !common::have("/usr/bin/ibv_devices") {
        return;
    }
    let p = pair();
    // A directory with no endpoint in it is left out.
    let nothing = p.dir.path().join("nothing");
    let list = format!("{}:{}", joined(&p.runtimes), nothing.display());
    let text = run("/usr/bin/ibv_devices", &[], &list);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    // Node GUID: the MAC's modified EUI-64 (siw's addrconf_addr_eui48).
    assert!(rows[0][0].starts_with("t-a-"), "{text}");
    assert_eq!(rows[0][1], "000000fffe002a01", "{text}");
    assert!(rows[1][0].starts_with("t-b-"), "{text}");
    assert_eq!(rows[1][1], "000000fffe002a02", "{text}");
}

#[test]
fn ibv_devinfo_describes_an_iwarp_rnic_on_ethernet() {
    if !common::have("/usr/bin/ibv_devinfo") {
        return;
    }
    let p = pair();
    let text = run("/usr/bin/ibv_devinfo", &["-v"], &joined(&p.runtimes[..1]));
    for want in [
        "transport:\t\t\tiWARP (1)",
        "node_guid:\t\t\t0000:00ff:fe00:2a01",
        "phys_port_cnt:\t\t\t1",
        "state:\t\t\tPORT_ACTIVE (4)",
        "max_mtu:\t\t4096 (5)",
        // The embedded Ethernet's IP MTU is 1500: the largest IB MTU within it.
        "active_mtu:\t\t1024 (3)",
        "link_layer:\t\tEthernet",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    // max_qp_rd_atom is the IRD the endpoint grants, and not zero.
    let ird: u32 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("max_qp_rd_atom:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no max_qp_rd_atom in:\n{text}"));
    assert!(ird > 0, "{text}");
    // ibv_devinfo prints a GID only when its second half is not zero; siw's GID 0 (the
    // MAC, then zeros) is never printed, and neither is ours: tests/c/query.c reads it.
    assert!(!text.contains("GID["), "{text}");
}

/// A C program built here against rdma-core's headers and our library: the inline helpers
/// of verbs.h (`ibv_query_port` and `ibv_query_device_ex` through the `verbs_context`) and the
/// GID calls.
#[test]
fn verbs_h_inline_helpers_and_gid() {
    if !common::have("/usr/include/infiniband/verbs.h") {
        return;
    }
    let p = pair();
    let exe = compile(&p, "query");
    let text = run(exe.to_str().unwrap(), &[], &joined(&p.runtimes[1..]));
    for want in [
        "port state=4 link_layer=2 active_mtu=3 gid_tbl_len=1",
        "gid 0200:0000:2a02:0000:0000:0000:0000:0000",
        "gid_ex 0200:0000:2a02:0000:0000:0000:0000:0000 type=0",
        "transport=1 node_type=4",
        "device_ex phys_port_cnt=1 atomic_cap=1",
        "bad port: EINVAL",
        "bad gid index: -1",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
}

/// PD, regions over malloc'd unaligned memory, CQ, QP, S-RQ and window through rdma-core's
/// API and the inline fast path (`ibv_post_recv`, `ibv_poll_cq`, `ibv_post_srq_recv`,
/// `ibv_alloc_mw` through `ibv_context.ops`); what iWARP cannot do is refused with siw's
/// `EOPNOTSUPP`.
#[test]
fn resources_and_the_inline_fast_path() {
    if !common::have("/usr/include/infiniband/verbs.h") {
        return;
    }
    let p = pair();
    let exe = compile(&p, "resources");
    let text = run(exe.to_str().unwrap(), &[], &joined(&p.runtimes[..1]));
    assert!(!text.contains("FAILED"), "{text}");
    assert!(text.ends_with("done\n"), "{text}");
    assert_eq!(text.matches(": ok").count(), 26, "{text}");
}

/// Completion channels as file descriptors: `O_NONBLOCK` gives `EAGAIN`, `poll` wakes on
/// the event `ibv_req_notify_cq` asked for (Verbs section 8.3.4), and the event names the
/// CQ and its context.
#[test]
fn completion_channel_is_a_pollable_fd() {
    if !common::have("/usr/include/infiniband/verbs.h") {
        return;
    }
    let p = pair();
    let exe = compile(&p, "events");
    let text = run(exe.to_str().unwrap(), &[], &joined(&p.runtimes[..1]));
    assert!(!text.contains("FAILED"), "{text}");
    assert!(text.ends_with("done\n"), "{text}");
    assert_eq!(text.matches(": ok").count(), 14, "{text}");
}

/// The endpoint goes away: the open context hears IBV_EVENT_DEVICE_FATAL on its async_fd,
/// and an rdma_cm identifier on it RDMA_CM_EVENT_DEVICE_REMOVAL.
#[test]
fn endpoint_gone_is_device_fatal_and_device_removal() {
    use std::io::{BufRead, Write};
    if !common::have("/usr/include/rdma/rdma_cma.h") {
        return;
    }
    let mut p = pair();
    let exe = compile(&p, "removal");
    let mut child = common::with_our_libs(exe.to_str().unwrap())
        .env("IWARP_RUNTIME_DIR", joined(&p.runtimes[..1]))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    while !text.contains("ready") {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "{text}");
        text += &line;
    }
    p.stop(0);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    text += &rest;
    assert!(child.wait().unwrap().success(), "{text}");
    assert!(!text.contains("FAILED"), "{text}");
    assert!(text.ends_with("done\n"), "{text}");
}
