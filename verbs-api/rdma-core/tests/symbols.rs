//! The shared object carries rdma-core 44's versioned symbols, and Debian's programs (linked
//! with immediate binding) resolve every import from it.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The defined dynamic symbols of `lib` at their default version, as `name@@VERSION`.
fn default_versions(lib: &Path) -> BTreeSet<String> {
    let out = Command::new("objdump").arg("-T").arg(lib).output().unwrap();
    assert!(out.status.success(), "objdump -T {}", lib.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // value, binding, type, section, size, version, name
            if f.len() < 7 || f[3] == "*UND*" || f[3] == "*ABS*" {
                return None;
            }
            let (version, name) = (f[f.len() - 2], f[f.len() - 1]);
            // "(VERSION)" is a hidden, non-default version; rdma-core keeps a few for
            // programs built in 2006.
            (version.starts_with("IBVERBS") || version.starts_with("RDMACM"))
                .then(|| format!("{name}@@{version}"))
        })
        .collect()
}

#[test]
fn exports_rdma_cores_default_versions() {
    let system = "/usr/lib/x86_64-linux-gnu";
    let (verbs, cm) = (
        format!("{system}/libibverbs.so.1"),
        format!("{system}/librdmacm.so.1"),
    );
    if !common::have(&verbs) || !common::have(&cm) {
        return;
    }
    let mut want = default_versions(Path::new(&verbs));
    want.extend(default_versions(Path::new(&cm)));
    let ours = default_versions(&common::lib_dir().join("libibverbs.so.1"));
    assert!(
        want.len() > 200,
        "read {} symbols from rdma-core",
        want.len()
    );
    let missing: Vec<_> = want.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&want).collect();
    assert!(missing.is_empty(), "missing: {missing:?}");
    assert!(extra.is_empty(), "not rdma-core's: {extra:?}");
}

#[test]
fn nothing_else_is_exported() {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(common::lib_dir().join("libibverbs.so.1"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let unversioned: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" Base ") && !l.contains("*UND*"))
        .collect();
    assert!(unversioned.is_empty(), "{unversioned:#?}");
}

/// `ldd -r` resolves every symbol of Debian's programs, and the libraries from our directory.
#[test]
fn debian_programs_resolve_every_import() {
    let dir = common::lib_dir();
    for program in [
        "/usr/bin/ib_write_bw",
        "/usr/bin/ib_atomic_lat",
        "/usr/bin/ibv_devinfo",
        "/usr/bin/ibv_devices",
        "/usr/bin/rping",
        "/usr/bin/ucmatose",
    ] {
        if !common::have(program) {
            continue;
        }
        let out = common::with_our_libs("ldd")
            .arg("-r")
            .arg(program)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ldd -r {program}: {text}");
        assert!(
            !text.contains("undefined symbol") && !text.contains("not found"),
            "ldd -r {program}:\n{text}"
        );
        // Both names load the one shared object, so ldd lists whichever came first.
        let ours = text
            .lines()
            .filter(|l| l.contains("libibverbs.so.1") || l.contains("librdmacm.so.1"))
            .all(|l| l.contains(&*dir.to_string_lossy()));
        assert!(ours, "ldd -r {program} loads rdma-core's own:\n{text}");
    }
}
