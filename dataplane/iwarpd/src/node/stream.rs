//! In RTS: received bytes into the engine, the engine's FPDUs into TCP.
//!
//! FPDU alignment (RFC 5044 section 8): the engine gives one FPDU per `poll_transmit`, at
//! most the connection's segment size (our MSS, or the peer's where smaller), and full-size
//! FPDUs are exactly that. smoltcp cuts its send buffer into segments of that size from the
//! first unsent byte, so a run of full-size FPDUs stays aligned by itself; shorter FPDUs are
//! queued as a group while they fit in one segment, and the node makes smoltcp send the
//! group at once (an interface poll) before queuing more, so the next FPDU starts a
//! segment. A port that pushes back may leave the group unsent: until it is out (nothing
//! queued is unsent), an FPDU that does not fit in it waits aside, in the connection.
//! smoltcp also cuts a segment at the right edge of the peer's window, so the node
//! queues an FPDU only when the peer's window (read off its segments by `peer_tcp.rs`) takes
//! it whole. A retransmission after loss re-cuts from the oldest unacknowledged byte and may
//! pack FPDUs differently; receivers (ours, siw, hardware) reassemble any split, only first
//! transmissions are aligned.

use super::*;

/// What [`Node::transmit_into_socket`] did.
enum Direct {
    /// An FPDU of this many octets is in the send ring.
    Sent(usize),
    /// The QP has nothing to send.
    Nothing,
    /// The ring has no room for the largest FPDU in one piece (or the socket cannot send).
    NoRoom,
}

impl<P: Port> Node<P> {
    /// RTS: received bytes into the engine, the engine's FPDUs into the socket.
    pub(super) fn pump(&mut self, rnic: &mut Rnic, i: usize) -> bool {
        let handle = self.conns[i].handle;
        let Some(qp) = self.conns[i].qp else {
            return false;
        };
        let mut busy = false;
        let mut got = 0;
        let fpdus_before = self.fpdus_tx;
        {
            let s = self.sockets.get_mut::<tcp::Socket>(handle);
            while s.can_recv() {
                let n = s
                    .recv(|data| {
                        rnic.handle_stream(qp, data);
                        (data.len(), data.len())
                    })
                    .unwrap_or(0);
                if n == 0 {
                    break;
                }
                got += n;
            }
        }
        self.stream_rx += got as u64;
        busy |= got > 0;
        // Transmit: whole FPDUs only, each as it will go on the wire, packed several to a
        // segment while they fit (RFC 5044 section 8 allows it; a burst of small messages then
        // costs one segment per MSS rather than one per message). smoltcp cuts what is
        // queued into segments of `seg` octets from the first unsent one, so a group that
        // does not end on that cut is sent on its own before more is queued behind it.
        let flow = self.conns[i].flow;
        let seg = self.segment_size(i);
        // The group queued last time is a segment of its own once everything queued is out.
        let mut open = self.conns[i].open_group;
        if open > 0 {
            if self.unsent(i) > 0 {
                self.iface_egress(self.turn_now);
            }
            if self.unsent(i) == 0 {
                open = 0;
            }
        }
        if self.conns[i].held_fpdu.is_some() {
            if open > 0 {
                // Still behind the group: the port has not taken it.
                self.conns[i].open_group = open;
                return busy;
            }
            if let Some(held) = self.conns[i].held_fpdu.take() {
                let _ = self
                    .sockets
                    .get_mut::<tcp::Socket>(handle)
                    .send_slice(&held);
                open = held.len() % seg;
                self.fpdus_tx += 1;
                busy = true;
            }
        }
        let share = self.inflight_share(i, seg);
        while rnic.wants_transmit(qp) {
            let room = {
                // The node's bound, or the sender's congestion window where it tracks one
                // (with the SACKed octets it may send past: `Sender::send_window`), within
                // the connection's share of what the node may have in flight.
                let bound = flow
                    .and_then(|k| self.dev.peers.sender(k))
                    .map_or(self.tcp.max_inflight, |s| s.send_window())
                    .min(share);
                let s = self.sockets.get::<tcp::Socket>(handle);
                let queued = s.send_queue();
                let mut room = (s.send_capacity() - queued).min(bound.saturating_sub(queued));
                // Within the peer's window too, or smoltcp cuts the last FPDU at its edge.
                // With nothing queued a window below one segment is sent into anyway: it
                // is the peer's to open, and waiting for it could wait forever.
                if queued > 0 {
                    if let Some(window) = flow.and_then(|k| self.dev.peers.window(k)) {
                        room = room.min(window.saturating_sub(queued));
                    }
                }
                room
            };
            // And within what the turn may still queue (see `Node::exchange`).
            let room = room.min(self.turn_budget);
            if room < seg {
                break;
            }
            // An FPDU that starts a segment is written straight into the socket's send ring
            // where the ring has room for the largest in one piece (a copy per octet fewer);
            // one that may join a group is built aside first, since the group goes on its
            // own when the FPDU turns out not to fit behind it.
            let n = match (open == 0).then(|| self.transmit_into_socket(rnic, handle, qp)) {
                Some(Direct::Sent(n)) => n,
                Some(Direct::Nothing) => break,
                Some(Direct::NoRoom) | None => {
                    let Some(n) = rnic.poll_transmit(qp, &mut self.fpdu) else {
                        break;
                    };
                    if open > 0 && open + n > seg {
                        if !self.iface_egress(self.turn_now) && self.unsent(i) > 0 {
                            // The port pushed back before the group went: this FPDU
                            // waits aside, behind it.
                            self.conns[i].held_fpdu = Some(self.fpdu[..n].into());
                            break;
                        }
                        open = 0;
                    }
                    let _ = self
                        .sockets
                        .get_mut::<tcp::Socket>(handle)
                        .send_slice(&self.fpdu[..n]);
                    n
                }
            };
            open = (open + n) % seg;
            self.turn_budget = self.turn_budget.saturating_sub(n);
            self.fpdus_tx += 1;
            busy = true;
        }
        if open > 0 && self.iface_egress(self.turn_now) {
            // The group went now, so the next FPDU queued starts a segment.
            open = 0;
        }
        self.conns[i].open_group = open;
        if self.fpdus_tx != fpdus_before {
            let period = Senders::period_of(self.live);
            self.senders.sent(&mut self.conns[i].sent_in, period);
        }
        if busy && !self.conns[i].in_flight {
            self.conns[i].in_flight = true;
            self.flight.push(i);
        }
        // A QP in Error has sent its last FPDU (a Terminate, if any, is queued): the stream
        // ends after it (RFC 5040 section 5.3), so the peer's QP learns it too; so does one
        // that finished Closing (back in Idle after RTS: a graceful disconnect). In relay
        // mode the control plane owns the connection and hears of its end.
        let c = &mut self.conns[i];
        let done = match rnic.qp_state(qp) {
            Some(iwarp_engine::QpState::Error) => true,
            Some(iwarp_engine::QpState::Idle) => c.state == ConnState::Rts,
            _ => false,
        };
        if c.settings.is_none() && !c.closing && done && !rnic.wants_transmit(qp) {
            c.closing = true;
            self.sockets.get_mut::<tcp::Socket>(handle).close();
            busy = true;
        }
        busy
    }

    /// What connection `i` may have unacknowledged as one of the node's senders: an equal
    /// part of `TcpSettings::worker_inflight` (see [`Senders`]), at least four segments of
    /// `seg` octets, so that every connection moves. A part, not a pool: one that took more
    /// while fewer were sending sends nothing new until its acknowledgements bring it under.
    /// The senders are at least those with data in flight and those whose QP has FPDUs
    /// waiting: a turn's budget reaches only some of many streams, and counted by who sent
    /// lately each would take a larger part, and so a larger burst, than its equal one.
    pub(super) fn inflight_share(&self, i: usize, seg: usize) -> usize {
        let in_flight = self.flight.len() + usize::from(!self.conns[i].in_flight);
        let senders = self.senders.count(in_flight.max(self.wanting));
        (self.tcp.worker_inflight / senders).max(4 * seg)
    }

    /// Octets queued in connection `i`'s socket that were never sent: the queue less what is
    /// in flight (from the highest octet sent and the peer's acknowledgement, as the device
    /// saw them). 0 where the device tracks no sender for the connection.
    fn unsent(&self, i: usize) -> usize {
        let Some(sender) = self.conns[i].flow.and_then(|k| self.dev.peers.sender(k)) else {
            return 0;
        };
        let in_flight = sender
            .nxt()
            .map_or(0, |nxt| nxt.wrapping_sub(sender.una()) as usize);
        let queued = self
            .sockets
            .get::<tcp::Socket>(self.conns[i].handle)
            .send_queue();
        queued.saturating_sub(in_flight)
    }

    /// The largest TCP segment of connection `i`, and so its largest FPDU: our MSS, or the
    /// peer's where smaller (never below 64 octets, which every FPDU header fits in; a peer
    /// asking for less gets cut FPDUs, as it would from any sender).
    pub(super) fn segment_size(&self, i: usize) -> usize {
        let ours = self.tcp.mss;
        self.conns[i]
            .flow
            .and_then(|k| self.dev.peers.mss(k))
            .map_or(ours, |peer| peer.clamp(64, ours))
    }

    /// The QP's next FPDU emitted straight into the free space at the end of the socket's
    /// send ring, if that holds the largest FPDU in one piece.
    fn transmit_into_socket(&mut self, rnic: &mut Rnic, handle: Sock, qp: QpId) -> Direct {
        let largest = self.fpdu.len();
        let sent = self.sockets.get_mut::<tcp::Socket>(handle).send(|ring| {
            if ring.len() < largest {
                return (0, Direct::NoRoom);
            }
            match rnic.poll_transmit(qp, ring) {
                Some(n) => (n, Direct::Sent(n)),
                None => (0, Direct::Nothing),
            }
        });
        // A socket that cannot send: the FPDU is built aside and dropped (the connection is
        // ending).
        sent.unwrap_or(Direct::NoRoom)
    }
}
