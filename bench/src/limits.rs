//! The process limits a run of thousands of QPs or connections meets first: open descriptors
//! (the kernel TCP baseline holds one per socket) and memory mappings (each QP's rings and
//! completion queues are shared-memory segments of their own). The first is raised as far
//! as an unprivileged process may; the second is named before it is hit, with the setting
//! that lifts it, instead of ending a long setup in an obscure `ENOMEM`.

use crate::error::{BenchError, Result};

/// Raises this process's soft limit on open descriptors to its hard limit: the kernel TCP
/// baseline holds one per socket, and a shell's usual soft limit of 1,024 would stop it long
/// before the hard limit does. A limit that cannot be raised stays.
pub fn raise_fd_limit() {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
}

/// The memory mappings this process holds and the most it may (`vm.max_map_count`).
pub fn mappings() -> Option<(usize, usize)> {
    let held = std::fs::read("/proc/self/maps")
        .ok()?
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some((held, max))
}

/// The share of `vm.max_map_count` past which no more QPs are set up.
const MAPPINGS_FULL: f64 = 0.9;

/// Fails once this process, having set up `pairs` QP pairs, holds more than 90 % of the
/// mappings it may: the next ones would fail with `ENOMEM` somewhere in the library.
pub fn check_mapping_room(pairs: usize) -> Result<()> {
    match mappings() {
        Some((held, max)) => mapping_room(held, max, pairs),
        None => Ok(()),
    }
}

fn mapping_room(held: usize, max: usize, pairs: usize) -> Result<()> {
    if (held as f64) < MAPPINGS_FULL * max as f64 {
        return Ok(());
    }
    Err(BenchError::transport(
        "verbs",
        format!(
            "after {pairs} QP pairs this process holds {held} memory mappings of the {max} \
             the kernel allows (vm.max_map_count), about {} a pair: each QP's rings and \
             completion queues are mappings of their own. Raise it to run more, e.g. \
             `sysctl vm.max_map_count={}`",
            held / pairs.max(1),
            (max * 4).max(262_144)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_mappings_and_room_for_more() {
        let (held, max) = mappings().expect("Linux's /proc");
        assert!(held > 0 && held < max, "{held} of {max}");
        assert!(check_mapping_room(1).is_ok());
    }

    #[test]
    fn a_process_near_its_mapping_limit_is_told_which_setting_lifts_it() {
        assert!(mapping_room(58_000, 65_530, 7_000).is_ok());
        let e = mapping_room(59_000, 65_530, 7_000).unwrap_err().to_string();
        assert!(
            e.contains("vm.max_map_count=262144") && e.contains("about 8 a pair"),
            "{e}"
        );
    }
}
