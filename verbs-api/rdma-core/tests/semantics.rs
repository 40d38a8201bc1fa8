//! rdma-core semantics that need a connection, checked with C programs built here against
//! rdma-core's headers and our libraries, both ends in one process on two endpoints:
//! solicited-only completion notification, silent unsignaled completions and the end of a
//! listen.

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

/// `rdma_destroy_id` on a listening identifier ends the listen. With no linger
/// (`IWARP_LISTEN_LINGER_MS=0`) the port closes at once: it can be listened on again, and a
/// connect is refused (UNREACHABLE), each of 200 more too, with no request on the old
/// listener's channel. With the
/// default linger a connect in it is held and rejected when it ends, the port closed; with a
/// long one the held request goes to the next identifier listening on the port.
#[test]
fn destroying_a_listener_stops_listening() {
    if !common::have("/usr/include/rdma/rdma_cma.h") {
        return;
    }
    let p = pair();
    let exe = compile(&p, "listen");
    for (mode, linger, checks) in [
        ("refuse", Some("0"), 9),
        ("expire", None, 8),
        ("takeover", Some("600000"), 8),
    ] {
        let mut c = common::with_our_libs(exe.to_str().unwrap());
        c.arg(mode).env("IWARP_RUNTIME_DIR", joined(&p.runtimes));
        if let Some(ms) = linger {
            c.env("IWARP_LISTEN_LINGER_MS", ms);
        }
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{mode}: {text}");
        assert!(!text.contains("FAILED"), "{mode}: {text}");
        assert!(text.ends_with("done\n"), "{mode}: {text}");
        assert_eq!(text.matches(": ok").count(), checks, "{mode}: {text}");
    }
}

/// Verbs section 8.1.3.1 (Signaled Completions): unsignaled Sends that succeed complete
/// silently; only the signaled one after them is polled.
#[test]
fn unsignaled_sends_complete_silently() {
    let text = run_c("unsignaled");
    if !text.is_empty() {
        assert_eq!(text.matches(": ok").count(), 14, "{text}");
    }
}
