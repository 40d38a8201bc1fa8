//! The embedded default port: a virtual Ethernet segment made of Unix datagram sockets.
//!
//! Every port binds `<segment>/<mac>.sock`. A frame goes to the socket named by its
//! destination MAC; a broadcast or multicast frame goes to every other socket in the
//! directory. Two or more daemons pointed at the same directory form a LAN, unprivileged.
//! A frame to a MAC nobody bound is dropped, as a switch with no such port would.
//!
//! Linux queues few datagrams per Unix socket (`net.unix.max_dgram_qlen`, 10 on some
//! systems), so a burst meets a full peer queue often. Like a NIC whose TX ring is full, the
//! port then keeps the frame in a bounded backlog and retries on the next flush or receive,
//! in order, instead of losing it; only past the backlog's bound is a frame dropped.

use super::{Port, RxBuf, RxPool};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

pub struct UnixPort {
    sock: UnixDatagram,
    dir: PathBuf,
    path: PathBuf,
    mac: [u8; 6],
    mtu: usize,
    rx: RxPool,
    backlog: std::collections::VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
    pub tx_dropped: u64,
    /// The port that bound the socket (removes it when dropped); a [`UnixPort::sender`] only
    /// transmits.
    owner: bool,
}

/// Frames the port holds back when peers' queues are full.
const BACKLOG: usize = 8192;

fn mac_name(mac: &[u8]) -> String {
    let h: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}.sock", h.join("-"))
}

impl UnixPort {
    /// Joins the segment in `dir` (created if missing) with address `mac`.
    pub fn open(dir: &Path, mac: [u8; 6], mtu: usize) -> io::Result<UnixPort> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(mac_name(&mac));
        // A stale socket of a dead daemon with our MAC: take its place.
        let _ = std::fs::remove_file(&path);
        let sock = UnixDatagram::bind(&path)?;
        sock.set_nonblocking(true)?;
        Ok(UnixPort {
            sock,
            dir: dir.to_path_buf(),
            path,
            mac,
            mtu,
            rx: RxPool::new(mtu + 14),
            backlog: std::collections::VecDeque::new(),
            spare: Vec::new(),
            tx_dropped: 0,
            owner: true,
        })
    }

    /// Another handle on the same socket that only transmits (with its own backlog), for a
    /// second worker sharing the port: frames it sends carry the port's address, and
    /// receiving stays with the port (its [`Port::rx_burst`] receives nothing).
    pub fn sender(&self) -> io::Result<UnixPort> {
        let sock = self.sock.try_clone()?;
        Ok(UnixPort {
            sock,
            dir: self.dir.clone(),
            path: self.path.clone(),
            mac: self.mac,
            mtu: self.mtu,
            rx: RxPool::new(0),
            backlog: std::collections::VecDeque::new(),
            spare: Vec::new(),
            tx_dropped: 0,
            owner: false,
        })
    }

    /// Sends a unicast frame. `false` when the peer's queue is full (try again later);
    /// a frame to nobody counts as sent (lost on the segment, as on a wire).
    fn send_unicast(&self, frame: &[u8]) -> bool {
        let to = self.dir.join(mac_name(&frame[..6]));
        !matches!(self.sock.send_to(frame, to), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    fn drain_backlog(&mut self) {
        while let Some(front) = self.backlog.front() {
            if !self.send_unicast(front) {
                return;
            }
            if let Some(b) = self.backlog.pop_front() {
                self.spare.push(b);
            }
        }
    }
}

impl Drop for UnixPort {
    fn drop(&mut self) {
        if self.owner {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Port for UnixPort {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    type Frame = RxBuf;

    fn rx_burst<F: FnMut(RxBuf)>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        self.drain_backlog();
        if !self.owner {
            return Ok(0);
        }
        let mut n = 0;
        while n < max {
            match self.rx.recv(|b| self.sock.recv(b)) {
                Ok(frame) => {
                    f(frame);
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    fn recycle(&mut self, frame: RxBuf) {
        self.rx.give_back(frame)
    }

    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        if frame.len() < 14 {
            return Ok(());
        }
        if frame[0] & 1 != 0 {
            // Broadcast (ARP): best effort to every other port; ARP retries on loss.
            for entry in std::fs::read_dir(&self.dir)?.flatten() {
                let p = entry.path();
                if p != self.path && p.extension().is_some_and(|e| e == "sock") {
                    let _ = self.sock.send_to(frame, &p);
                }
            }
            return Ok(());
        }
        if self.backlog.is_empty() && self.send_unicast(frame) {
            return Ok(());
        }
        if self.backlog.len() >= BACKLOG {
            self.tx_dropped += 1;
            return Ok(());
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(frame);
        self.backlog.push_back(b);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.drain_backlog();
        Ok(())
    }
    fn dropped(&self) -> u64 {
        self.tx_dropped
    }
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        // Frames held back for a full peer queue are retried by polling, not on a wake-up.
        // (A sender's socket is readable when frames wait for its owner: a worker that
        // sleeps on it wakes for nothing at worst; the steered port sleeps on its inbox.)
        self.backlog.is_empty().then(|| self.sock.as_raw_fd())
    }
}
