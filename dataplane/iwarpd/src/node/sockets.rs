//! The node's TCP sockets, in small sets (shards) so that a turn's TCP work follows the
//! connections that have some, not how many exist. smoltcp walks every socket of the set it
//! is given, to find the one a received segment belongs to and to ask each whether it has
//! something to send; with thousands of idle connections in one set, each segment and each
//! turn would pay for all of them.
//!
//! - A received frame goes to the shard of its flow (the peer's address and port, our port):
//!   smoltcp then searches [`SHARD`] sockets at most. A frame of no known flow (a SYN for a
//!   listener, a segment for a socket gone) goes to the unrouted shard, which holds the
//!   listening sockets and the handshakes they took; a frame that is not TCP (ARP) goes
//!   there too, and one from the wire wakes every shard, since a socket anywhere may wait
//!   for that neighbour.
//! - Egress polls the shards touched since their last egress (a frame received, a socket
//!   written, read, opened or closed: anything through [`Sockets::get_mut`]) and those whose
//!   earliest timer is due; the others are not looked at.
//! - A connection's socket moves out of the unrouted shard once its flow is known
//!   ([`Sockets::route`]): at once for an active open, when established for a passive one.
//!   smoltcp's socket keeps its state and its rings across the move; only its handle changes.

use crate::peer_tcp::FlowKey;
use rustc_hash::FxHashMap;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::{AnySocket, Socket};
use smoltcp::time::Instant;

/// Sockets per routed shard: small, since an egress of a touched shard asks each of its
/// sockets, once for every segment any of them sends, and one busy connection makes its
/// whole shard touched every turn. Not one: a shard's timer is found by walking the shards
/// (`Sockets::take_due`), and a walk of ten thousand idle shards of one costs a busy turn
/// about 4 %. `node-pair streams` on C, 16 QPs, all busy: 2.34 M writes/s in a shard of 16,
/// 2.85 in shards of 4, 2.91 in shards of one (`docs/performance.md`).
const SHARD: usize = 4;

/// The shard that holds sockets of no known flow: listeners and their handshakes.
const UNROUTED: u32 = 0;

/// A socket: its shard and its handle there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sock {
    shard: u32,
    handle: SocketHandle,
}

struct Shard {
    set: SocketSet<'static>,
    len: usize,
    /// In the touched list (`Sockets::touched`).
    touched: bool,
    /// The earliest time a socket of the shard wants to be polled, as of its last egress
    /// (`None`: none does until something is received or written).
    poll_at: Option<Instant>,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            set: SocketSet::new(Vec::new()),
            len: 0,
            touched: false,
            poll_at: None,
        }
    }
}

pub struct Sockets {
    shards: Vec<Shard>,
    /// Shards touched since their last egress, each once.
    touched: Vec<u32>,
    /// The earliest `poll_at` of the shards not touched (or earlier: it is lowered as
    /// shards settle and recomputed only when reached).
    next_timer: Option<Instant>,
    /// Routed shards with room for another socket.
    open: Vec<u32>,
    routes: FxHashMap<FlowKey, Sock>,
    route_of: FxHashMap<Sock, FlowKey>,
    /// Sockets in the sets handed to smoltcp so far (each of which it may walk).
    pub offered: u64,
}

impl Default for Sockets {
    fn default() -> Sockets {
        Sockets {
            shards: vec![Shard::new()],
            touched: Vec::new(),
            next_timer: None,
            open: Vec::new(),
            routes: FxHashMap::default(),
            route_of: FxHashMap::default(),
            offered: 0,
        }
    }
}

impl Sockets {
    /// Adds `socket` to the unrouted shard.
    pub fn add(&mut self, socket: impl AnySocket<'static>) -> Sock {
        self.insert(UNROUTED, socket.upcast())
    }

    fn insert(&mut self, shard: u32, socket: Socket<'static>) -> Sock {
        let s = &mut self.shards[shard as usize];
        let handle = s.set.add(socket);
        s.len += 1;
        self.touch(shard);
        Sock { shard, handle }
    }

    /// Removes socket `s` (and its route), returning it.
    pub fn remove(&mut self, s: Sock) -> Socket<'static> {
        if let Some(key) = self.route_of.remove(&s) {
            if self.routes.get(&key) == Some(&s) {
                self.routes.remove(&key);
            }
        }
        let shard = &mut self.shards[s.shard as usize];
        let socket = shard.set.remove(s.handle);
        shard.len -= 1;
        if s.shard != UNROUTED && shard.len == SHARD - 1 {
            self.open.push(s.shard);
        }
        socket
    }

    /// Routes the frames of flow `key` to socket `s`, moving it out of the unrouted shard
    /// first if it is there. Returns its handle from now on.
    pub fn route(&mut self, s: Sock, key: FlowKey) -> Sock {
        let s = if s.shard == UNROUTED {
            let socket = self.remove(s);
            let shard = self.open_shard();
            let moved = self.insert(shard, socket);
            if self.shards[shard as usize].len == SHARD {
                // `open_shard` gave the last open one.
                self.open.pop();
            }
            moved
        } else {
            s
        };
        if let Some(old) = self.routes.insert(key, s) {
            self.route_of.remove(&old);
        }
        self.route_of.insert(s, key);
        s
    }

    /// The size of a route's entry, for cache hints at [`Sockets::route_hint`]'s address.
    pub const ROUTE_SIZE: usize = size_of::<(FlowKey, Sock)>();

    /// Where flow `key`'s route lies, as a cache hint (see `iwarp_abi::prefetch`); 0 for
    /// a flow not routed.
    pub fn route_hint(&self, key: FlowKey) -> usize {
        use iwarp_abi::prefetch::entry_address;
        self.routes
            .get_key_value(&key)
            .map_or(0, |(k, s)| entry_address(k, s))
    }

    /// The flow socket `s` is routed by, if it is routed.
    pub fn route_of(&self, s: Sock) -> Option<FlowKey> {
        self.route_of.get(&s).copied()
    }

    /// A routed shard with room, made if there is none.
    fn open_shard(&mut self) -> u32 {
        if let Some(&o) = self.open.last() {
            return o;
        }
        self.shards.push(Shard::new());
        let shard = (self.shards.len() - 1) as u32;
        self.open.push(shard);
        shard
    }

    pub fn get<T: AnySocket<'static>>(&self, s: Sock) -> &T {
        self.shards[s.shard as usize].set.get::<T>(s.handle)
    }

    /// The socket, its shard touched: whatever the caller does (write, read, close) may
    /// give it something to send.
    pub fn get_mut<T: AnySocket<'static>>(&mut self, s: Sock) -> &mut T {
        self.touch(s.shard);
        self.shards[s.shard as usize].set.get_mut::<T>(s.handle)
    }

    fn touch(&mut self, shard: u32) {
        let s = &mut self.shards[shard as usize];
        if !s.touched {
            s.touched = true;
            self.touched.push(shard);
        }
    }

    /// The shard a received frame of flow `key` goes to (`None`: not TCP), touched; with
    /// `wake_all`, every shard is touched.
    pub fn shard_for(&mut self, key: Option<FlowKey>, wake_all: bool) -> u32 {
        if wake_all {
            for shard in 0..self.shards.len() as u32 {
                self.touch(shard);
            }
        }
        let shard = key.map_or(UNROUTED, |k| {
            self.routes.get(&k).map_or(UNROUTED, |s| s.shard)
        });
        self.touch(shard);
        shard
    }

    /// Shard `shard`'s set, for smoltcp to receive into or send from.
    pub fn set_mut(&mut self, shard: u32) -> &mut SocketSet<'static> {
        let s = &mut self.shards[shard as usize];
        self.offered += s.len as u64;
        &mut s.set
    }

    /// Adds the shards whose timer is due at `now` to the touched list.
    pub fn take_due(&mut self, now: Instant) {
        if self.next_timer.is_none_or(|t| t > now) {
            return;
        }
        self.next_timer = None;
        for shard in 0..self.shards.len() as u32 {
            let s = &self.shards[shard as usize];
            match s.poll_at {
                Some(t) if t <= now => self.touch(shard),
                Some(t) if !s.touched => {
                    self.next_timer = Some(self.next_timer.map_or(t, |n| n.min(t)));
                }
                _ => {}
            }
        }
    }

    /// The touched shards, for an egress round.
    pub fn touched(&self) -> &[u32] {
        &self.touched
    }

    /// Touched shard `self.touched()[k]` has nothing more to send; its sockets next want
    /// polling at `poll_at`. It leaves the touched list (the last one takes its place).
    pub fn settle(&mut self, k: usize, poll_at: Option<Instant>) {
        let shard = self.touched.swap_remove(k);
        let s = &mut self.shards[shard as usize];
        s.touched = false;
        s.poll_at = poll_at;
        if let Some(t) = poll_at {
            self.next_timer = Some(self.next_timer.map_or(t, |n| n.min(t)));
        }
    }

    /// When egress is next due: now while a shard is touched, else the earliest timer.
    pub fn poll_at(&self) -> Option<Instant> {
        if !self.touched.is_empty() {
            return Some(Instant::ZERO);
        }
        self.next_timer
    }

    /// Routed shards in use, for tests.
    #[cfg(test)]
    pub fn shards(&self) -> usize {
        self.shards.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::socket::tcp;

    fn socket() -> tcp::Socket<'static> {
        tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 64]),
            tcp::SocketBuffer::new(vec![0; 64]),
        )
    }

    #[test]
    fn a_routed_socket_keeps_its_state_and_its_flow_finds_its_shard() {
        let mut s = Sockets::default();
        let h = s.add(socket());
        s.get_mut::<tcp::Socket>(h).listen(7000).unwrap();
        let key = FlowKey::new(7000, [10, 0, 0, 2], 40000);
        assert_eq!(s.shard_for(Some(key), false), UNROUTED);
        let moved = s.route(h, key);
        assert_ne!(moved.shard, UNROUTED);
        assert_eq!(s.get::<tcp::Socket>(moved).state(), tcp::State::Listen);
        assert_eq!(s.shard_for(Some(key), false), moved.shard);
        s.remove(moved);
        assert_eq!(s.shard_for(Some(key), false), UNROUTED);
    }

    #[test]
    fn routed_sockets_fill_shards_of_at_most_shard_sockets_and_reuse_freed_room() {
        let mut s = Sockets::default();
        let mut socks = Vec::new();
        for i in 0..(3 * SHARD) as u16 {
            let h = s.add(socket());
            socks.push(s.route(h, FlowKey::new(i, [10, 0, 0, 2], 1)));
        }
        assert_eq!(s.shards(), 4, "the unrouted shard and three full ones");
        let freed = socks.remove(5);
        s.remove(freed);
        let h = s.add(socket());
        let again = s.route(h, FlowKey::new(999, [10, 0, 0, 2], 1));
        assert_eq!(again.shard, freed.shard);
        assert_eq!(s.shards(), 4);
    }

    #[test]
    fn only_touched_or_due_shards_are_listed_for_egress() {
        let mut s = Sockets::default();
        let h = s.add(socket());
        let a = s.route(h, FlowKey::new(1, [10, 0, 0, 2], 1));
        while !s.touched().is_empty() {
            s.settle(0, None);
        }
        s.get_mut::<tcp::Socket>(a);
        assert_eq!(s.touched(), &[a.shard]);
        s.settle(0, Some(Instant::from_millis(50)));
        s.take_due(Instant::from_millis(49));
        assert!(s.touched().is_empty());
        assert_eq!(s.poll_at(), Some(Instant::from_millis(50)));
        s.take_due(Instant::from_millis(50));
        assert_eq!(s.touched(), &[a.shard]);
        // An ARP frame from the wire wakes every shard.
        s.settle(0, None);
        s.shard_for(None, false);
        assert_eq!(s.touched(), &[UNROUTED]);
        s.settle(0, None);
        s.shard_for(None, true);
        assert_eq!(s.touched().len(), 2);
    }
}
