//! Passing file descriptors over a Unix stream socket (`SCM_RIGHTS`, unix(7)): how an
//! application hands iwarp-control the segments it wants registered, and how control hands
//! ring segments back, so neither trusts a path alone.

use crate::error::Error;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Most descriptors in one message.
pub const MAX_FDS: usize = 8;

/// Room for MAX_FDS descriptors in a control message, 8-aligned as cmsghdr needs.
#[repr(C, align(8))]
struct CmsgBuf([u8; 128]);
const _: () = assert!(core::mem::size_of::<RawFd>() * MAX_FDS + 32 <= 128);

/// Sends `data` (at least one octet: a stream needs a byte to carry the descriptors) with
/// `fds` attached. Returns the octets sent; the descriptors go with the first of them.
pub fn send_fds(sock: &UnixStream, data: &[u8], fds: &[BorrowedFd<'_>]) -> Result<usize, Error> {
    if data.is_empty() || fds.len() > MAX_FDS {
        return Err(Error::Layout);
    }
    let mut cbuf = CmsgBuf([0; 128]);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let fd_bytes = core::mem::size_of_val(fds) as u32;
    // SAFETY: msghdr is plain data; every pointer set below points into live locals, and the
    // CMSG_* macros stay within `cbuf` because its size covers CMSG_SPACE(MAX_FDS fds).
    unsafe {
        let mut msg: libc::msghdr = core::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = cbuf.0.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = libc::CMSG_SPACE(fd_bytes) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            let p = libc::CMSG_DATA(c) as *mut RawFd;
            for (i, fd) in fds.iter().enumerate() {
                core::ptr::write_unaligned(p.add(i), fd.as_raw_fd());
            }
        }
        let n = libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
        if n < 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(n as usize)
    }
}

/// Receives into `buf`, collecting any descriptors sent with it (close-on-exec). Returns the
/// octets read (0 at end of stream) and the descriptors.
pub fn recv_fds(sock: &UnixStream, buf: &mut [u8]) -> Result<(usize, Vec<OwnedFd>), Error> {
    let mut cbuf = CmsgBuf([0; 128]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: as in `send_fds`; the kernel fills at most msg_controllen octets of `cbuf`, and
    // we walk it only with CMSG_FIRSTHDR/CMSG_NXTHDR, which respect that length. Each
    // descriptor received is new and ours, so owning it is sound.
    unsafe {
        let mut msg: libc::msghdr = core::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = cbuf.0.len() as _;
        let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error().into());
        }
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                let p = data as *const RawFd;
                for i in 0..bytes / core::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(core::ptr::read_unaligned(p.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            // Descriptors beyond our buffer were closed by the kernel; say so rather than
            // pretend the message was whole.
            return Err(io::Error::other("control message truncated: too many descriptors").into());
        }
        Ok((n as usize, fds))
    }
}

/// Receives exactly one descriptor with its message; [`Error::NoFd`] if none came.
pub fn recv_fd(sock: &UnixStream, buf: &mut [u8]) -> Result<(usize, OwnedFd), Error> {
    let (n, mut fds) = recv_fds(sock, buf)?;
    let fd = fds.pop().ok_or(Error::NoFd)?;
    Ok((n, fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{HugePolicy, Segment, SegmentKind};

    #[test]
    fn a_segment_travels_by_fd() {
        let (a, b) = UnixStream::pair().unwrap();
        let s =
            Segment::create_anonymous("pass", SegmentKind::Memory, 64, HugePolicy::Off).unwrap();
        assert!(s.write_at(0, b"over the socket"));
        assert_eq!(send_fds(&a, b"M", &[s.fd().unwrap()]).unwrap(), 1);
        let mut buf = [0; 4];
        let (n, fd) = recv_fd(&b, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"M");
        let r = Segment::from_fd(fd, Some(SegmentKind::Memory)).unwrap();
        let mut got = [0; 15];
        assert!(r.read_at(0, &mut got));
        assert_eq!(&got, b"over the socket");
        assert_eq!(r.file_id(), s.file_id());

        send_fds(&a, b"x", &[]).unwrap();
        assert!(matches!(recv_fd(&b, &mut buf), Err(Error::NoFd)));
        assert!(send_fds(&a, b"", &[]).is_err());
    }
}
