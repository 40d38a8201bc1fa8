//! A connection's life: what its TCP socket's state means for its QP and, in relay mode,
//! for the control plane ([`NodeEvent::Closed`]), each poll turn ([`Node::service`]); aborts;
//! and reclaiming the socket of one that ended.

use super::*;

impl<P: Port> Node<P> {
    /// One poll turn of connection `i`: its TCP state read, acted on, and its bytes moved
    /// for the state it is in. Returns whether anything happened.
    pub(super) fn service(&mut self, rnic: &mut Rnic, i: usize) -> bool {
        if self.conns[i].socket_gone {
            return false;
        }
        let handle = self.conns[i].handle;
        let state = self.conns[i].state.clone();
        let (tcp_state, may_recv, may_send, unread) = {
            let s = self.sockets.get::<tcp::Socket>(handle);
            (s.state(), s.may_recv(), s.may_send(), s.can_recv())
        };
        if self.conns[i].is_over() {
            self.reclaim(i, tcp_state);
            return false;
        }
        // A connection that outlived its QP has nobody to hand data to (Linux resets a closed
        // socket that receives data, too), and it lingers a bounded time.
        if let Some(since) = self.conns[i].orphaned_since {
            if unread || since.elapsed() >= ORPHAN_LINGER {
                self.abort(rnic, i);
                return true;
            }
        }
        if handshake_done(tcp_state) && !self.conns[i].ever_established {
            self.conns[i].ever_established = true;
            self.track_peer(i);
        }
        // Tracking routes the socket, which may move it.
        let handle = self.conns[i].handle;
        // The peer closed its half (FIN) and the engine has read everything before it (a
        // Terminate, the last messages): a graceful disconnect by the peer. The engine moves
        // a QP in RTS to Closing and Idle, or with work outstanding to Terminate and Error
        // (Verbs section 6.2.2.2), and one in Closing on to Idle or Error; the QP ends its
        // own half after its last FPDU. A relay connection still in
        // setup has nothing more coming: it ends now, and the control plane hears of it (as
        // the setup's failure) instead of waiting for a timeout.
        if tcp_state == tcp::State::CloseWait && !unread {
            let c = &mut self.conns[i];
            match c.qp {
                Some(qp) if c.has_stream() => {
                    use iwarp_engine::QpState::{Closing, Rts};
                    if matches!(rnic.qp_state(qp), Some(Rts | Closing)) {
                        rnic.connection_lost(qp, true);
                    }
                }
                _ if !c.has_stream() && !c.closing => {
                    self.sockets.get_mut::<tcp::Socket>(handle).close();
                    c.closing = true;
                }
                _ => {}
            }
        }
        // The connection ended: the peer closed, reset, or it never came up.
        if self.conns[i].ever_established
            && !may_recv
            && !may_send
            && tcp_state != tcp::State::Established
        {
            // smoltcp ends both a reset and a finished close in Closed; the peer's RST,
            // when seen, tells them apart.
            let reset = tcp_state == tcp::State::Closed
                && self.conns[i]
                    .flow
                    .is_some_and(|k| self.dev.peers.was_reset(k));
            let graceful = !reset
                && matches!(
                    tcp_state,
                    tcp::State::TimeWait
                        | tcp::State::Closed
                        | tcp::State::LastAck
                        | tcp::State::Closing
                );
            let reason = if graceful || self.conns[i].closing {
                CloseReason::Graceful
            } else {
                CloseReason::Reset
            };
            self.ended(rnic, i, reason);
            return true;
        }
        if state == ConnState::Connecting
            && tcp_state == tcp::State::Closed
            && !self.conns[i].ever_established
        {
            // An active open refused (the peer's RST), or given up unanswered. Its flow is
            // the one its socket was routed by at the connect (`flow` waits for
            // establishment).
            let refused = self
                .sockets
                .route_of(self.conns[i].handle)
                .is_some_and(|k| self.dev.peers.was_reset(k));
            let reason = if refused {
                CloseReason::Refused
            } else {
                CloseReason::Timeout
            };
            self.ended(rnic, i, reason);
            return true;
        }
        match state {
            ConnState::Connecting if handshake_done(tcp_state) => {
                let Some(settings) = self.conns[i].settings.clone() else {
                    self.conns[i].state = ConnState::Relay;
                    let conn = self.conns[i].id;
                    self.events.push_back(NodeEvent::Established { conn });
                    return true;
                };
                if self.conns[i].initiator {
                    let req = match negotiation::request(&settings) {
                        Ok(r) => r,
                        Err(e) => {
                            self.fail(rnic, i, format!("MPA Request: {e:?}"));
                            return true;
                        }
                    };
                    let _ = self.sockets.get_mut::<tcp::Socket>(handle).send_slice(&req);
                    self.conns[i].state = ConnState::AwaitReply;
                } else {
                    self.conns[i].state = ConnState::AwaitRequest;
                }
                true
            }
            ConnState::Relay => self.relay_frame(i),
            ConnState::AwaitReply | ConnState::AwaitRequest => self.setup(rnic, i),
            ConnState::Rts => self.pump(rnic, i),
            _ => false,
        }
    }

    /// Aborts a connection (RST); its QP enters Error with flushed work.
    pub fn abort(&mut self, rnic: &mut Rnic, conn: usize) {
        let Some(c) = self.conns.get_mut(conn) else {
            return;
        };
        if c.socket_gone {
            return;
        }
        self.sockets.get_mut::<tcp::Socket>(c.handle).abort();
        let had_stream = c.has_stream();
        c.state = ConnState::Closed;
        if let (Some(qp), true) = (c.qp, had_stream) {
            rnic.connection_lost(qp, false);
        }
        self.mark(conn);
    }

    /// Setup failed: the connection is reset and its QP, if any, enters Error.
    pub(super) fn fail(&mut self, rnic: &mut Rnic, i: usize, why: String) {
        let c = &mut self.conns[i];
        self.sockets.get_mut::<tcp::Socket>(c.handle).abort();
        c.state = ConnState::Failed(why);
        self.conns_lost += 1;
        if let Some(qp) = c.qp {
            rnic.connection_lost(qp, false);
        }
    }

    /// The connection is over: tell the engine and, in relay mode, the control plane.
    pub(super) fn ended(&mut self, rnic: &mut Rnic, i: usize, reason: CloseReason) {
        let c = &mut self.conns[i];
        let had_stream = c.has_stream();
        c.state = ConnState::Closed;
        self.conns_lost += 1;
        if let (Some(qp), true) = (c.qp, had_stream) {
            rnic.connection_lost(qp, reason == CloseReason::Graceful);
        }
        if c.settings.is_none() {
            self.events
                .push_back(NodeEvent::Closed { conn: c.id, reason });
        }
    }

    /// Drops relay connections whose socket was reclaimed, so a daemon that has served a
    /// million connections holds no trace of the ended ones. Relay connections are found by
    /// id; connections the node runs itself are addressed by index, so while any exists
    /// nothing is removed (no index moves).
    ///
    /// Dropping moves the connections behind each dropped one and rebuilds the maps and
    /// lists, which visits every connection: it waits until the reclaimed ones are a quarter
    /// of all, so that each ended connection costs O(1) amortized. Dropped at every
    /// reclaim, N connections closing one after another would cost N² visits, and a
    /// daemon closing thousands would stall every other connection. Until then a reclaimed
    /// connection is a `socket_gone` entry that every lookup and list passes over.
    pub(super) fn forget_reclaimed(&mut self) {
        if !std::mem::take(&mut self.reclaimed) || self.unforgotten * 4 < self.conns.len() {
            return;
        }
        if self.conns.iter().all(|c| c.settings.is_none()) {
            self.conns.retain(|c| !c.socket_gone);
            self.conn_moves += 1;
            self.unforgotten = 0;
            // At once, not at the next turn's marking: the next turn's first step (resend
            // nudges over the in-flight list) indexes `conns` before that.
            self.reindex();
        }
    }

    /// A relay connection that is over and whose socket has finished: free the socket and
    /// its buffers. An aborted socket is Closed at once but still owes its peer the RST
    /// (smoltcp sends it on a later poll, after ARP if the neighbour entry expired); it is
    /// freed once that went out (no remote endpoint left), or after [`RECLAIM_AFTER`].
    fn reclaim(&mut self, i: usize, tcp_state: tcp::State) {
        let c = &mut self.conns[i];
        if c.settings.is_some() || c.socket_gone {
            return;
        }
        let since = *c.over_since.get_or_insert_with(std::time::Instant::now);
        let rst_sent = self
            .sockets
            .get::<tcp::Socket>(c.handle)
            .remote_endpoint()
            .is_none();
        let done = match tcp_state {
            tcp::State::TimeWait => true,
            tcp::State::Closed => rst_sent,
            _ => false,
        };
        if done || since.elapsed() >= RECLAIM_AFTER {
            let handle = c.handle;
            self.remove_socket(handle);
            self.set_wants_tx(i, false);
            let c = &mut self.conns[i];
            c.socket_gone = true;
            if self.by_id.get(&c.id) == Some(&i) {
                self.by_id.remove(&c.id);
            }
            self.reclaimed = true;
            self.unforgotten += 1;
            c.inbuf = Vec::new();
            if let Some(key) = c.flow.take() {
                self.dev.peers.forget(key);
            }
            if let Some(port) = c.accepted_on {
                self.release_if_unused(port);
            }
        }
    }

    /// Starts tracking what connection `i`'s peer says that smoltcp keeps to itself (see
    /// `peer_tcp.rs`).
    pub(super) fn track_peer(&mut self, i: usize) {
        let s = self.sockets.get::<tcp::Socket>(self.conns[i].handle);
        let (Some(local), Some(remote)) = (s.local_endpoint(), s.remote_endpoint()) else {
            return;
        };
        let IpAddress::Ipv4(peer) = remote.addr;
        let key = FlowKey::new(local.port, peer.octets(), remote.port);
        self.conns[i].handle = self.route_socket(self.conns[i].handle, key);
        if self.dev.peers.adopt(key) {
            let c = &mut self.conns[i];
            c.flow = Some(key);
            self.by_flow.insert(key, i);
            let mut sender = cc::sender::Sender::new(
                self.tcp.congestion,
                self.segment_size(i),
                self.tcp.max_inflight,
                crate::peer_tcp::SYN_RTO,
                std::time::Duration::from_micros(self.tcp.min_rto_us),
                self.tcp.peer_ack_delay,
            );
            // The connection is given up after the user timeout of silence: the timer backs
            // off to a quarter of it at most, so that several resends fit in it.
            sender.rtt = sender.rtt.clone().with_max(self.tcp.user_timeout / 4);
            self.dev.peers.set_sender(key, sender);
            // The peer's segments are counted from here on: the node judges its silence
            // (`Node::check_peers`), smoltcp's own timeout no longer does.
            let c = &mut self.conns[i];
            c.heard = self.dev.peers.heard(key).unwrap_or(0);
            c.heard_live = self.live;
            self.sockets
                .get_mut::<tcp::Socket>(c.handle)
                .set_timeout(None);
        }
    }

    /// Gives up the steering of `port` once nothing here uses it: no listener, no accepted
    /// connection whose socket lives.
    pub(super) fn release_if_unused(&mut self, port: u16) {
        let used = self.listeners.iter().any(|l| l.port == port)
            || self
                .conns
                .iter()
                .any(|c| c.accepted_on == Some(port) && !c.socket_gone);
        if !used {
            self.dev.port.release_tcp_port(port);
        }
    }
}

/// Whether a socket has finished its three-way handshake, whatever came after. A peer's
/// first octets and its FIN may ride right behind the handshake's last ACK (a client that
/// connects, writes a line and exits), and a turn that takes all three leaves the socket
/// in CLOSE-WAIT before the connection is first visited: it was established all the same,
/// and what the peer sent is still to be read. A socket first seen Closed cannot be told
/// apart from one never connected.
fn handshake_done(state: tcp::State) -> bool {
    !matches!(
        state,
        tcp::State::Closed | tcp::State::Listen | tcp::State::SynSent | tcp::State::SynReceived
    )
}
