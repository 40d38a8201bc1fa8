//! Whether a process that another names by pid still runs: a daemon's segment names its
//! creator, a runtime directory its daemon.
//!
//! `kill(pid, 0)` alone says yes for a zombie, a process that has exited and whose parent
//! has not yet waited for it. A supervisor or benchmark that started `iwarpd` and is busy
//! elsewhere leaves it so for as long as it likes, and a control that took it for alive
//! would keep every application waiting on a daemon that is gone.

/// Whether process `pid` exists and has not exited. A process of another user counts as
/// running (`EPERM`); pid 0 names no process.
pub fn runs(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p == 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(p, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    !exited(pid)
}

/// Whether `/proc` shows `pid` as a zombie (exited, not yet waited for) or dead. Without
/// `/proc`, the answer is no.
fn exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    matches!(state(&stat), Some("Z" | "X"))
}

/// The state field of a `/proc/<pid>/stat` line: the first after the command name, which is
/// in parentheses and may itself hold spaces and parentheses, so the last `)` ends it.
fn state(stat: &str) -> Option<&str> {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn this_process_runs_and_pid_0_is_none() {
        assert!(runs(std::process::id()));
        assert!(!runs(0));
        assert!(!runs(u32::MAX));
    }

    #[test]
    fn an_exited_child_not_yet_waited_for_does_not_run() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Until it has exited it runs; after, it is a zombie until waited for.
        while !exited(pid) {
            assert!(Instant::now() < deadline, "`true` did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: signal 0 only checks existence: the zombie still exists for kill(2).
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, 0) }, 0);
        assert!(!runs(pid), "a zombie is not a running process");
        child.wait().unwrap();
    }

    #[test]
    fn the_state_is_read_after_the_whole_command_name() {
        assert_eq!(state("42 (a) Z (b) R 1 2 3"), Some("R"));
        assert_eq!(state("7 (iwarpd) Z 1 7 7"), Some("Z"));
        assert_eq!(state("7 iwarpd"), None);
    }
}
