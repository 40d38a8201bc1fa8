//! A Linux TAP port (root, or CAP_NET_ADMIN): frames to and from the kernel's network stack,
//! so the daemon can sit on a bridge with VMs (a siw peer) or other stacks.

use super::Port;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;

const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
/// One queue (file) per worker on the same interface; the kernel spreads flows over them.
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
/// `_IOW('T', 202, int)`: attach the file to a TUN/TAP interface.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

pub struct TapPort {
    file: File,
    name: String,
    mac: [u8; 6],
    mtu: usize,
    buf: Vec<u8>,
}

impl TapPort {
    /// Opens (creating if needed) the TAP interface `name`. The port's own MAC is `mac`: the
    /// kernel side of the TAP has another, as a NIC and its switch port would.
    pub fn open(name: &str, mac: [u8; 6], mtu: usize) -> io::Result<TapPort> {
        TapPort::open_queue(name, mac, mtu, 0)
    }

    /// Opens `queues` queues of the multi-queue TAP interface `name` (created if needed; an
    /// existing single-queue interface of that name is refused by the kernel), one per
    /// worker: the kernel hashes each flow to one of them, and each can send.
    pub fn open_queues(
        name: &str,
        mac: [u8; 6],
        mtu: usize,
        queues: usize,
    ) -> io::Result<Vec<TapPort>> {
        (0..queues)
            .map(|_| TapPort::open_queue(name, mac, mtu, IFF_MULTI_QUEUE))
            .collect()
    }

    fn open_queue(
        name: &str,
        mac: [u8; 6],
        mtu: usize,
        extra_flags: libc::c_short,
    ) -> io::Result<TapPort> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/net/tun")?;
        let cname = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
        if cname.as_bytes().len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "interface name longer than 15 octets",
            ));
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: IFF_TAP | IFF_NO_PI | extra_flags,
            _pad: [0; 22],
        };
        for (d, s) in req.name.iter_mut().zip(cname.as_bytes()) {
            *d = *s as libc::c_char;
        }
        // SAFETY: `req` is a properly initialised ifreq-layout struct that outlives the call;
        // the fd is open on /dev/net/tun.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TapPort {
            file,
            name: name.to_string(),
            mac,
            mtu,
            buf: vec![0; mtu + 14],
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Port for TapPort {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn mtu(&self) -> usize {
        self.mtu
    }
    fn rx_burst<F: FnMut(&[u8])>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.file.read(&mut self.buf) {
                Ok(0) => break,
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
        match self.file.write(frame) {
            // The kernel's queue is full: the frame is lost, as on a congested wire.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r.map(|_| ()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.file.as_raw_fd())
    }
}
