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
