//! Where the built libraries are, and running Debian's programs against them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>/rdma-core`: this test runs from `target/<profile>/deps/`.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("rdma-core");
    assert!(
        dir.join("libibverbs.so.1").exists(),
        "{} missing: the cdylib was not built",
        dir.display()
    );
    dir
}

/// False (with a note) when a Debian program the test runs is not installed.
pub fn have(program: &str) -> bool {
    let ok = Path::new(program).exists();
    if !ok {
        eprintln!("skipped ({program} not installed: scripts/setup.sh installs it)");
    }
    ok
}

/// `cmd` with our libraries first on the loader's path.
pub fn with_our_libs(program: &str) -> Command {
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", lib_dir());
    c
}

/// Two endpoints (iwarpd + iwarp-control each) on one embedded Ethernet, MACs
/// 02:00:00:00:2a:01 and :02, addresses 10.42.0.1 and .2.
pub struct Pair {
    pub dir: tempfile::TempDir,
    pub runtimes: Vec<PathBuf>,
    _procs: Vec<iwarp_testkit::Proc>,
}

impl Pair {
    /// Stops endpoint `i` (its daemon and control).
    pub fn stop(&mut self, i: usize) {
        self._procs.drain(2 * i..2 * i + 2);
    }
}

pub fn pair() -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let mut procs = Vec::new();
    let mut runtimes = Vec::new();
    for (n, name) in [(1u8, "a"), (2, "b")] {
        procs.push(iwarp_testkit::start_daemon(dir.path(), name, n, 42, &[]));
        let rt = dir.path().join(name);
        procs.push(iwarp_testkit::start_control(&rt));
        runtimes.push(rt);
    }
    Pair {
        dir,
        runtimes,
        _procs: procs,
    }
}

/// `tests/c/<name>.c`, compiled against rdma-core's headers and linked with our library.
pub fn compile(p: &Pair, name: &str) -> PathBuf {
    let exe = p.dir.path().join(name);
    let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", lib_dir().display()))
        .arg("-l:libibverbs.so.1")
        .arg("-l:librdmacm.so.1")
        .status()
        .unwrap();
    assert!(st.success(), "cc {src}");
    exe
}

/// Runtime directories as `IWARP_RUNTIME_DIR` lists them.
pub fn joined(p: &[PathBuf]) -> String {
    p.iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":")
}

/// Runs `program` with our libraries on the endpoints `runtimes` (`IWARP_RUNTIME_DIR`);
/// its standard output, once it succeeded.
pub fn run(program: &str, args: &[&str], runtimes: &str) -> String {
    let out = with_our_libs(program)
        .args(args)
        .env("IWARP_RUNTIME_DIR", runtimes)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{program} {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}
