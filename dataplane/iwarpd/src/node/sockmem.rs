//! Where each TCP socket's rings live: an anonymous mapping of its own per ring, so that a
//! connection costs memory only for the pages its bytes have touched, gives them back to
//! the kernel once it is idle with both rings empty ([`Node::trim_idle`]), and gives back
//! the whole mapping when its socket is removed ([`Node::remove_socket`]). A heap ring of
//! the same size would be written in full up front and, freed, often stay with the process.
//!
//! smoltcp 0.14 cannot resize a socket's rings, and holds them as a slice for the socket's
//! whole life: the mapping stays at one address until the socket is out of the set.

use super::*;
use rustc_hash::FxHashMap;
use std::ptr::NonNull;

/// How often (in the poll loop's live time) idle connections give back their pages.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// One ring's memory: a private anonymous mapping of `len` octets rounded up to pages.
struct Ring {
    ptr: NonNull<u8>,
    /// The mapping's length (whole pages).
    mapped: usize,
}

impl Ring {
    fn new(len: usize) -> Option<Ring> {
        let page = page_size();
        let mapped = len.max(1).div_ceil(page) * page;
        // SAFETY: a fresh private anonymous mapping at an address the kernel chooses touches
        // no memory of ours; the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Ring {
            ptr: NonNull::new(p.cast())?,
            mapped,
        })
    }

    /// The ring as smoltcp holds it: the first `len` octets of the mapping.
    ///
    /// # Safety
    /// Call once per ring; the slice must be dropped (its socket removed from the set)
    /// before the ring is.
    unsafe fn slice(&self, len: usize) -> &'static mut [u8] {
        debug_assert!(len <= self.mapped);
        // SAFETY: the mapping is `mapped >= len` readable and writable octets (zero-filled by
        // the kernel), nothing else refers to it (the caller takes the slice once), and the
        // caller keeps the ring alive for as long as the slice is used.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len) }
    }

    /// Hands the ring's pages back to the kernel; they read as zero when next touched.
    fn release_pages(&self) {
        // SAFETY: the range is exactly our own mapping. Its content changes to zeros under
        // the socket's slice, which is not in use during the call (one thread owns the
        // node), and only while the ring is empty: smoltcp reads a ring only where it wrote
        // first (received octets before the application takes them, sent ones before they
        // are acknowledged), so none of the zeroed octets is ever read as data.
        unsafe {
            libc::madvise(self.ptr.as_ptr().cast(), self.mapped, libc::MADV_DONTNEED);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; no slice of it is alive any more (see
        // `Ring::slice`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.mapped);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// A socket's two rings, with the flow's count of data moves when they were last given back
/// and at the last look.
struct Rings {
    rx: Ring,
    tx: Ring,
    trimmed_at: Option<u64>,
    seen_at: Option<u64>,
}

/// The rings of every socket of a node that has mapped ones.
#[derive(Default)]
pub(super) struct SocketMem {
    rings: FxHashMap<Sock, Rings>,
    next_trim: std::time::Duration,
    /// Idle connections' rings given back (see [`Node::ring_trims`]).
    trims: u64,
}

/// A socket's mapped rings, receive and send, kept by [`Node::add_socket`].
pub(super) struct MappedRings(Ring, Ring);

/// A socket's receive and send buffers of `rx` and `tx` octets, mapped when the kernel gives
/// the mappings (heap vectors otherwise), with the mappings to hand to [`Node::add_socket`]
/// with the socket.
pub(super) fn buffers(
    rx: usize,
    tx: usize,
) -> (
    tcp::SocketBuffer<'static>,
    tcp::SocketBuffer<'static>,
    Option<MappedRings>,
) {
    match (Ring::new(rx), Ring::new(tx)) {
        (Some(r), Some(t)) => {
            // SAFETY: each ring's slice is taken once here, and the rings are kept in
            // `SocketMem::rings` until `Node::remove_socket` has removed (and dropped) the
            // socket holding the slices, or until the node drops, after its socket set
            // (`Node`'s field order).
            let (rs, ts) = unsafe { (r.slice(rx), t.slice(tx)) };
            (
                tcp::SocketBuffer::new(rs),
                tcp::SocketBuffer::new(ts),
                Some(MappedRings(r, t)),
            )
        }
        _ => (
            tcp::SocketBuffer::new(vec![0; rx]),
            tcp::SocketBuffer::new(vec![0; tx]),
            None,
        ),
    }
}

impl<P: Port> Node<P> {
    /// Sockets whose rings are mapped, listening ones included.
    pub fn mapped_sockets(&self) -> usize {
        self.mem.rings.len()
    }

    /// How many times an idle connection's rings were given back to the kernel.
    pub fn ring_trims(&self) -> u64 {
        self.mem.trims
    }

    /// Adds `socket` to the set, keeping its rings until it is removed.
    pub(super) fn add_socket(
        &mut self,
        socket: tcp::Socket<'static>,
        rings: Option<MappedRings>,
    ) -> Sock {
        let h = self.sockets.add(socket);
        if let Some(MappedRings(rx, tx)) = rings {
            self.mem.rings.insert(
                h,
                Rings {
                    rx,
                    tx,
                    trimmed_at: None,
                    seen_at: None,
                },
            );
        }
        h
    }

    /// Removes socket `h` from the set, then unmaps its rings.
    pub(super) fn remove_socket(&mut self, h: Sock) {
        // The socket (and the slices it holds) is dropped by this statement, before its rings.
        drop(self.sockets.remove(h));
        self.mem.rings.remove(&h);
    }

    /// Routes flow `key`'s frames to socket `h` (see `sockets.rs`), which may move it; its
    /// rings go with it. Returns its handle from now on.
    pub(super) fn route_socket(&mut self, h: Sock, key: FlowKey) -> Sock {
        let moved = self.sockets.route(h, key);
        if moved != h {
            if let Some(rings) = self.mem.rings.remove(&h) {
                self.mem.rings.insert(moved, rings);
            }
        }
        moved
    }

    /// Every [`TRIM_EVERY`] of live time: the rings of each connection that is idle give
    /// their pages back to the kernel. Idle is: no data moved since the last look
    /// ([`PeerTcp::moved`](crate::peer_tcp::PeerTcp::moved)), but some since its rings were
    /// last given back, both rings empty, and every octet the peer sent received in order,
    /// so none waits out of order in the receive ring. A streaming connection's rings are
    /// empty between its segments, often when the look comes; given back then, they would
    /// fault in again at its next segment, a `madvise` and page faults per ring each second
    /// for every busy connection. Keep-alives move no data: an idle connection costs one
    /// `madvise` pair when it goes idle, not one a second.
    pub(super) fn trim_idle(&mut self) {
        if self.live < self.mem.next_trim {
            return;
        }
        self.mem.next_trim = self.live + TRIM_EVERY;
        for c in &self.conns {
            if c.socket_gone {
                continue;
            }
            let Some(rings) = self.mem.rings.get_mut(&c.handle) else {
                continue;
            };
            // A connection not tracked has no count, and nothing tells whether octets wait
            // out of order in its receive ring: only its send ring is given back, each time
            // it is idle.
            let moved = c.flow.and_then(|k| self.dev.peers.moved(k));
            let busy = std::mem::replace(&mut rings.seen_at, moved) != moved;
            if moved.is_some() && (busy || rings.trimmed_at == moved) {
                continue;
            }
            let in_order = c.flow.is_some_and(|k| self.dev.peers.received_in_order(k));
            let s = self.sockets.get::<tcp::Socket>(c.handle);
            if s.recv_queue() != 0 || s.send_queue() != 0 || (moved.is_some() && !in_order) {
                continue;
            }
            if in_order {
                rings.rx.release_pages();
            }
            rings.tx.release_pages();
            rings.trimmed_at = moved;
            self.mem.trims += 1;
        }
    }
}
