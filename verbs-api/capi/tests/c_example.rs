//! The C ABI as C programs use it: `examples/pair.c` is compiled against
//! `include/iwarp_verbs.h` and `libiwarpverbs.so`, and two copies of it (server and client,
//! separate processes) run every operation over two real endpoints.

use iwarp_testkit::{self as testkit, Proc};
use std::path::Path;
use std::process::Command;

fn endpoint(dir: &Path, name: &str, n: u8) -> (Proc, Proc) {
    let daemon = testkit::start_daemon(dir, name, n, 66, &[]);
    (testkit::start_control(&dir.join(name)), daemon)
}

#[test]
fn the_c_example_runs_every_operation_between_two_processes() {
    // `cargo test` builds the cdylib among the test's dependencies (target/<profile>/deps).
    let lib_dir = testkit::target_dir().join("deps");
    assert!(
        lib_dir.join("libiwarpverbs.so").exists(),
        "cargo builds the cdylib next to the tests"
    );
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("pair");
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
        .arg(crate_dir.join("examples/pair.c"))
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
        "compiling pair.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let _a = endpoint(dir.path(), "a", 1);
    let _b = endpoint(dir.path(), "b", 2);
    let mut server = Proc(
        Command::new(&exe)
            // cargo's LD_LIBRARY_PATH may name an older copy in target/<profile>: use the
            // rpath to the library this test was built with.
            .env_remove("LD_LIBRARY_PATH")
            .arg("server")
            .arg(dir.path().join("b"))
            .arg("7200")
            .spawn()
            .unwrap(),
    );
    let client = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .arg("client")
        .arg(dir.path().join("a"))
        .args(["10.66.0.2", "7200"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success(),
        "client failed: {text}\n{}",
        String::from_utf8_lossy(&client.stderr)
    );
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
    let st = server.0.wait().unwrap();
    assert!(st.success(), "server failed");
}
