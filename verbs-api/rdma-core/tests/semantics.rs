//! rdma-core semantics that need a connection, checked with C programs built here against
//! rdma-core's headers and our libraries, both ends in one process on two endpoints:
//! solicited-only completion notification and the end of a listen.

mod common;

use common::{compile, joined, pair, run};

fn run_c(name: &str) -> String {
    if !common::have("/usr/include/rdma/rdma_cma.h") {
        return String::new();
    }
    let p = pair();
    let exe = compile(&p, name);
    let text = run(exe.to_str().unwrap(), &[], &joined(&p.runtimes));
    assert!(!text.contains("FAILED"), "{text}");
    assert!(text.ends_with("done\n"), "{text}");
    text
}

/// Verbs section 8.3.4 (Request Completion Notification): armed for solicited completions
/// only, the channel stays quiet for an unsolicited Send and fires once for a Send with
/// Solicited Event, a Write with Immediate and Solicited Event, and an error completion.
#[test]
fn solicited_only_notification() {
    let text = run_c("solicited");
    if !text.is_empty() {
        assert_eq!(text.matches(": ok").count(), 27, "{text}");
    }
}

/// `rdma_destroy_id` on a listening identifier closes the port: it can be listened on
/// again, and a connect while nobody listens is refused (UNREACHABLE) with no request on
/// the old listener's channel.
#[test]
fn destroying_a_listener_stops_listening() {
    let text = run_c("listen");
    if !text.is_empty() {
        assert_eq!(text.matches(": ok").count(), 15, "{text}");
    }
}
