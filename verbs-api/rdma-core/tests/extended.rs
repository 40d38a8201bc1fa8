//! The extended verbs of `verbs.h` between two of our endpoints (`tests/c/wr_api.c`): every
//! operation posted through the `ibv_wr_*` API (`ibv_wr_post(3)`: built between
//! `ibv_wr_start` and `ibv_wr_complete`, dropped by `ibv_wr_abort`, errors reported by
//! `ibv_wr_complete`), every completion read through `ibv_cq_ex` (`ibv_start_poll`,
//! `ibv_next_poll`, `ibv_wc_read_*`) and once through `ibv_poll_cq` on `ibv_cq_ex_to_cq`;
//! and what creation refuses (TSO, completion timestamps).

mod common;

#[test]
fn every_operation_through_the_wr_api_and_cq_ex() {
    if !common::have("/usr/include/rdma/rdma_cma.h") {
        return;
    }
    let p = common::pair();
    let exe = common::compile(&p, "wr_api");
    let runtimes = format!("{}:{}", p.runtimes[0].display(), p.runtimes[1].display());
    // A hung program is stopped after a minute; its output so far says where it stopped.
    let out = common::with_our_libs("timeout")
        .arg("60")
        .arg(&exe)
        .env("IWARP_RUNTIME_DIR", runtimes)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    assert!(!text.contains("FAILED"), "{text}{err}");
    assert!(text.ends_with("done\n"), "{text}{err}");
    assert_eq!(text.matches(": ok").count(), 36, "{text}{err}");
}
