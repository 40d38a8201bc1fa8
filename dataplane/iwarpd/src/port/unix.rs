//! The embedded default port: a virtual Ethernet segment made of Unix datagram sockets.
//!
//! Every port binds `<segment>/<mac>.sock`. A frame goes to the socket named by its
//! destination MAC; a broadcast or multicast frame goes to every other socket in the
//! directory. Two or more daemons pointed at the same directory form a LAN, unprivileged.
//! A frame to a MAC nobody bound is dropped, as a switch with no such port would.

use super::Port;
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

pub struct UnixPort {
    sock: UnixDatagram,
    dir: PathBuf,
    path: PathBuf,
    mac: [u8; 6],
    mtu: usize,
    buf: Vec<u8>,
}

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
            buf: vec![0; mtu + 14],
        })
    }

    fn send_to(&self, frame: &[u8], path: &Path) {
        // Nobody there, or its queue is full: the frame is lost, as on a wire; TCP recovers.
        let _ = self.sock.send_to(frame, path);
    }
}

impl Drop for UnixPort {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Port for UnixPort {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn rx_burst<F: FnMut(&[u8])>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.sock.recv(&mut self.buf) {
                Ok(len) => {
                    f(&self.buf[..len]);
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        if frame.len() < 14 {
            return Ok(());
        }
        if frame[0] & 1 != 0 {
            for entry in std::fs::read_dir(&self.dir)?.flatten() {
                let p = entry.path();
                if p != self.path && p.extension().is_some_and(|e| e == "sock") {
                    self.send_to(frame, &p);
                }
            }
        } else {
            self.send_to(frame, &self.dir.join(mac_name(&frame[..6])));
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
