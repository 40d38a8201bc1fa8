//! The processes that own QPs on this node, each watched for its exit so that its
//! connections end even while no control plane runs to clean up after it.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A descriptor that becomes readable when process `pid` exits (pidfd_open(2)); unlike the
/// pid, it cannot come to name another process.
fn pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative result is a fresh descriptor we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A process owning QPs.
struct Owner {
    /// Readable once the process exits; `None` once it was seen to exit, or where it could
    /// not be watched.
    exit: Option<OwnedFd>,
    /// Its QPs: the last one's destroy forgets the process without a look at every QP.
    qps: usize,
}

/// The owning processes by pid.
#[derive(Default)]
pub struct Owners {
    by_pid: HashMap<u32, Owner>,
}

impl Owners {
    /// Process `pid` owns one more QP. An error where the process cannot be watched (it
    /// exited already, or the kernel has no pidfd_open); the QP is counted all the same.
    pub fn add(&mut self, pid: u32) -> std::io::Result<()> {
        let o = self
            .by_pid
            .entry(pid)
            .or_insert(Owner { exit: None, qps: 0 });
        o.qps += 1;
        // Unwatched: new, or an exited process whose pid a new one reuses while the old
        // one's QPs are still here.
        if o.exit.is_none() {
            o.exit = pidfd(pid);
            if o.exit.is_none() {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// One of `pid`'s QPs is destroyed; the process is forgotten with its last.
    pub fn remove(&mut self, pid: u32) {
        if let Entry::Occupied(mut o) = self.by_pid.entry(pid) {
            o.get_mut().qps -= 1;
            if o.get().qps == 0 {
                o.remove();
            }
        }
    }

    /// The watched processes that have exited since the last call; each is watched no more
    /// (its QPs stay counted until they are destroyed).
    pub fn exited(&mut self) -> Vec<u32> {
        let (pids, mut polled): (Vec<u32>, Vec<libc::pollfd>) = self
            .by_pid
            .iter()
            .filter_map(|(&pid, o)| {
                let fd = o.exit.as_ref()?;
                let p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                Some((pid, p))
            })
            .unzip();
        // SAFETY: `polled` is an array of polled.len() pollfds; a zero timeout never blocks.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 0) };
        if n <= 0 {
            return Vec::new();
        }
        let gone: Vec<u32> = pids
            .into_iter()
            .zip(polled)
            .filter(|(_, p)| p.revents != 0)
            .map(|(pid, _)| pid)
            .collect();
        for pid in &gone {
            if let Some(o) = self.by_pid.get_mut(pid) {
                o.exit = None;
            }
        }
        gone
    }

    /// Forgets every process (control's resources all went).
    pub fn clear(&mut self) {
        self.by_pid.clear();
    }

    /// Processes known (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_pid.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().unwrap()
    }

    /// Polls `owners` until it reports an exit, for up to 5 s.
    fn exits(owners: &mut Owners) -> Vec<u32> {
        let t = Instant::now();
        loop {
            let gone = owners.exited();
            if !gone.is_empty() || t.elapsed() > Duration::from_secs(5) {
                return gone;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_process_is_watched_while_it_owns_a_qp_and_forgotten_with_its_last() {
        let (mut a, mut b) = (sleeper(), sleeper());
        let mut owners = Owners::default();
        owners.add(a.id()).unwrap();
        owners.add(a.id()).unwrap();
        owners.add(b.id()).unwrap();
        // One of a's two QPs destroyed: a is still watched.
        owners.remove(a.id());
        assert_eq!(owners.len(), 2);
        assert!(owners.exited().is_empty(), "both still run");
        a.kill().unwrap();
        a.wait().unwrap();
        assert_eq!(exits(&mut owners), [a.id()]);
        assert!(owners.exited().is_empty(), "an exit is reported once");
        // Its last QP's destroy forgets it; b's QP keeps b.
        owners.remove(a.id());
        assert_eq!(owners.len(), 1);
        b.kill().unwrap();
        b.wait().unwrap();
        assert_eq!(exits(&mut owners), [b.id()]);
        owners.remove(b.id());
        assert_eq!(owners.len(), 0);
    }

    #[test]
    fn a_process_that_exited_cannot_be_watched_but_its_qp_is_counted() {
        let mut gone = sleeper();
        let pid = gone.id();
        gone.kill().unwrap();
        gone.wait().unwrap();
        let mut owners = Owners::default();
        assert!(owners.add(pid).is_err());
        assert_eq!(owners.len(), 1);
        assert!(owners.exited().is_empty());
        owners.remove(pid);
        assert_eq!(owners.len(), 0);
    }
}
