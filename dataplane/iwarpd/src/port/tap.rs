//! A Linux TAP port (root, or CAP_NET_ADMIN): frames to and from the kernel's network stack,
//! so the daemon can sit on a bridge with VMs (a siw peer) or other stacks.

use super::{Port, RxBuf, RxPool};
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

/// `struct ifreq` with its `ifr_mtu` member (SIOCGIFMTU, SIOCSIFMTU).
#[repr(C)]
struct IfMtu {
    name: [libc::c_char; libc::IFNAMSIZ],
    mtu: libc::c_int,
    _pad: [u8; 20],
}

/// Gives the kernel side of interface `name` the MTU `mtu`, so that the kernel (a bridge, a
/// VM's path) passes frames as long as the port sends and never sends longer ones (a TAP
/// is created at 1500). Nothing to do where it has it already; an error where it differs
/// and cannot be set (no CAP_NET_ADMIN on a TAP created for this user).
fn set_kernel_mtu(name: &CString, mtu: usize) -> io::Result<()> {
    // SAFETY: a plain socket() call; the descriptor is owned by `sock` below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut req = IfMtu {
        name: [0; libc::IFNAMSIZ],
        mtu: 0,
        _pad: [0; 20],
    };
    for (d, s) in req.name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    let want = libc::c_int::try_from(mtu).map_err(io::Error::other)?;
    // SAFETY: `req` is an ifreq-layout struct that outlives the calls; the socket is open.
    unsafe {
        if libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFMTU as _,
            &mut req as *mut IfMtu,
        ) < 0
        {
            return Err(io::Error::last_os_error());
        }
        if req.mtu == want {
            return Ok(());
        }
        let had = req.mtu;
        req.mtu = want;
        if libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFMTU as _,
            &mut req as *mut IfMtu,
        ) < 0
        {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "its MTU is {had}, port.mtu {mtu}, and setting it failed ({e}): \
                     ip link set {} mtu {mtu}",
                    name.to_string_lossy()
                ),
            ));
        }
    }
    Ok(())
}

pub struct TapPort {
    file: File,
    name: String,
    mac: [u8; 6],
    mtu: usize,
    rx: RxPool,
}

impl TapPort {
    /// Opens (creating if needed) the TAP interface `name`, its kernel side given the MTU
    /// `mtu`. The port's own MAC is `mac`: the kernel side of the TAP has another, as a NIC
    /// and its switch port would.
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
        set_kernel_mtu(&cname, mtu)?;
        Ok(TapPort {
            file,
            name: name.to_string(),
            mac,
            mtu,
            rx: RxPool::new(mtu + 14),
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
    type Frame = RxBuf;

    fn rx_burst<F: FnMut(RxBuf)>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.rx.recv(|b| self.file.read(b)) {
                Ok(frame) if frame.is_empty() => {
                    self.rx.give_back(frame);
                    break;
                }
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
