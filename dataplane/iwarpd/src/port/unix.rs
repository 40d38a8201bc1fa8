//! The embedded default port: a virtual Ethernet segment made of Unix sockets.
//!
//! Every port binds a datagram socket `<segment>/<mac>.sock` and listens on a
//! sequenced-packet socket `<segment>/<mac>.seq`. A unicast frame goes on a connection this
//! handle opened to its destination's `.seq` (one per peer, opened on the first frame); a
//! broadcast or multicast frame, or one to a peer with no `.seq`, goes to the destination's
//! datagram socket(s) in the directory. Two or more daemons pointed at the same directory
//! form a LAN, unprivileged. A frame to a MAC nobody bound is dropped, as a switch with no
//! such port would.
//!
//! Why connections: Linux queues few datagrams per unconnected Unix datagram receiver
//! (`net.unix.max_dgram_qlen`, 10 on some systems, not raisable by a user), however many
//! senders share it, and resolves the path on every `send_to`. Between the two ends of a
//! connection the only bound is the sender's buffer in bytes (sized here), so many streams
//! to one peer keep its queue full instead of meeting a full one. When a peer's queue is
//! full all the same, the frame waits in that peer's queue, retried on the next flush or
//! receive in order (as a NIC's full TX ring), so one full peer holds up no other; only past
//! the queues' bound is a frame dropped.
//!
//! System calls: a message costs the kernel a microsecond or so at each end whatever is
//! done, and entering the kernel a fifth of that again, so frames go in batches: those for
//! one peer wait in its queue until the turn's flush (or until [`BATCH`] wait) and leave in
//! one `sendmmsg`, and on a connection several share each message (up to [`PACK`] octets,
//! each frame behind its length: [`unpack`] reads them); a burst begins with one look at
//! the epoll set of every source and reads with one `recvmmsg` each source it reports.
//!
//! Back-pressure: once [`PAUSE_AT`] frames wait, [`Port::tx_ready`] says no and the device
//! takes no more segments from TCP until the peers have read, so however many connections
//! send, the queue stays at about one socket buffer (a millisecond or two) and no timer
//! fires for frames that only waited. A peer that reads nothing for [`STALL`] (its daemon
//! hung) has its queue dropped, so it cannot hold the others' traffic for longer.

use super::{Port, RxBuf, RxPool, STALL};
use rustc_hash::FxHashMap;
use smoltcp::wire::ETHERNET_HEADER_LEN;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Frames the port holds back, over all peers, when their queues are full.
const BACKLOG: usize = 8192;

/// Frames queued for one peer at which they are sent at once rather than at the turn's
/// flush: one system call for this many, and never so many unsent that they alone pause
/// the port ([`PAUSE_AT`]).
pub const BATCH: usize = 16;

/// Messages one `sendmmsg` or `recvmmsg` carries at most.
const MMSG: usize = 64;

/// Octets of frames and their lengths one message on a connection carries at most: several
/// full frames (or dozens of ACKs) share the kernel's cost of a message. A frame longer
/// than this (a jumbo one) goes alone.
pub const PACK: usize = 16 * 1024;

/// The length before each frame of a message on a connection: 4 octets, big-endian.
pub const FRAME_LEN: usize = 4;

/// Messages one `recvmmsg` on a connection takes at most: each holds up to [`PACK`] octets,
/// and what the burst has no room for waits in the port for the next.
const RX_MSGS: usize = 8;

/// Sent frames' buffers kept for the next frames: a couple of batches.
const SPARE: usize = 2 * MMSG;

/// Frames held back at which the port stops taking more ([`Port::tx_ready`]): a couple of
/// bursts, enough to refill a socket the moment its peer reads, the rest waits in TCP. The
/// device checks it between rounds over the connections, so a round may go past it by a
/// frame per sending connection; the queues hold 8,192 frames, room for that.
pub const PAUSE_AT: usize = 64;

/// The send buffer of a connection to a peer: the frames in flight to it before it reads
/// (a hundred or so full 1500-octet frames with the kernel's overhead per frame; it caps the
/// size at `net.core.wmem_max`). With back-pressure this is the queue every segment waits
/// in, so its time at the reader's pace is the round trip: 256 KiB kept 256 streaming
/// applications' resends and starvation lower than 1 MiB (see `docs/performance.md`).
const LINK_SNDBUF: libc::c_int = 1 << 18;

/// Connections a port's listener queues before its poll loop accepts them.
const LISTEN_BACKLOG: libc::c_int = 256;

/// How long a peer whose `.seq` could not be reached is sent datagrams before trying again.
const RECONNECT_AFTER: Duration = Duration::from_millis(500);

/// One destination MAC, as this handle sends to it.
#[derive(Default)]
struct Dest {
    link: Link,
    /// Frames for it not yet in its socket's queue, oldest first: the turn's, until the
    /// flush (or [`BATCH`]), and those its full queue refused.
    queue: VecDeque<Vec<u8>>,
    /// While a refused frame waits: when its socket last took a frame (or the first was
    /// refused).
    moved_at: Option<Instant>,
}

/// The connection to a destination's `.seq`.
#[derive(Default)]
struct Link {
    /// Once open.
    fd: Option<OwnedFd>,
    /// `fd` is in the handle's epoll set for writability: while frames wait for it, so that
    /// an idle loop wakes when the peer has read.
    watched: bool,
    /// No connection before this (the last try failed).
    retry_at: Option<Instant>,
}

pub struct UnixPort {
    sock: UnixDatagram,
    dir: PathBuf,
    path: PathBuf,
    mac: [u8; 6],
    mtu: usize,
    rx: RxPool,
    dests: FxHashMap<[u8; 6], Dest>,
    /// Frames in all queues.
    held: usize,
    spare: Vec<Vec<u8>>,
    pub tx_dropped: u64,
    /// What an idle loop sleeps on ([`Port::wait_fd`]): readable when a frame arrives (the
    /// datagram socket, the listener and inbound connections, on the port that bound them)
    /// or when a connection whose frames wait has room again.
    epoll: OwnedFd,
    /// The receiving side, on the port that bound the sockets; a [`UnixPort::sender`] only
    /// transmits.
    rx_side: Option<RxSide>,
    mmsg: Box<MmsgHeaders>,
    packs: Box<Packs>,
}

/// What the port that bound the sockets receives on.
struct RxSide {
    listener: OwnedFd,
    seq_path: PathBuf,
    /// Connections peers opened to us.
    inbound: Vec<OwnedFd>,
    /// Where the next receive starts (round robin over the datagram socket and `inbound`).
    next: usize,
    /// Buffers the next `recvmmsg` on the datagram socket receives into, kept from call to
    /// call.
    bufs: arrayvec::ArrayVec<Vec<u8>, MMSG>,
    /// The buffers messages from connections are received into ([`RX_MSGS`], each as long
    /// as the longest message).
    msgs: Vec<Vec<u8>>,
    /// Frames of messages already read that the last burst had no room for: the next
    /// burst's first.
    leftover: VecDeque<RxBuf>,
    /// Messages on inbound connections that did not split into frames ([`unpack`]): the
    /// rest of each was dropped.
    malformed: u64,
    /// The last burst read every source until it was empty ([`Port::rx_drained`]).
    drained: bool,
}

impl RxSide {
    /// Hands on the frames of the messages just received into the first `lens.len()` of
    /// `msgs`, each copied out into a buffer of `pool` (a copy in the cache, where a message
    /// saved a system call): to `f` up to `room` of them, the rest to `leftover`; how many
    /// went to `f`. A message that does not split into frames ends at the fault, counted in
    /// `malformed` and logged the first time.
    fn unpack_received<F: FnMut(RxBuf)>(
        &mut self,
        pool: &mut RxPool,
        lens: &[usize],
        room: usize,
        f: &mut F,
    ) -> usize {
        let mut given = 0;
        for (m, &len) in self.msgs.iter().zip(lens) {
            for frame in unpack(&m[..len]) {
                let frame = match frame {
                    Ok(frame) => frame,
                    Err(e) => {
                        self.malformed += 1;
                        if self.malformed == 1 {
                            tracing::warn!(
                                "Unix port: a message on an inbound connection is not frames \
                                 behind their lengths ({e:?}): something other than this \
                                 build's iwarpd (another program, or an older iwarpd on the \
                                 same segment) writes to {}",
                                self.seq_path.display()
                            );
                        }
                        break;
                    }
                };
                let b = pool.copied(frame);
                if given < room {
                    f(b);
                    given += 1;
                } else {
                    self.leftover.push_back(b);
                }
            }
        }
        given
    }
}

/// Readiness reports one look at the epoll set takes at most: the datagram socket, the
/// listener, a connection from each peer, and links waiting for room.
const LOOK: usize = 64;

fn mac_name(mac: &[u8], ext: &str) -> String {
    let h: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}.{ext}", h.join("-"))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The `sockaddr_un` of `path`.
fn unix_addr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data, all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path too long: {}", path.display()),
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// A non-blocking sequenced-packet socket.
fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the descriptor it returns is owned by nobody else.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just opened and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn listen_at(path: &Path) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let (addr, len) = unix_addr(path)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` octets.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    })?;
    // SAFETY: plain system call on a descriptor we own.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), LISTEN_BACKLOG) })?;
    Ok(fd)
}

/// A connection to the listener at `path`, with a send buffer of [`LINK_SNDBUF`].
fn connect_to(path: &Path) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let size = LINK_SNDBUF;
    // SAFETY: the option value is a c_int of the size given.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            &size as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    let (addr, len) = unix_addr(path)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` octets.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    })?;
    Ok(fd)
}

/// Takes a connection waiting on `listener`, if one is.
fn accept_one(listener: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: null address arguments are allowed (the peer's address is not wanted).
    let fd = cvt(unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just accepted and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The headers of one `sendmmsg` or `recvmmsg`, a message of one buffer each, kept from
/// call to call (boxed: its messages point into its own iovecs, so it must not move).
struct MmsgHeaders {
    iov: [libc::iovec; MMSG],
    msgs: [libc::mmsghdr; MMSG],
}

// SAFETY: the raw pointers are the messages' own iovecs (in the same box, which moves
// whole) and, during one call only, the buffers that call was given; nothing is shared with
// another thread.
unsafe impl Send for MmsgHeaders {}

impl MmsgHeaders {
    fn new() -> Box<MmsgHeaders> {
        // SAFETY: iovec and mmsghdr are plain C structures; all zeroes is a valid empty
        // value (null pointers, zero lengths), and what no call sets stays so.
        let mut h: Box<MmsgHeaders> = Box::new(unsafe { std::mem::zeroed() });
        let MmsgHeaders { iov, msgs } = &mut *h;
        for (v, m) in iov.iter_mut().zip(msgs.iter_mut()) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        h
    }

    /// Points the first messages at `bufs` (address, length), up to [`MMSG`]; how many.
    fn point_at(&mut self, bufs: impl Iterator<Item = (*mut libc::c_void, usize)>) -> usize {
        let mut n = 0;
        for (v, (at, len)) in self.iov.iter_mut().zip(bufs) {
            v.iov_base = at;
            v.iov_len = len;
            n += 1;
        }
        n
    }
}

/// The headers of one `sendmmsg` of frames packed into messages: each message gathers its
/// frames' lengths and the frames themselves, so nothing is copied before the kernel's copy
/// (boxed: the messages point into its own iovecs and lengths, so it must not move).
struct Packs {
    /// Two per frame: its length, then its octets.
    iov: [libc::iovec; 2 * MMSG],
    lens: [[u8; FRAME_LEN]; MMSG],
    msgs: [libc::mmsghdr; MMSG],
}

// SAFETY: as for MmsgHeaders: the raw pointers are its own iovecs and lengths, and during
// one call only, the frames that call was given.
unsafe impl Send for Packs {}

impl Packs {
    fn new() -> Box<Packs> {
        // SAFETY: iovec and mmsghdr are plain C structures; all zeroes is a valid empty
        // value (null pointers, zero lengths), and the rest are integers.
        unsafe { Box::new(std::mem::zeroed()) }
    }
}

/// Sends the first frames of `frames` on connection `fd`, packed into messages of up to
/// [`PACK`] octets, as many as one `sendmmsg` carries ([`MMSG`] frames) and its queue takes;
/// how many frames went. `WouldBlock` when its queue took none.
fn send_packed(fd: &OwnedFd, p: &mut Packs, frames: &[Vec<u8>]) -> io::Result<usize> {
    let frames = &frames[..frames.len().min(MMSG)];
    let Packs { iov, lens, msgs } = p;
    let (mut m, mut at) = (0, 0);
    while at < frames.len() {
        let (first, mut octets) = (at, 0);
        while let Some(f) = frames.get(at) {
            if at > first && octets + FRAME_LEN + f.len() > PACK {
                break;
            }
            lens[at] = (f.len() as u32).to_be_bytes();
            iov[2 * at] = libc::iovec {
                iov_base: lens[at].as_mut_ptr() as *mut libc::c_void,
                iov_len: FRAME_LEN,
            };
            iov[2 * at + 1] = libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            };
            octets += FRAME_LEN + f.len();
            at += 1;
        }
        msgs[m].msg_hdr.msg_iov = &mut iov[2 * first];
        msgs[m].msg_hdr.msg_iovlen = 2 * (at - first);
        m += 1;
    }
    // SAFETY: the first `m` messages each point at their own run of iovecs in `p`, boxed,
    // over its length fields and live frames, which the kernel only reads; MSG_NOSIGNAL turns
    // a closed peer into EPIPE instead of a signal.
    let sent = cvt(unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            m as libc::c_uint,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    })?;
    // Each frame is two iovecs of its message: its length, then its octets.
    Ok(msgs[..sent as usize]
        .iter()
        .map(|h| h.msg_hdr.msg_iovlen / 2)
        .sum())
}

/// A message on a connection that does not split into frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpack {
    /// Fewer octets than a frame's length field, or than the length it gives.
    Truncated { at: usize },
    /// A length shorter than an Ethernet header.
    Runt { at: usize, len: usize },
}

/// The frames of a message received on a connection (each behind its [`FRAME_LEN`]-octet
/// length), in order; a malformed one ends the message with the error.
pub fn unpack(msg: &[u8]) -> impl Iterator<Item = Result<&[u8], Unpack>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= msg.len() {
            return None;
        }
        let Some(head) = msg.get(at..at + FRAME_LEN) else {
            let e = Unpack::Truncated { at };
            at = msg.len();
            return Some(Err(e));
        };
        let len = u32::from_be_bytes(head.try_into().unwrap_or_default()) as usize;
        let body = at + FRAME_LEN;
        let r = if len < ETHERNET_HEADER_LEN {
            Err(Unpack::Runt { at, len })
        } else {
            match msg.get(body..body.saturating_add(len)) {
                Some(f) => {
                    at = body + len;
                    return Some(Ok(f));
                }
                None => Err(Unpack::Truncated { at }),
            }
        };
        at = msg.len();
        Some(r)
    })
}

/// Receives up to `bufs.len()` frames from `fd` with one `recvmmsg`, each into the next
/// buffer; their lengths go to `lens`. How many came; `WouldBlock` when none waited, and the
/// end of a connection `UnexpectedEof` (a frame is never empty).
fn recv_many(
    fd: RawFd,
    h: &mut MmsgHeaders,
    bufs: &mut [Vec<u8>],
    lens: &mut [usize],
) -> io::Result<usize> {
    let n = h.point_at(
        bufs.iter_mut()
            .take(lens.len())
            .map(|b| (b.as_mut_ptr() as *mut libc::c_void, b.len())),
    );
    // SAFETY: the first `n` messages each point at their iovec in `h`, boxed, over a buffer
    // valid for writes of its length, all alive for the call; no timeout.
    let got = cvt(unsafe {
        libc::recvmmsg(
            fd,
            h.msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    })? as usize;
    for (l, m) in lens.iter_mut().zip(&h.msgs[..got]) {
        *l = m.msg_len as usize;
    }
    // A connection's end reads as empty messages; frames before it are delivered first.
    match lens[..got].iter().position(|&l| l == 0) {
        Some(0) => Err(io::ErrorKind::UnexpectedEof.into()),
        Some(k) => Ok(k),
        None => Ok(got),
    }
}

fn epoll_add(epoll: &OwnedFd, fd: RawFd) -> io::Result<()> {
    epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32)
}

fn epoll_ctl(epoll: &OwnedFd, op: libc::c_int, fd: RawFd, events: u32) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events,
        u64: fd as u64,
    };
    // SAFETY: `ev` is a valid epoll_event; both descriptors are open.
    cvt(unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd, &mut ev) })?;
    Ok(())
}

fn new_epoll() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the descriptor it returns is owned by nobody else.
    let epoll = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    // SAFETY: `epoll` was just created and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(epoll) })
}

impl Link {
    /// Watches (or stops watching) the connection for room in `epoll`, as frames start (or
    /// stop) waiting for it.
    fn watch(&mut self, epoll: &OwnedFd, on: bool) {
        let Some(fd) = &self.fd else {
            self.watched = false;
            return;
        };
        if on == self.watched {
            return;
        }
        let (op, events) = if on {
            (libc::EPOLL_CTL_ADD, libc::EPOLLOUT as u32)
        } else {
            (libc::EPOLL_CTL_DEL, 0)
        };
        if epoll_ctl(epoll, op, fd.as_raw_fd(), events).is_ok() {
            self.watched = on;
        }
    }
}

impl UnixPort {
    /// Joins the segment in `dir` (created if missing) with address `mac`.
    pub fn open(dir: &Path, mac: [u8; 6], mtu: usize) -> io::Result<UnixPort> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(mac_name(&mac, "sock"));
        let seq_path = dir.join(mac_name(&mac, "seq"));
        // A stale socket of a dead daemon with our MAC: take its place.
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&seq_path);
        let sock = UnixDatagram::bind(&path)?;
        sock.set_nonblocking(true)?;
        let listener = listen_at(&seq_path)?;
        let epoll = new_epoll()?;
        epoll_add(&epoll, sock.as_raw_fd())?;
        epoll_add(&epoll, listener.as_raw_fd())?;
        Ok(UnixPort {
            sock,
            dir: dir.to_path_buf(),
            path,
            mac,
            mtu,
            rx: RxPool::new(mtu + ETHERNET_HEADER_LEN),
            dests: FxHashMap::default(),
            held: 0,
            spare: Vec::new(),
            tx_dropped: 0,
            epoll,
            rx_side: Some(RxSide {
                listener,
                seq_path,
                inbound: Vec::new(),
                next: 0,
                bufs: arrayvec::ArrayVec::new(),
                msgs: vec![vec![0; PACK.max(FRAME_LEN + mtu + ETHERNET_HEADER_LEN)]; RX_MSGS],
                leftover: VecDeque::new(),
                malformed: 0,
                drained: false,
            }),
            mmsg: MmsgHeaders::new(),
            packs: Packs::new(),
        })
    }

    /// Another handle on the same port that only transmits (with its own connections to
    /// peers and its own queues), for a second worker sharing the port: frames it sends
    /// carry the port's address, and receiving stays with the port (its
    /// [`Port::rx_burst`] receives nothing).
    pub fn sender(&self) -> io::Result<UnixPort> {
        let sock = self.sock.try_clone()?;
        // (The shared datagram socket is readable when frames wait for the port's owner: a
        // worker that sleeps on it wakes for nothing at worst; the steered port sleeps on
        // its inbox.)
        let epoll = new_epoll()?;
        epoll_add(&epoll, sock.as_raw_fd())?;
        Ok(UnixPort {
            sock,
            dir: self.dir.clone(),
            path: self.path.clone(),
            mac: self.mac,
            mtu: self.mtu,
            rx: RxPool::new(0),
            dests: FxHashMap::default(),
            held: 0,
            spare: Vec::new(),
            tx_dropped: 0,
            epoll,
            rx_side: None,
            mmsg: MmsgHeaders::new(),
            packs: Packs::new(),
        })
    }

    /// Frames waiting for their peers' queues (at most about [`PAUSE_AT`] while the device
    /// heeds [`Port::tx_ready`]).
    pub fn held(&self) -> usize {
        self.held
    }

    /// Messages on inbound connections that did not split into frames ([`unpack`]); the
    /// rest of each was dropped.
    pub fn rx_malformed(&self) -> u64 {
        self.rx_side.as_ref().map_or(0, |rx| rx.malformed)
    }

    /// Connections this handle has open to peers (for tests).
    pub fn links(&self) -> usize {
        self.dests.values().filter(|d| d.link.fd.is_some()).count()
    }

    /// Opens the connection to `to`'s `.seq` if there is none and a try is due.
    fn link_up(dir: &Path, to: &[u8; 6], link: &mut Link) {
        if link.fd.is_none() && link.retry_at.is_none_or(|t| Instant::now() >= t) {
            match connect_to(&dir.join(mac_name(to, "seq"))) {
                Ok(fd) => {
                    link.fd = Some(fd);
                    link.retry_at = None;
                }
                // A full listener (its loop has not accepted yet) or no listener at all:
                // datagrams meanwhile.
                Err(_) => link.retry_at = Some(Instant::now() + RECONNECT_AFTER),
            }
        }
    }

    /// Sends the front of `d`'s queue to `to`, as far as its socket takes frames; how many
    /// went. On a connection, in batches; without one (or once it is found closed), as
    /// datagrams. A frame to nobody counts as sent (lost on the segment, as on a wire).
    fn send_front(&mut self, to: &[u8; 6], d: &mut Dest) -> usize {
        Self::link_up(&self.dir, to, &mut d.link);
        let mut sent = 0;
        if let Some(fd) = &d.link.fd {
            loop {
                let frames = &d.queue.make_contiguous()[sent..];
                if frames.is_empty() {
                    return sent;
                }
                match send_packed(fd, &mut self.packs, frames) {
                    Ok(k) => {
                        sent += k;
                        if k < frames.len().min(MMSG) {
                            return sent;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return sent,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // The peer closed (its daemon stopped or restarted): reconnect on the
                    // next flush, these go as datagrams. (Closing it leaves the epoll set.)
                    Err(_) => {
                        d.link.fd = None;
                        d.link.watched = false;
                        break;
                    }
                }
            }
        }
        let path = self.dir.join(mac_name(to, "sock"));
        for frame in d.queue.range(sent..) {
            if matches!(self.sock.send_to(frame, &path), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            {
                break;
            }
            sent += 1;
        }
        sent
    }

    /// Sends what waits for `to`.
    fn send_queued(&mut self, to: [u8; 6]) {
        // The peers' map is set aside while one of them is served, which needs the rest of
        // the port.
        let mut dests = std::mem::take(&mut self.dests);
        if let Some(d) = dests.get_mut(&to) {
            self.send_dest(&to, d);
        }
        self.dests = dests;
    }

    /// Sends what waits for every peer.
    fn send_all(&mut self) {
        if self.held == 0 {
            return;
        }
        let mut dests = std::mem::take(&mut self.dests);
        for (to, d) in dests.iter_mut() {
            self.send_dest(to, d);
        }
        self.dests = dests;
    }

    /// Sends what waits for `to`, and watches or gives up on what its socket refuses.
    fn send_dest(&mut self, to: &[u8; 6], d: &mut Dest) {
        if d.queue.is_empty() {
            return;
        }
        let sent = self.send_front(to, d);
        let keep = SPARE.saturating_sub(self.spare.len()).min(sent);
        self.spare.extend(d.queue.drain(..keep));
        d.queue.drain(..sent - keep);
        self.held -= sent;
        if d.queue.is_empty() {
            d.moved_at = None;
            d.link.watch(&self.epoll, false);
            return;
        }
        let now = Instant::now();
        match d.moved_at {
            _ if sent > 0 => d.moved_at = Some(now),
            None => d.moved_at = Some(now),
            Some(t) if now.duration_since(t) >= STALL => {
                // A peer that stopped reading: what waits for it goes, counted.
                let n = d.queue.len();
                d.queue.clear();
                self.held -= n;
                self.tx_dropped += n as u64;
                d.moved_at = None;
                d.link.watch(&self.epoll, false);
                return;
            }
            Some(_) => {}
        }
        // Refused frames wait for room: an idle loop wakes when the connection has it.
        d.link.watch(&self.epoll, true);
    }

    /// Queues the frame that `fill` writes into a buffer of `len` octets, unless it answers
    /// false; sends the peer's queue once [`BATCH`] frames wait in it. A broadcast goes at
    /// once.
    fn queue_frame<R>(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> (R, bool),
    ) -> (R, bool) {
        // A used buffer keeps its length: no zeroing of what `fill` writes over anyway.
        let mut b = self.spare.pop().unwrap_or_default();
        if b.len() < len {
            b.resize(len, 0);
        }
        b.truncate(len);
        let (r, send) = fill(&mut b);
        if !send || len < ETHERNET_HEADER_LEN {
            self.spare.push(b);
            return (r, send);
        }
        if b[0] & 1 != 0 {
            let _ = self.broadcast(&b);
            self.spare.push(b);
            return (r, true);
        }
        if self.held >= BACKLOG {
            self.spare.push(b);
            self.tx_dropped += 1;
            return (r, true);
        }
        let mut to = [0u8; 6];
        to.copy_from_slice(&b[..6]);
        let d = self.dests.entry(to).or_default();
        d.queue.push_back(b);
        self.held += 1;
        // Not while refused frames wait: their socket is full, and the flush tries again.
        if d.queue.len() >= BATCH && d.moved_at.is_none() {
            self.send_queued(to);
        }
        (r, true)
    }

    /// Every frame to all the other ports (ARP), best effort: ARP retries on loss.
    fn broadcast(&mut self, frame: &[u8]) -> io::Result<()> {
        for entry in std::fs::read_dir(&self.dir)?.flatten() {
            let p = entry.path();
            if p != self.path && p.extension().is_some_and(|e| e == "sock") {
                let _ = self.sock.send_to(frame, &p);
            }
        }
        Ok(())
    }

    /// Takes every connection waiting on the listener; called only when a look reported it,
    /// as an `accept4` that finds nobody still allocates a socket and frees it (2.5 µs on
    /// machine C), which a busy loop would pay on every burst.
    fn accept_all(rx: &mut RxSide, epoll: &OwnedFd) {
        while let Ok(fd) = accept_one(&rx.listener) {
            if epoll_add(epoll, fd.as_raw_fd()).is_ok() {
                rx.inbound.push(fd);
            }
        }
    }
}

impl Drop for UnixPort {
    fn drop(&mut self) {
        if let Some(rx) = &self.rx_side {
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_file(&rx.seq_path);
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
        self.send_all();
        let Some(rx) = self.rx_side.as_mut() else {
            return Ok(0);
        };
        // One look at every source in the epoll set tells which hold frames and whether a
        // peer connects: a burst that finds nothing costs one system call, not one per
        // source and another for the listener.
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; LOOK];
        // SAFETY: `events` has room for LOOK reports; a zero timeout never blocks.
        let k = unsafe {
            libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), LOOK as i32, 0)
        };
        // (A failed look, EINTR, is an empty one: the next burst looks again.)
        let k = usize::try_from(k).unwrap_or(0);
        // Source 0 is the datagram socket, source i > 0 is inbound[i - 1].
        let (sock, listener) = (self.sock.as_raw_fd(), rx.listener.as_raw_fd());
        let mut ready = arrayvec::ArrayVec::<usize, LOOK>::new();
        let mut connecting = false;
        for ev in &events[..k] {
            let (what, fd) = (ev.events, ev.u64 as RawFd);
            // A link with room again (EPOLLOUT) is the sending side's business.
            if what & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 == 0 {
                continue;
            }
            if fd == listener {
                connecting = true;
            } else if fd == sock {
                ready.push(0);
            } else if let Some(j) = rx.inbound.iter().position(|c| c.as_raw_fd() == fd) {
                ready.push(j + 1);
            }
        }
        // A peer that just connected has likely sent already: its connection is read too.
        if connecting {
            let known = rx.inbound.len();
            Self::accept_all(rx, &self.epoll);
            for j in known..rx.inbound.len() {
                if ready.try_push(j + 1).is_err() {
                    break;
                }
            }
        }
        let sources = rx.inbound.len() + 1;
        // Each ready source is read until it is empty or the burst is full, starting where
        // the last burst stopped so that no peer's connection waits behind another's.
        let first = rx.next % sources;
        ready.sort_unstable_by_key(|&i| (i + sources - first) % sources);
        let mut n = 0;
        // What the last burst read and had no room for comes first.
        while n < max {
            let Some(frame) = rx.leftover.pop_front() else {
                break;
            };
            f(frame);
            n += 1;
        }
        let mut ended = arrayvec::ArrayVec::<usize, LOOK>::new();
        let mut lens = [0usize; MMSG];
        for &i in &ready {
            if n == max {
                break;
            }
            let fd = if i == 0 {
                sock
            } else {
                rx.inbound[i - 1].as_raw_fd()
            };
            rx.next = i + 1;
            while n < max {
                // Whether the source gave all that was asked (it may hold more).
                let r = if i == 0 {
                    // Datagrams, a frame each, straight into the buffers they travel in.
                    let want = (max - n).min(MMSG);
                    while rx.bufs.len() < want {
                        rx.bufs.push(self.rx.take());
                    }
                    let r = recv_many(fd, &mut self.mmsg, &mut rx.bufs[..want], &mut lens);
                    let got = *r.as_ref().unwrap_or(&0);
                    for (b, &len) in rx.bufs.drain(..got).zip(&lens) {
                        f(self.rx.frame(b, len));
                    }
                    n += got;
                    r.map(|k| k == want)
                } else {
                    // Messages of several frames. A busy link's hold eight or more (eleven
                    // full frames fill one), so this asks for about the burst's room.
                    let want = ((max - n) / 8).clamp(1, RX_MSGS);
                    let r = recv_many(fd, &mut self.mmsg, &mut rx.msgs[..want], &mut lens);
                    let got = *r.as_ref().unwrap_or(&0);
                    n += rx.unpack_received(&mut self.rx, &lens[..got], max - n, &mut f);
                    r.map(|k| k == want)
                };
                match r {
                    Ok(true) => {}
                    // Fewer than asked: the source is empty (or ends next read).
                    Ok(false) => break,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if i == 0 => return Err(e),
                    // A peer's connection ended (or failed): it reconnects if it lives.
                    Err(_) => {
                        ended.push(i);
                        break;
                    }
                }
            }
        }
        // Closing a descriptor takes it out of the epoll set; the highest index first, so
        // that each removal moves none still to be removed.
        ended.sort_unstable();
        for &i in ended.iter().rev() {
            rx.inbound.swap_remove(i - 1);
        }
        // Short of the burst, every source the look found was read empty; a full look may
        // have left some unreported.
        rx.drained = n < max && k < LOOK && !ready.is_full() && rx.leftover.is_empty();
        Ok(n)
    }

    fn recycle(&mut self, frame: RxBuf) {
        self.rx.give_back(frame)
    }

    fn rx_drained(&self) -> bool {
        // A sender has nothing to read.
        self.rx_side.as_ref().is_none_or(|rx| rx.drained)
    }

    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        self.queue_frame(frame.len(), |b| {
            b.copy_from_slice(frame);
            ((), true)
        });
        Ok(())
    }

    fn tx_with<R>(
        &mut self,
        len: usize,
        _scratch: &mut Vec<u8>,
        build: impl FnOnce(&mut [u8]) -> (R, bool),
    ) -> (R, bool) {
        // Built straight into the buffer it waits in: the kernel's is the only copy.
        self.queue_frame(len, build)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_all();
        Ok(())
    }
    fn dropped(&self) -> u64 {
        self.tx_dropped
    }
    fn tx_ready(&self) -> bool {
        self.held < PAUSE_AT
    }
    fn tx_full(&self) -> bool {
        // Half the queue: the rest is room for the ACKs made outside TCP's rounds.
        self.held >= BACKLOG / 2
    }
    fn wait_fd(&self) -> Option<RawFd> {
        // Frames held back for a peer with no connection (its queue of datagrams full) are
        // retried by polling; those on a connection wake the loop when it has room.
        if self.held > 0
            && self
                .dests
                .values()
                .any(|d| !d.queue.is_empty() && !d.link.watched)
        {
            return None;
        }
        Some(self.epoll.as_raw_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(to: [u8; 6], from: [u8; 6], n: u32) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&to);
        f.extend_from_slice(&from);
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&n.to_be_bytes());
        f.resize(1400, 0xab);
        f
    }

    fn receive_all(p: &mut UnixPort, into: &mut Vec<u32>) {
        loop {
            let mut got = Vec::new();
            p.rx_burst(32, |f| got.push(f)).unwrap();
            if got.is_empty() {
                return;
            }
            for f in got {
                into.push(u32::from_be_bytes(f[14..18].try_into().unwrap()));
                p.recycle(f);
            }
        }
    }

    /// `frames` as one message on a connection: each behind its length.
    fn packed(frames: &[&[u8]]) -> Vec<u8> {
        let mut m = Vec::new();
        for f in frames {
            m.extend_from_slice(&(f.len() as u32).to_be_bytes());
            m.extend_from_slice(f);
        }
        m
    }

    /// The number a test frame carries.
    fn number(f: &[u8]) -> u32 {
        u32::from_be_bytes(f[14..18].try_into().unwrap())
    }

    /// Sends `msg` as one message on the connection `fd`.
    fn send_message(fd: &OwnedFd, msg: &[u8]) {
        // SAFETY: `msg` is a live slice of its length, which the kernel only reads.
        let r = unsafe {
            libc::send(
                fd.as_raw_fd(),
                msg.as_ptr() as *const libc::c_void,
                msg.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        assert_eq!(r, msg.len() as isize);
    }

    #[test]
    fn unpack_reads_frames_behind_their_lengths_and_names_a_fault() {
        let (f0, f1) = (frame([2; 6], [4; 6], 7), frame([2; 6], [4; 6], 8));
        let m = packed(&[&f0, &f1]);
        let got: Vec<_> = unpack(&m).collect();
        assert_eq!(got, [Ok(&f0[..]), Ok(&f1[..])]);
        assert_eq!(unpack(&[]).count(), 0, "an empty message holds nothing");
        // Cut inside the second frame's length, then inside its octets.
        let at = FRAME_LEN + f0.len();
        let got: Vec<_> = unpack(&m[..at + 2]).collect();
        assert_eq!(got, [Ok(&f0[..]), Err(Unpack::Truncated { at })]);
        let got: Vec<_> = unpack(&m[..m.len() - 1]).collect();
        assert_eq!(got, [Ok(&f0[..]), Err(Unpack::Truncated { at })]);
        // A length shorter than an Ethernet header ends the message.
        let mut runt = packed(&[&f0[..13]]);
        runt.extend_from_slice(&m);
        let got: Vec<_> = unpack(&runt).collect();
        assert_eq!(got, [Err(Unpack::Runt { at: 0, len: 13 })]);
    }

    /// Frames for one peer share messages on its connection, each behind its length and in
    /// order, [`PACK`] octets at most: one system call at each end carries many.
    #[test]
    fn frames_to_a_peer_share_messages_behind_their_lengths() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb) = ([2, 0, 0, 0, 9, 0x61], [2, 0, 0, 0, 9, 0x62]);
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        // B is a bare listener: what A writes on the connection is read as it is.
        let listener = listen_at(&dir.path().join(mac_name(&mb, "seq"))).unwrap();
        const N: u32 = 30;
        for n in 0..N {
            a.tx(&frame(mb, ma, n)).unwrap();
        }
        a.flush().unwrap();
        let conn = accept_one(&listener).unwrap();
        let mut msgs = Vec::new();
        loop {
            let mut buf = vec![0u8; 2 * PACK];
            // SAFETY: `buf` is valid for writes of its length.
            let r = unsafe {
                libc::recv(
                    conn.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r <= 0 {
                break;
            }
            buf.truncate(r as usize);
            msgs.push(buf);
        }
        // 11 frames of 1,400 octets fit 16 KiB. The first BATCH went as the batch filled,
        // the other 14 at the flush.
        let frames: Vec<usize> = msgs.iter().map(|m| unpack(m).count()).collect();
        assert_eq!(frames, [11, BATCH - 11, 11, N as usize - BATCH - 11]);
        assert!(msgs.iter().all(|m| m.len() <= PACK));
        let got: Vec<u32> = msgs
            .iter()
            .flat_map(|m| unpack(m).map(|f| number(f.unwrap())))
            .collect();
        assert_eq!(got, (0..N).collect::<Vec<_>>());
    }

    /// A message holding more frames than a burst has room for: the rest wait in the port,
    /// come first in the next bursts, in order, and until then no burst says it drained
    /// the port.
    #[test]
    fn frames_past_a_bursts_room_wait_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb) = ([2, 0, 0, 0, 9, 0x71], [2, 0, 0, 0, 9, 0x72]);
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        let mut b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        for n in 0..11 {
            a.tx(&frame(mb, ma, n)).unwrap();
        }
        a.flush().unwrap();
        let mut bursts = Vec::new();
        let mut got = Vec::new();
        for _ in 0..3 {
            let n = b.rx_burst(4, |f| got.push(number(&f))).unwrap();
            bursts.push((n, b.rx_drained()));
        }
        assert_eq!(bursts, [(4, false), (4, false), (3, true)]);
        assert_eq!(got, (0..11).collect::<Vec<_>>());
    }

    /// A message on an inbound connection that is not frames behind their lengths (not
    /// from a port of ours) gives the frames before the fault, is counted, and the
    /// connection's next message is read as usual.
    #[test]
    fn a_malformed_message_is_counted_and_the_connection_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb) = ([2, 0, 0, 0, 9, 0x81], [2, 0, 0, 0, 9, 0x82]);
        let mut b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        let raw = connect_to(&dir.path().join(mac_name(&mb, "seq"))).unwrap();
        let (f0, f1) = (frame(mb, ma, 0), frame(mb, ma, 1));
        let mut bad = packed(&[&f0]);
        bad.extend_from_slice(&[0, 0, 0, 5, 1, 2, 3, 4, 5]);
        send_message(&raw, &bad);
        send_message(&raw, &packed(&[&f1]));
        let mut got = Vec::new();
        receive_all(&mut b, &mut got);
        assert_eq!(got, [0, 1]);
        assert_eq!(b.rx_malformed(), 1);
    }

    /// Far more frames than `net.unix.max_dgram_qlen` sent to one peer before it reads
    /// any all arrive, in order, and none is dropped: they go on a connection, bounded by
    /// its send buffer, and the peer's queue in the port holds the rest.
    #[test]
    fn a_burst_to_one_peer_arrives_whole_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb) = ([2, 0, 0, 0, 9, 1], [2, 0, 0, 0, 9, 2]);
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        let mut b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        const N: u32 = 3000;
        for n in 0..N {
            a.tx(&frame(mb, ma, n)).unwrap();
        }
        assert_eq!(a.links(), 1);
        let mut got = Vec::new();
        while got.len() < N as usize {
            a.flush().unwrap();
            receive_all(&mut b, &mut got);
        }
        assert_eq!(got, (0..N).collect::<Vec<_>>());
        assert_eq!(a.dropped(), 0);
    }

    /// A burst says whether it left anything to read: a full one cannot tell, a short one
    /// read every source until it was empty, so the next look would find nothing.
    #[test]
    fn a_short_burst_says_the_port_is_drained() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb) = ([2, 0, 0, 0, 9, 0x31], [2, 0, 0, 0, 9, 0x32]);
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        let mut b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        // A sender has nothing to read.
        assert!(a.sender().unwrap().rx_drained());
        for n in 0..40 {
            a.tx(&frame(mb, ma, n)).unwrap();
        }
        a.flush().unwrap();
        let mut bursts = Vec::new();
        loop {
            let mut got = Vec::new();
            let n = b.rx_burst(32, |f| got.push(f)).unwrap();
            for f in got {
                b.recycle(f);
            }
            bursts.push((n, b.rx_drained()));
            if n == 0 {
                break;
            }
        }
        assert_eq!(bursts, [(32, false), (8, true), (0, true)]);
        a.tx(&frame(mb, ma, 40)).unwrap();
        a.flush().unwrap();
        assert_eq!(b.rx_burst(32, drop).unwrap(), 1);
        assert!(b.rx_drained());
    }

    /// Frames for a peer wait for the flush, or until `BATCH` wait, and then go together,
    /// in order; the peer reads a burst of them at once.
    #[test]
    fn frames_go_in_batches_at_the_flush_or_once_a_batch_waits() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb) = ([2, 0, 0, 0, 9, 0x51], [2, 0, 0, 0, 9, 0x52]);
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        let mut b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        let few = (BATCH - 1) as u32;
        for n in 0..few {
            a.tx(&frame(mb, ma, n)).unwrap();
        }
        let mut got = Vec::new();
        receive_all(&mut b, &mut got);
        assert!(got.is_empty(), "sent before the flush: {got:?}");
        assert_eq!(a.held(), BATCH - 1);
        a.flush().unwrap();
        assert_eq!(a.held(), 0);
        let mut burst = 0;
        b.rx_burst(64, |f| {
            got.push(u32::from_be_bytes(f[14..18].try_into().unwrap()));
            burst += 1;
        })
        .unwrap();
        assert_eq!(burst, BATCH - 1, "one burst reads them all");
        for n in few..few + BATCH as u32 {
            a.tx(&frame(mb, ma, n)).unwrap();
        }
        assert_eq!(a.held(), 0, "a whole batch went without a flush");
        receive_all(&mut b, &mut got);
        assert_eq!(got, (0..few + BATCH as u32).collect::<Vec<_>>());
    }

    /// A peer that connects while frames from another keep coming is accepted, and its
    /// frames read, by the next burst.
    #[test]
    fn a_new_peer_is_accepted_while_another_streams() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb, mc) = (
            [2, 0, 0, 0, 9, 0x61],
            [2, 0, 0, 0, 9, 0x62],
            [2, 0, 0, 0, 9, 0x63],
        );
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        let mut b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        let mut c = UnixPort::open(dir.path(), mc, 1500).unwrap();
        let from = |f: &[u8]| f[11];
        let mut from_c = None;
        for burst in 0..64 {
            a.tx(&frame(mb, ma, burst)).unwrap();
            a.flush().unwrap();
            if burst == 8 {
                c.tx(&frame(mb, mc, 0)).unwrap();
                c.flush().unwrap();
            }
            let mut frames = Vec::new();
            b.rx_burst(32, |f| frames.push(from(&f))).unwrap();
            assert!(!frames.is_empty(), "A's frame of burst {burst}");
            if frames.contains(&0x63) {
                from_c = Some(burst);
                break;
            }
        }
        let at = from_c.expect("C's frame never arrived");
        assert_eq!(at, 8, "C's frame came at burst {at}");
    }

    /// A peer that never reads holds up frames to it only: frames to another peer still
    /// go out at once.
    #[test]
    fn a_full_peer_does_not_hold_up_another() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb, mc) = (
            [2, 0, 0, 0, 9, 0x11],
            [2, 0, 0, 0, 9, 0x12],
            [2, 0, 0, 0, 9, 0x13],
        );
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        let _b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        let mut c = UnixPort::open(dir.path(), mc, 1500).unwrap();
        // B's connection fills and frames to B wait in A's queue for B.
        for n in 0..2000 {
            a.tx(&frame(mb, ma, n)).unwrap();
        }
        assert!(a.held > 0, "B's queue never filled");
        for n in 0..5 {
            a.tx(&frame(mc, ma, n)).unwrap();
        }
        a.flush().unwrap();
        let mut got = Vec::new();
        receive_all(&mut c, &mut got);
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
    }

    /// Whether `fd` becomes readable within `ms` milliseconds.
    fn readable(fd: RawFd, ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }

    /// Once `PAUSE_AT` frames wait for a full peer the port takes no more (the device then
    /// leaves them in TCP), and an idle loop sleeping on the port wakes when the peer has
    /// read, not on a timer; after sending what waited the port takes frames again.
    #[test]
    fn a_full_peer_pauses_the_port_and_its_reading_wakes_it() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb) = ([2, 0, 0, 0, 9, 0x31], [2, 0, 0, 0, 9, 0x32]);
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        let mut b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        let mut n = 0;
        while a.tx_ready() {
            a.tx(&frame(mb, ma, n)).unwrap();
            n += 1;
            assert!(n < 100_000, "the port never paused");
        }
        assert_eq!(a.held, PAUSE_AT);
        let fd = a
            .wait_fd()
            .expect("frames on a connection wait for a wake-up, not a timer");
        assert!(!readable(fd, 0), "nothing to do before B reads");
        let mut got = Vec::new();
        receive_all(&mut b, &mut got);
        assert!(readable(fd, 5000), "B's reading woke A");
        a.flush().unwrap();
        assert!(a.tx_ready());
        assert_eq!(a.held, 0);
        receive_all(&mut b, &mut got);
        assert_eq!(got, (0..n).collect::<Vec<_>>());
        assert_eq!(a.dropped(), 0);
        let fd = a.wait_fd().unwrap();
        assert!(
            !readable(fd, 0),
            "A's connection is no longer watched once drained"
        );
    }

    /// A peer that reads nothing for `STALL` while frames wait for it has them dropped and
    /// counted, so it cannot hold the port paused for its other peers.
    #[test]
    fn a_peer_that_stops_reading_is_dropped_after_the_stall_time() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb, mc) = (
            [2, 0, 0, 0, 9, 0x41],
            [2, 0, 0, 0, 9, 0x42],
            [2, 0, 0, 0, 9, 0x43],
        );
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        let _b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        let mut c = UnixPort::open(dir.path(), mc, 1500).unwrap();
        let mut n = 0;
        while a.tx_ready() {
            a.tx(&frame(mb, ma, n)).unwrap();
            n += 1;
        }
        a.flush().unwrap();
        assert!(!a.tx_ready(), "B read nothing: still paused");
        std::thread::sleep(STALL);
        a.flush().unwrap();
        assert!(a.tx_ready(), "B's frames dropped after the stall time");
        assert_eq!(a.dropped(), PAUSE_AT as u64);
        a.tx(&frame(mc, ma, 7)).unwrap();
        a.flush().unwrap();
        let mut got = Vec::new();
        receive_all(&mut c, &mut got);
        assert_eq!(got, vec![7]);
    }

    /// A peer that restarts (its sockets closed and bound again) is reached again: the
    /// closed connection is dropped and a new one opened.
    #[test]
    fn a_restarted_peer_is_reached_again() {
        let dir = tempfile::tempdir().unwrap();
        let (ma, mb) = ([2, 0, 0, 0, 9, 0x21], [2, 0, 0, 0, 9, 0x22]);
        let mut a = UnixPort::open(dir.path(), ma, 1500).unwrap();
        let mut b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        a.tx(&frame(mb, ma, 1)).unwrap();
        a.flush().unwrap();
        let mut got = Vec::new();
        receive_all(&mut b, &mut got);
        assert_eq!(got, vec![1]);
        drop(b);
        let mut b = UnixPort::open(dir.path(), mb, 1500).unwrap();
        for n in 2..5 {
            a.tx(&frame(mb, ma, n)).unwrap();
        }
        a.flush().unwrap();
        // The batch that finds the connection closed goes as datagrams; the next flush
        // opens a new connection.
        assert_eq!(a.links(), 0);
        a.tx(&frame(mb, ma, 5)).unwrap();
        a.flush().unwrap();
        assert_eq!(a.links(), 1);
        let mut got = Vec::new();
        receive_all(&mut b, &mut got);
        assert_eq!(got, vec![2, 3, 4, 5]);
    }
}
