//! The C ABI as C programs use it: `examples/pair.c` and `examples/extensions.c` are
//! compiled against `include/iwarp_verbs.h` and `libiwarpverbs.so`, and two copies of each
//! (server and client, separate processes) run over two real endpoints.

use iwarp_testkit::{self as testkit, Proc};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn endpoint(dir: &Path, name: &str, n: u8) -> (Proc, Proc) {
    let daemon = testkit::start_daemon(dir, name, n, 66, &[]);
    (testkit::start_control(&dir.join(name)), daemon)
}

/// Compiles `examples/<name>.c` with warnings as errors into `dir`.
fn compile(dir: &Path, name: &str) -> PathBuf {
    // `cargo test` builds the cdylib among the test's dependencies (target/<profile>/deps).
    let lib_dir = testkit::target_dir().join("deps");
    assert!(
        lib_dir.join("libiwarpverbs.so").exists(),
        "cargo builds the cdylib next to the tests"
    );
    let exe = dir.join(name);
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-D_POSIX_C_SOURCE=200809L",
            "-o",
        ])
        .arg(&exe)
        .arg(crate_dir.join(format!("examples/{name}.c")))
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-liwarpverbs")
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e} (a C compiler is needed: build-essential)"));
    assert!(
        out.status.success(),
        "compiling {name}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `exe` as server on endpoint b (listening on `port`) and as client on endpoint a;
/// both must succeed. Returns what the client and the server printed.
fn run_pair(dir: &Path, exe: &Path, port: u16) -> (String, String) {
    let _a = endpoint(dir, "a", 1);
    let _b = endpoint(dir, "b", 2);
    let mut server = Proc(
        Command::new(exe)
            // cargo's LD_LIBRARY_PATH may name an older copy in target/<profile>: use the
            // rpath to the library this test was built with.
            .env_remove("LD_LIBRARY_PATH")
            .arg("server")
            .arg(dir.join("b"))
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let client = Command::new(exe)
        .env_remove("LD_LIBRARY_PATH")
        .arg("client")
        .arg(dir.join("a"))
        .args(["10.66.0.2", &port.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&client.stdout).into_owned();
    assert!(
        client.status.success(),
        "client failed: {text}\n{}",
        String::from_utf8_lossy(&client.stderr)
    );
    let st = server.0.wait().unwrap();
    let mut served = String::new();
    if let Some(mut out) = server.0.stdout.take() {
        let _ = out.read_to_string(&mut served);
    }
    assert!(st.success(), "server failed: {served}");
    (text, served)
}

#[test]
fn the_c_example_runs_every_operation_between_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path(), "pair");
    let (text, _) = run_pair(dir.path(), &exe, 7200);
    for op in [
        "Send ",
        "Send with Immediate",
        "RDMA Write",
        "Write with Immediate",
        "RDMA Read",
        "FetchAdd",
        "CmpSwap",
    ] {
        assert!(text.contains(op), "{op} missing from:\n{text}");
    }
}

/// S-RQ with its limit event, a window bound and written through (and its region refused
/// deregistration meanwhile), a fast-registered STag read through, Local Invalidate, and the
/// Terminate a Read through the invalidated STag earns, as asynchronous events on both sides.
/// Each step is checked by the C programs themselves (they exit nonzero otherwise).
#[test]
fn the_c_extensions_example_runs_srq_windows_fast_register_and_events() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path(), "extensions");
    let (client, server) = run_pair(dir.path(), &exe, 7201);
    for line in [
        "server: S-RQ limit event ok",
        "server: write through the window ok",
        "server: Terminate sent",
        "server: ok",
    ] {
        assert!(server.contains(line), "{line} missing from:\n{server}");
    }
    for line in [
        "client: read through the fast-registered STag ok",
        "client: Terminate received",
        "client: ok",
    ] {
        assert!(client.contains(line), "{line} missing from:\n{client}");
    }
}
