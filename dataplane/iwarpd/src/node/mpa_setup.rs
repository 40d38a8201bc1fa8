//! The node running the MPA exchange itself (`iwarp_wire::mpa::negotiation`) on a
//! connection's first bytes, then handing the stream to the engine QP: for tests and
//! benchmarks that run a node with no control plane. Connections are named by index.

use super::*;

impl<P: Port> Node<P> {
    /// Accepts one connection on `port` for engine QP `qp` (created by the caller in Idle).
    pub fn listen(&mut self, port: u16, qp: QpId, settings: Settings) -> Result<usize, String> {
        self.claim(port)?;
        let h = self.socket();
        self.sockets
            .get_mut::<tcp::Socket>(h)
            .listen(port)
            .map_err(|e| format!("listen on {port}: {e}"))?;
        self.conns.push(Conn::new(
            self.conns.len() as u32,
            h,
            Some(qp),
            false,
            Some(settings),
        ));
        Ok(self.conns.len() - 1)
    }

    /// Connects to `remote:port` from `local_port` for engine QP `qp`.
    pub fn connect(
        &mut self,
        remote: Ipv4Addr,
        port: u16,
        local_port: u16,
        qp: QpId,
        settings: Settings,
    ) -> Result<usize, String> {
        let h = self.socket();
        let [a, b, c, d] = remote.octets();
        let ep = IpEndpoint::new(IpAddress::Ipv4(Ipv4Address::new(a, b, c, d)), port);
        let cx = self.iface.context();
        self.sockets
            .get_mut::<tcp::Socket>(h)
            .connect(cx, ep, local_port)
            .map_err(|e| format!("connect to {remote}:{port}: {e}"))?;
        let h = self.route_socket(h, FlowKey::new(local_port, remote.octets(), port));
        self.conns.push(Conn::new(
            self.conns.len() as u32,
            h,
            Some(qp),
            true,
            Some(settings),
        ));
        Ok(self.conns.len() - 1)
    }

    pub fn state(&self, conn: usize) -> Option<&ConnState> {
        self.conns.get(conn).map(|c| &c.state)
    }

    pub fn negotiated(&self, conn: usize) -> Option<&Negotiated> {
        self.conns.get(conn)?.negotiated.as_ref()
    }

    /// MPA Request/Reply on the stream's first bytes.
    pub(super) fn setup(&mut self, rnic: &mut Rnic, i: usize) -> bool {
        let handle = self.conns[i].handle;
        let mut buf = [0u8; 2048];
        let n = self
            .sockets
            .get_mut::<tcp::Socket>(handle)
            .recv_slice(&mut buf)
            .unwrap_or(0);
        if n == 0 {
            return false;
        }
        self.conns[i].inbuf.extend_from_slice(&buf[..n]);
        let len = match negotiation::frame_complete(&self.conns[i].inbuf) {
            Ok(Some(len)) => len,
            Ok(None) => return true,
            Err(e) => {
                self.fail(rnic, i, format!("bad MPA frame: {e:?}"));
                return true;
            }
        };
        let frame: Vec<u8> = self.conns[i].inbuf.drain(..len).collect();
        let Some(settings) = self.conns[i].settings.clone() else {
            return false;
        };
        let Some(qp) = self.conns[i].qp else {
            return false;
        };
        let result: Result<Negotiated, SetupError> = if self.conns[i].initiator {
            negotiation::parse_reply(&frame, &settings)
        } else {
            negotiation::parse_request(&frame).and_then(|req| {
                let (reply, n) = negotiation::accept(&req, &settings)?;
                let _ = self
                    .sockets
                    .get_mut::<tcp::Socket>(handle)
                    .send_slice(&reply);
                Ok(n)
            })
        };
        match result {
            Ok(n) => {
                let params = ConnParams {
                    tx: n.tx,
                    rx: n.rx,
                    ird: n.ird,
                    ord: n.ord,
                    rdmap_version: n.rdmap_version,
                    max_fpdu: self.segment_size(i),
                    max_rx_ulpdu: 65535,
                    // RFC 6581 peer-to-peer: the RTR negotiation agreed on (one kind).
                    p2p: n.rtr.and_then(|r| {
                        let rtr = if r.send {
                            RtrKind::Send
                        } else if r.write {
                            RtrKind::Write
                        } else if r.read {
                            RtrKind::Read
                        } else {
                            return None;
                        };
                        Some(PeerToPeer {
                            rtr,
                            initiator: self.conns[i].initiator,
                        })
                    }),
                };
                if let Err(e) = rnic.connect(qp, params) {
                    self.fail(rnic, i, format!("QP to RTS: {e:?}"));
                    return true;
                }
                self.conns[i].negotiated = Some(n);
                self.conns[i].state = ConnState::Rts;
                // Bytes after the frame are the first FPDUs.
                let rest = std::mem::take(&mut self.conns[i].inbuf);
                if !rest.is_empty() {
                    rnic.handle_stream(qp, &rest);
                }
            }
            Err(e) => self.fail(rnic, i, format!("MPA setup: {e:?}")),
        }
        true
    }
}
