//! Relay mode, how the daemon runs: TCP is the node's, the MPA exchange the control plane's.
//! The peer's Request or Reply goes up whole as [`NodeEvent::Bytes`], control's goes down
//! through [`Node::relay_send`], and [`Node::relay_rts`] hands the stream to the engine QP
//! with what was negotiated. Connections are named by control's ids (or ones the node
//! chooses for those it accepts, [`super::INCOMING_ID_BASE`]).

use super::*;

/// Handshakes a relay listener takes at a time: each is a listening socket, so a burst of
/// connections beyond it waits for the peer's SYN to be repeated.
const MAX_BACKLOG: u16 = 128;

impl<P: Port> Node<P> {
    /// Listens on `port` for relay connections, `backlog` handshakes at a time (at most
    /// 128, `MAX_BACKLOG`):
    /// each completed one becomes [`NodeEvent::Incoming`].
    pub fn relay_listen(&mut self, port: u16, backlog: u16) -> Result<(), String> {
        if port == 0 || self.listeners.iter().any(|l| l.port == port) {
            return Err(format!("port {port} is already listening or invalid"));
        }
        self.claim(port)?;
        let mut sockets = Vec::new();
        for _ in 0..backlog.clamp(1, MAX_BACKLOG) {
            let h = self.socket();
            if let Err(e) = self.sockets.get_mut::<tcp::Socket>(h).listen(port) {
                self.remove_socket(h);
                for h in sockets {
                    self.remove_socket(h);
                }
                self.dev.port.release_tcp_port(port);
                return Err(format!("listen on {port}: {e}"));
            }
            sockets.push(h);
        }
        self.listeners.push(Listener { port, sockets });
        Ok(())
    }

    /// Stops listening on `port` (connections already accepted stay).
    pub fn relay_unlisten(&mut self, port: u16) -> bool {
        let Some(i) = self.listeners.iter().position(|l| l.port == port) else {
            return false;
        };
        for h in self.listeners.swap_remove(i).sockets {
            self.remove_socket(h);
        }
        // Connections accepted there keep their frames coming here until they are gone.
        self.release_if_unused(port);
        true
    }

    /// Active open of relay connection `conn` (the control plane's id) to `remote`.
    pub fn relay_connect(&mut self, conn: u32, remote: SocketAddrV4) -> Result<(), String> {
        if self.find(conn).is_some() {
            return Err(format!("connection {conn} exists"));
        }
        let h = self.socket();
        let [a, b, c, d] = remote.ip().octets();
        let ep = IpEndpoint::new(IpAddress::Ipv4(Ipv4Address::new(a, b, c, d)), remote.port());
        // The next ephemeral port whose frames steer to this worker.
        for _ in 0..=u16::MAX {
            self.next_ephemeral = self
                .next_ephemeral
                .checked_add(1)
                .unwrap_or(49152)
                .max(49152);
            if self.dev.port.steers_here(self.next_ephemeral) {
                break;
            }
        }
        let cx = self.iface.context();
        if let Err(e) = self
            .sockets
            .get_mut::<tcp::Socket>(h)
            .connect(cx, ep, self.next_ephemeral)
        {
            self.remove_socket(h);
            return Err(format!("connect to {remote}: {e}"));
        }
        let key = FlowKey::new(self.next_ephemeral, remote.ip().octets(), remote.port());
        let h = self.route_socket(h, key);
        self.by_id.insert(conn, self.conns.len());
        self.conns.push(Conn::new(conn, h, None, true, None));
        Ok(())
    }

    /// Names the engine QP that will own relay connection `conn` once in RTS.
    pub fn relay_bind(&mut self, conn: u32, qp: QpId) -> Result<(), String> {
        let i = self.live(conn)?;
        self.conns[i].qp = Some(qp);
        self.by_qp.insert(qp, i as u32);
        Ok(())
    }

    /// Sends bytes (an MPA Request or Reply) on a relay connection before RTS.
    pub fn relay_send(&mut self, conn: u32, bytes: &[u8]) -> Result<(), String> {
        let i = self.live(conn)?;
        let s = self.sockets.get_mut::<tcp::Socket>(self.conns[i].handle);
        match s.send_slice(bytes) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(n) => Err(format!(
                "connection {conn}: send buffer took {n} of {}",
                bytes.len()
            )),
            Err(e) => Err(format!("connection {conn}: {e}")),
        }
    }

    /// MPA is done: the engine QP bound to `conn` enters RTS with `params`, and every byte
    /// after the peer's MPA frame (still in the socket) goes to it.
    pub fn relay_rts(
        &mut self,
        rnic: &mut Rnic,
        conn: u32,
        qp: QpId,
        params: ConnParams,
    ) -> Result<(), String> {
        let i = self.live(conn)?;
        if self.conns[i].state != ConnState::Relay {
            return Err(format!("connection {conn} is not in MPA setup"));
        }
        let params = ConnParams {
            max_fpdu: params.max_fpdu.min(self.segment_size(i)),
            ..params
        };
        rnic.connect(qp, params)
            .map_err(|e| format!("QP to RTS: {e:?}"))?;
        let c = &mut self.conns[i];
        c.qp = Some(qp);
        c.state = ConnState::Rts;
        self.by_qp.insert(qp, i as u32);
        self.mark(i);
        Ok(())
    }

    /// Graceful close of a relay connection. A QP in RTS goes to Closing first (Verbs
    /// section 6.2): its send queue and outstanding Reads finish, and the FIN follows its
    /// last FPDU (see `stream.rs`). Anything else closes at once (FIN after what is queued).
    pub fn relay_close(&mut self, rnic: &mut Rnic, conn: u32) -> Result<(), String> {
        let i = self.live(conn)?;
        let c = &self.conns[i];
        if let (ConnState::Rts, Some(qp)) = (&c.state, c.qp) {
            if rnic.qp_state(qp) == Some(iwarp_engine::QpState::Rts) {
                self.mark(i);
                return rnic
                    .modify_qp(qp, iwarp_engine::QpState::Closing)
                    .map_err(|e| format!("QP to Closing: {e:?}"));
            }
        }
        self.sockets
            .get_mut::<tcp::Socket>(self.conns[i].handle)
            .close();
        self.conns[i].closing = true;
        self.mark(i);
        Ok(())
    }

    /// Abortive close (RST) of a relay connection; its QP, if any, enters Error.
    pub fn relay_abort(&mut self, rnic: &mut Rnic, conn: u32) -> Result<(), String> {
        let i = self.live(conn)?;
        self.abort(rnic, i);
        Ok(())
    }

    /// Lets relay connection `conn` go on without its QP, which is being destroyed. One
    /// whose graceful close was asked for finishes that close, as a kernel socket closed
    /// after shutdown does: the FIN follows what is already in TCP (work the QP had not
    /// handed to TCP yet is flushed with it), and the peer's TCP still gets and acknowledges
    /// everything before the FIN, where a RST now would let it discard what its RNIC has not
    /// read yet. It is reset if data comes for the QP that is gone, or after
    /// `ORPHAN_LINGER` (10 s). Any other connection is aborted (RST).
    pub fn relay_release(&mut self, rnic: &mut Rnic, conn: u32) -> Result<(), String> {
        let i = self.live(conn)?;
        let c = &mut self.conns[i];
        let draining =
            c.qp.is_some_and(|qp| rnic.qp_state(qp) == Some(iwarp_engine::QpState::Closing));
        if !(c.closing || draining) {
            self.abort(rnic, i);
            return Ok(());
        }
        if !c.closing {
            self.sockets.get_mut::<tcp::Socket>(c.handle).close();
            c.closing = true;
        }
        if let Some(qp) = c.qp.take() {
            self.by_qp.remove(qp);
        }
        c.orphaned_since = Some(std::time::Instant::now());
        self.mark(i);
        Ok(())
    }

    /// The engine QP bound to relay connection `conn`, if it is live and has one.
    pub fn qp_of_conn(&self, conn: u32) -> Option<QpId> {
        self.live(conn).ok().and_then(|i| self.conns[i].qp)
    }

    /// The relay connection owned by engine QP `qp`, if one is live.
    pub fn conn_of_qp(&self, qp: QpId) -> Option<u32> {
        let c = self.conns.get(self.by_qp.get(qp)? as usize)?;
        (c.qp == Some(qp) && !c.socket_gone && !c.is_over()).then_some(c.id)
    }

    /// Connections the node still keeps state for (live ones, and ended ones whose socket
    /// is not reclaimed yet).
    pub fn tracked_connections(&self) -> usize {
        self.conns.len()
    }

    /// What relay connections did since the last call.
    pub fn take_events(&mut self) -> impl Iterator<Item = NodeEvent> + '_ {
        self.events.drain(..)
    }

    fn find(&self, conn: u32) -> Option<usize> {
        let i = *self.by_id.get(&conn)?;
        let c = self.conns.get(i)?;
        (c.id == conn && c.settings.is_none() && !c.socket_gone).then_some(i)
    }

    fn live(&self, conn: u32) -> Result<usize, String> {
        self.find(conn)
            .filter(|&i| !self.conns[i].is_over())
            .ok_or_else(|| format!("no connection {conn}"))
    }

    /// Turns completed handshakes on relay listeners into connections.
    pub(super) fn accept_incoming(&mut self) -> bool {
        let mut busy = false;
        for l in 0..self.listeners.len() {
            for k in 0..self.listeners[l].sockets.len() {
                let h = self.listeners[l].sockets[k];
                let (state, remote) = {
                    let s = self.sockets.get::<tcp::Socket>(h);
                    (s.state(), s.remote_endpoint())
                };
                match state {
                    tcp::State::Listen | tcp::State::SynReceived => continue,
                    tcp::State::Closed => {
                        // A handshake reset before completing: listen again.
                        let port = self.listeners[l].port;
                        let _ = self.sockets.get_mut::<tcp::Socket>(h).listen(port);
                        continue;
                    }
                    _ => {}
                }
                let port = self.listeners[l].port;
                let fresh = self.socket();
                let _ = self.sockets.get_mut::<tcp::Socket>(fresh).listen(port);
                self.listeners[l].sockets[k] = fresh;
                let id = self.next_incoming;
                self.next_incoming = self.incoming_base
                    + (self.next_incoming.wrapping_sub(self.incoming_base) + 1) % INCOMING_IDS;
                let mut c = Conn::new(id, h, None, false, None);
                c.accepted_on = Some(port);
                c.state = ConnState::Relay;
                c.ever_established = true;
                self.by_id.insert(id, self.conns.len());
                self.conns.push(c);
                self.track_peer(self.conns.len() - 1);
                let peer = match remote.map(|e| e.addr) {
                    Some(IpAddress::Ipv4(a)) => {
                        SocketAddrV4::new(Ipv4Addr::from(a.octets()), remote.map_or(0, |e| e.port))
                    }
                    _ => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                };
                self.events.push_back(NodeEvent::Incoming {
                    conn: id,
                    local_port: port,
                    peer,
                });
                busy = true;
            }
        }
        busy
    }

    /// Relay mode before RTS: hands the peer's MPA Request/Reply to the control plane, whole
    /// and alone. Bytes after it stay in the socket for the engine (RFC 5044 section 7.1: the
    /// first FPDU may follow the frame at once).
    pub(super) fn relay_frame(&mut self, i: usize) -> bool {
        if self.conns[i].frame_relayed {
            return false;
        }
        let handle = self.conns[i].handle;
        let mut buf = [0u8; 2048];
        let s = self.sockets.get_mut::<tcp::Socket>(handle);
        let n = s.peek_slice(&mut buf).unwrap_or(0);
        if n == 0 {
            return false;
        }
        let take = match negotiation::frame_complete(&buf[..n]) {
            Ok(Some(len)) => len,
            Ok(None) if n < buf.len() => return false,
            // Not a frame (or larger than any valid one): let the control plane see it and
            // refuse the connection.
            _ => n,
        };
        let got = s.recv_slice(&mut buf[..take]).unwrap_or(0);
        self.conns[i].frame_relayed = true;
        let conn = self.conns[i].id;
        self.events.push_back(NodeEvent::Bytes {
            conn,
            data: buf[..got].to_vec(),
        });
        true
    }
}
