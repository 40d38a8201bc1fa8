//! Generates the rdma-core struct layouts (bindgen over the installed libibverbs-dev and
//! librdmacm-dev headers), the version script and exported entry points from `symbols.txt`, and
//! the `target/<profile>/rdma-core/` directory an application's `LD_LIBRARY_PATH` names.
//!
//! rustc links a cdylib with its own anonymous version script, which makes every symbol it
//! exports unversioned. rust-lld accepts a second script with named version nodes beside it,
//! but an exact name in rustc's list wins over ours; so the Rust functions are not exported by
//! name at all: each entry point is an assembler label that jumps to its Rust function, and
//! `.symver` gives the label its versioned name.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One line of `symbols.txt`.
struct Export {
    version: String,
    name: String,
    implementation: String,
}

fn exports(table: &str) -> Vec<Export> {
    table
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "symbols.txt: three columns expected in {l:?}");
            Export {
                version: f[0].into(),
                name: f[1].into(),
                implementation: f[2].into(),
            }
        })
        .collect()
}

/// The version script: one node per version, each inheriting the one listed before it.
fn version_script(exports: &[Export]) -> String {
    let mut order: Vec<&str> = Vec::new();
    let mut nodes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in exports {
        if !order.contains(&e.version.as_str()) {
            order.push(&e.version);
        }
        nodes.entry(&e.version).or_default().push(&e.name);
    }
    let mut s = String::new();
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    for (i, v) in order.iter().enumerate() {
        // A node inherits the previous node of its own library (IBVERBS_ or RDMACM_).
        let family = |x: &str| x.split('_').next().unwrap_or("").to_string();
        if let Some(prev) = order[..i].iter().rev().find(|p| family(p) == family(v)) {
            parent.insert(v, prev);
        }
        writeln!(s, "{v} {{\n  global:").unwrap();
        for n in &nodes[v] {
            writeln!(s, "    {n};").unwrap();
        }
        match parent.get(v) {
            Some(p) => writeln!(s, "}} {p};").unwrap(),
            None => writeln!(s, "}};").unwrap(),
        }
    }
    s
}

/// The entry points: a label per symbol, in assembly, jumping to the Rust function (or, for
/// `data`, a one-byte variable), versioned with `.symver`. Left out of unit tests, whose
/// executable has no version script.
fn entry_points(exports: &[Export]) -> String {
    let mut s = String::new();
    for e in exports {
        let (n, v) = (&e.name, &e.version);
        let label = format!("iwarp_export_{n}");
        if e.implementation == "data" {
            writeln!(
                s,
                "#[cfg(not(test))]\ncore::arch::global_asm!(\n    \".pushsection .data.iwarp_export,\\\"aw\\\",@progbits\",\n    \".globl {label}\",\n    \".type {label},@object\",\n    \".size {label},1\",\n    \"{label}:\",\n    \".byte 0\",\n    \".symver {label},{n}@@{v}\",\n    \".popsection\",\n);"
            )
            .unwrap();
        } else {
            writeln!(
                s,
                "#[cfg(not(test))]\ncore::arch::global_asm!(\n    \".pushsection .text.iwarp_export,\\\"ax\\\",@progbits\",\n    \".globl {label}\",\n    \".type {label},@function\",\n    \"{label}:\",\n    \"jmp {{f}}\",\n    \".size {label},.-{label}\",\n    \".symver {label},{n}@@{v}\",\n    \".popsection\",\n    f = sym crate::{},\n);",
                e.implementation
            )
            .unwrap();
        }
    }
    s
}

/// `target/<profile>/` from this script's `OUT_DIR` (`target/<profile>/build/<pkg>/out`).
fn profile_dir(out: &Path) -> Option<PathBuf> {
    out.ancestors().nth(3).map(Path::to_path_buf)
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());

    bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_type("ibv_.*|verbs_.*|rdma_.*|_ibv_.*")
        .allowlist_var("IBV_.*|RDMA_.*|VERBS_.*|RAI_.*")
        .allowlist_function("a^")
        .prepend_enum_name(false)
        .derive_default(true)
        .generate_comments(false)
        .generate()
        .expect("bindgen failed on rdma-core's headers: install libibverbs-dev and librdmacm-dev (scripts/setup.sh does)")
        .write_to_file(out.join("bindings.rs"))
        .unwrap();

    let table = std::fs::read_to_string("symbols.txt").unwrap();
    let exports = exports(&table);
    let map = out.join("exports.map");
    std::fs::write(&map, version_script(&exports)).unwrap();
    std::fs::write(out.join("exports.rs"), entry_points(&exports)).unwrap();
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");

    // The names applications load: links (made before the library exists, so they may dangle
    // until the first build finishes) to the cdylib in target/<profile>/deps/, which every
    // build refreshes (`cargo test` does not refresh the copy in target/<profile>/).
    if let Some(dir) = profile_dir(&out) {
        let lib_dir = dir.join("rdma-core");
        std::fs::create_dir_all(&lib_dir).unwrap();
        for name in ["libibverbs.so.1", "librdmacm.so.1"] {
            let link = lib_dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink("../deps/libiwarp_rdma_core.so", &link).unwrap();
        }
    }

    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=symbols.txt");
}
