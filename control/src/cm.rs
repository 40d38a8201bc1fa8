//! One connection's setup, sans-IO: the connection manager's state machine for the MPA
//! Request/Reply exchange (RFC 5044 section 7, RFC 6581 section 3) that runs on a TCP
//! connection's first bytes, before the stream is handed to the RNIC engine.
//!
//! Inputs are the TCP events the daemon reports (`handle_tcp_established`, `handle_bytes`,
//! `handle_tcp_closed`), the application's decision on an incoming request (`accept`,
//! `reject`) and time (`handle_timeout(now)`, milliseconds of the caller's clock). Outputs
//! are polled with [`Connection::poll_event`]: bytes to send, the request to show the
//! application, and the final result: established with the negotiated parameters, rejected
//! with the peer's private data, or failed with a reason. The negotiation rules themselves
//! (CRC, markers, revision, IRD/ORD, RTR, RDMAP version) live in
//! `iwarp_wire::mpa::negotiation`.
//!
//! Timeouts: RFC 5044 section 7.1 lets the initiator give up waiting for a Reply and the
//! responder give up waiting for a Request; here both waits share one configurable deadline,
//! and waiting for the application's accept/reject has one too, so a silent peer or a
//! stalled application never keeps a connection half open.

use iwarp_abi::app::ConnectFailure;
use iwarp_abi::command::CloseReason;
use iwarp_wire::mpa::negotiation::{self, Incoming, Negotiated, Settings, SetupError};
use std::collections::VecDeque;
use std::fmt;

/// Which end of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The active side: TCP connect, then sends the MPA Request.
    Initiator,
    /// The passive side: accepted from a listen, waits for the Request.
    Responder,
}

/// Where the setup is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    TcpConnecting,
    AwaitingReply,
    AwaitingRequest,
    /// The Request arrived; the application decides.
    AwaitingDecision,
    Established,
    Rejected,
    Failed,
}

/// Why setup failed: each says what to tell the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Nothing came in time in `state`.
    Timeout { state: State },
    /// The TCP connection closed during setup, or could not be opened, and how the daemon
    /// saw it end.
    TcpClosed(CloseReason),
    /// The peer sent something that is not the MPA frame expected.
    BadFrame(String),
    /// Peer-to-peer mode was asked for and no common RTR message exists (RFC 6581 section 3).
    NoMatchingRtr,
    /// Our private data does not fit an MPA frame (512 octets, RFC 5044 section 7.1).
    PrivateDataTooLong,
    /// `accept`/`reject` called when no request waits for a decision.
    NotAwaitingDecision,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Timeout { state } => write!(f, "MPA setup timed out in state {state:?}"),
            Failure::TcpClosed(CloseReason::Refused) => {
                f.write_str("connection refused: nothing listens on that port at the peer")
            }
            Failure::TcpClosed(CloseReason::Reset) => {
                f.write_str("the peer reset the TCP connection during MPA setup")
            }
            Failure::TcpClosed(CloseReason::Timeout) => f.write_str(
                "the TCP connection timed out during setup: the peer did not answer, or went \
                 silent during MPA",
            ),
            Failure::TcpClosed(CloseReason::Shutdown) => {
                f.write_str("the daemon shut down during MPA setup")
            }
            Failure::TcpClosed(CloseReason::Graceful) => {
                f.write_str("the peer closed the TCP connection during MPA setup")
            }
            Failure::BadFrame(e) => write!(f, "bad MPA frame from the peer: {e}"),
            Failure::NoMatchingRtr => {
                f.write_str("peer-to-peer mode: no RTR message both sides support")
            }
            Failure::PrivateDataTooLong => f.write_str("private data longer than MPA allows"),
            Failure::NotAwaitingDecision => f.write_str("no connection request awaits a decision"),
        }
    }
}

impl Failure {
    /// What the application's connection manager is told of the failure.
    pub fn cause(&self) -> ConnectFailure {
        match self {
            Failure::TcpClosed(CloseReason::Refused) => ConnectFailure::Refused,
            Failure::TcpClosed(CloseReason::Reset) => ConnectFailure::Reset,
            Failure::Timeout { .. } | Failure::TcpClosed(CloseReason::Timeout) => {
                ConnectFailure::TimedOut
            }
            _ => ConnectFailure::Other,
        }
    }
}

impl From<SetupError> for Failure {
    fn from(e: SetupError) -> Failure {
        match e {
            SetupError::BadFrame(e) => Failure::BadFrame(format!("{e:?}")),
            SetupError::NoMatchingRtr => Failure::NoMatchingRtr,
            SetupError::PrivateDataTooLong => Failure::PrivateDataTooLong,
            // `Rejected` is a result, not a failure; it is handled before conversion.
            SetupError::Rejected { .. } => Failure::BadFrame("unexpected reject".into()),
        }
    }
}

/// What the connection asks its driver to do or report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Send these bytes on the TCP connection.
    Transmit(Vec<u8>),
    /// A connection request for the application (responder): its private data and what
    /// the peer asked for.
    Request(Incoming),
    /// Setup is done. `leftover` are bytes that followed the MPA frame in the stream: the
    /// first FPDUs, which belong to the engine.
    Established {
        params: Negotiated,
        leftover: Vec<u8>,
    },
    /// The peer rejected the request; its private data says why (initiator).
    Rejected { private_data: Vec<u8> },
    /// Setup failed; close (abort) the TCP connection.
    Failed(Failure),
}

/// One connection being set up.
#[derive(Debug)]
pub struct Connection {
    role: Role,
    state: State,
    settings: Settings,
    buf: Vec<u8>,
    incoming: Option<Incoming>,
    deadline: Option<u64>,
    timeout_ms: u64,
    events: VecDeque<Event>,
}

impl Connection {
    /// An initiator whose TCP connect has been started at `now`.
    pub fn initiator(settings: Settings, now: u64, timeout_ms: u64) -> Connection {
        Connection::new(
            Role::Initiator,
            State::TcpConnecting,
            settings,
            now,
            timeout_ms,
        )
    }

    /// A responder for a TCP connection accepted at `now`.
    pub fn responder(settings: Settings, now: u64, timeout_ms: u64) -> Connection {
        Connection::new(
            Role::Responder,
            State::AwaitingRequest,
            settings,
            now,
            timeout_ms,
        )
    }

    fn new(role: Role, state: State, settings: Settings, now: u64, timeout_ms: u64) -> Self {
        Connection {
            role,
            state,
            settings,
            buf: Vec::new(),
            incoming: None,
            deadline: Some(now.saturating_add(timeout_ms)),
            timeout_ms,
            events: VecDeque::new(),
        }
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// When [`Connection::handle_timeout`] should be called next.
    pub fn next_timeout(&self) -> Option<u64> {
        self.deadline
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn fail(&mut self, f: Failure) {
        self.state = State::Failed;
        self.deadline = None;
        self.events.push_back(Event::Failed(f));
    }

    fn done(&self) -> bool {
        matches!(
            self.state,
            State::Established | State::Rejected | State::Failed
        )
    }

    /// The initiator's TCP connection is up: send the MPA Request.
    pub fn handle_tcp_established(&mut self, now: u64) {
        if self.state != State::TcpConnecting {
            return;
        }
        match negotiation::request(&self.settings) {
            Ok(req) => {
                self.events.push_back(Event::Transmit(req));
                self.state = State::AwaitingReply;
                self.deadline = Some(now.saturating_add(self.timeout_ms));
            }
            Err(e) => self.fail(e.into()),
        }
    }

    /// Bytes from the peer while setup runs.
    pub fn handle_bytes(&mut self, bytes: &[u8]) {
        if self.done() {
            // After Established the stream belongs to the engine (the driver hands it over on
            // `Established`); after a reject or failure nothing more is read.
            return;
        }
        self.buf.extend_from_slice(bytes);
        let n = match negotiation::frame_complete(&self.buf) {
            Ok(Some(n)) => n,
            Ok(None) => return,
            Err(e) => return self.fail(e.into()),
        };
        match self.state {
            State::AwaitingReply => {
                match negotiation::parse_reply(&self.buf[..n], &self.settings) {
                    Ok(params) => {
                        let leftover = self.buf.split_off(n);
                        self.state = State::Established;
                        self.deadline = None;
                        self.events
                            .push_back(Event::Established { params, leftover });
                    }
                    Err(SetupError::Rejected { private_data }) => {
                        self.state = State::Rejected;
                        self.deadline = None;
                        self.events.push_back(Event::Rejected { private_data });
                    }
                    Err(e) => self.fail(e.into()),
                }
            }
            State::AwaitingRequest => match negotiation::parse_request(&self.buf[..n]) {
                Ok(inc) => {
                    self.buf.drain(..n);
                    self.state = State::AwaitingDecision;
                    self.events.push_back(Event::Request(inc.clone()));
                    self.incoming = Some(inc);
                }
                Err(e) => self.fail(e.into()),
            },
            // The initiator sends nothing before the Reply in peer-to-peer mode or otherwise
            // (RFC 5044 section 7.1), so a responder waiting for the application buffers.
            _ => {}
        }
    }

    /// The application accepts the request with `settings` (its IRD/ORD, private data).
    pub fn accept(&mut self, settings: Settings) {
        let Some(inc) = self
            .incoming
            .take()
            .filter(|_| self.state == State::AwaitingDecision)
        else {
            self.events
                .push_back(Event::Failed(Failure::NotAwaitingDecision));
            return;
        };
        match negotiation::accept(&inc, &settings) {
            Ok((reply, params)) => {
                self.settings = settings;
                self.events.push_back(Event::Transmit(reply));
                self.state = State::Established;
                self.deadline = None;
                let leftover = std::mem::take(&mut self.buf);
                self.events
                    .push_back(Event::Established { params, leftover });
            }
            Err(SetupError::NoMatchingRtr) => {
                // Tell the peer why before failing: a reject carries no reason code in MPA,
                // so the private data is empty.
                if let Ok(rej) = negotiation::reject(&inc, &[]) {
                    self.events.push_back(Event::Transmit(rej));
                }
                self.fail(Failure::NoMatchingRtr);
            }
            Err(e) => self.fail(e.into()),
        }
    }

    /// The application rejects the request with `private_data` (RFC 5044 section 7.1.2).
    pub fn reject(&mut self, private_data: &[u8]) {
        let Some(inc) = self
            .incoming
            .take()
            .filter(|_| self.state == State::AwaitingDecision)
        else {
            self.events
                .push_back(Event::Failed(Failure::NotAwaitingDecision));
            return;
        };
        match negotiation::reject(&inc, private_data) {
            Ok(rej) => {
                self.events.push_back(Event::Transmit(rej));
                self.state = State::Rejected;
                self.deadline = None;
            }
            Err(e) => self.fail(e.into()),
        }
    }

    pub fn handle_tcp_closed(&mut self, reason: CloseReason) {
        if !self.done() {
            self.fail(Failure::TcpClosed(reason));
        }
    }

    pub fn handle_timeout(&mut self, now: u64) {
        if matches!(self.deadline, Some(d) if now >= d) && !self.done() {
            let state = self.state;
            self.fail(Failure::Timeout { state });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_wire::mpa::Rtr;

    const T: u64 = 5_000;

    fn drain(c: &mut Connection) -> Vec<Event> {
        std::iter::from_fn(|| c.poll_event()).collect()
    }

    fn transmitted(evs: &[Event]) -> Vec<u8> {
        evs.iter()
            .filter_map(|e| match e {
                Event::Transmit(b) => Some(b.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Runs a whole setup; the responder's app answers with `decide`. Bytes are fed one octet
    /// at a time to show any split of the stream works.
    fn setup(
        a: Settings,
        decide: impl FnOnce(&Incoming, &mut Connection),
    ) -> (Vec<Event>, Vec<Event>) {
        let mut i = Connection::initiator(a, 0, T);
        let mut r = Connection::responder(Settings::default(), 0, T);
        i.handle_tcp_established(1);
        let req = transmitted(&drain(&mut i));
        for b in &req {
            r.handle_bytes(std::slice::from_ref(b));
        }
        let evs = drain(&mut r);
        let Some(Event::Request(inc)) = evs.first() else {
            panic!("no request: {evs:?}")
        };
        decide(inc, &mut r);
        let r_evs = drain(&mut r);
        let reply = transmitted(&r_evs);
        for b in &reply {
            i.handle_bytes(std::slice::from_ref(b));
        }
        (drain(&mut i), r_evs)
    }

    fn established(evs: &[Event]) -> Negotiated {
        evs.iter()
            .find_map(|e| match e {
                Event::Established { params, .. } => Some(params.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("not established: {evs:?}"))
    }

    #[test]
    fn ird_ord_differ_per_side_and_each_ord_is_capped_by_the_peers_ird() {
        let a = Settings {
            ird: 4,
            ord: 8,
            private_data: b"hello".to_vec(),
            ..Settings::default()
        };
        let (i_evs, r_evs) = setup(a, |inc, r| {
            assert_eq!(inc.private_data, b"hello");
            r.accept(Settings {
                ird: 2,
                ord: 16,
                private_data: b"welcome".to_vec(),
                ..Settings::default()
            })
        });
        let i = established(&i_evs);
        let r = established(&r_evs);
        // RFC 6581 section 3: a side's ORD never exceeds the peer's IRD.
        assert_eq!((i.ird, i.ord), (4, 2));
        assert_eq!((r.ird, r.ord), (2, 4));
        assert_eq!(i.peer_private_data, b"welcome");
        assert_eq!((i.revision, r.revision), (2, 2));
        assert!(i.tx.crc && r.tx.crc);
    }

    #[test]
    fn a_reject_carries_its_private_data_to_the_initiator() {
        let (i_evs, r_evs) = setup(Settings::default(), |_, r| r.reject(b"go away"));
        assert_eq!(
            i_evs,
            vec![Event::Rejected {
                private_data: b"go away".to_vec()
            }]
        );
        assert!(!r_evs.iter().any(|e| matches!(e, Event::Established { .. })));
    }

    #[test]
    fn rdmap_v2_only_when_both_ask() {
        let both = Settings {
            rdmap_v2: true,
            ..Settings::default()
        };
        let (i_evs, r_evs) = setup(both.clone(), |_, r| r.accept(both.clone()));
        assert_eq!(established(&i_evs).rdmap_version, 2);
        assert_eq!(established(&r_evs).rdmap_version, 2);
        let (i_evs, r_evs) = setup(both, |_, r| r.accept(Settings::default()));
        assert_eq!(established(&i_evs).rdmap_version, 1);
        assert_eq!(established(&r_evs).rdmap_version, 1);
    }

    #[test]
    fn peer_to_peer_agrees_on_one_rtr_and_revision_1_has_no_ird_ord() {
        let p2p = Settings {
            peer_to_peer: Some(Rtr {
                read: true,
                ..Rtr::NONE
            }),
            ..Settings::default()
        };
        let (i_evs, r_evs) = setup(p2p, |_, r| r.accept(Settings::default()));
        let want = Some(Rtr {
            read: true,
            ..Rtr::NONE
        });
        assert_eq!(established(&i_evs).rtr, want);
        assert_eq!(established(&r_evs).rtr, want);

        let rev1 = Settings {
            revision: 1,
            ird: 3,
            ord: 3,
            ..Settings::default()
        };
        let (i_evs, _) = setup(rev1, |_, r| r.accept(Settings::default()));
        let n = established(&i_evs);
        assert_eq!((n.revision, n.rtr), (1, None));
    }

    #[test]
    fn no_common_rtr_fails_both_sides_with_the_reason() {
        let send_only = Settings {
            peer_to_peer: Some(Rtr {
                send: true,
                ..Rtr::NONE
            }),
            ..Settings::default()
        };
        let (i_evs, r_evs) = setup(send_only, |_, r| {
            r.accept(Settings {
                peer_to_peer: Some(Rtr {
                    write: true,
                    ..Rtr::NONE
                }),
                ..Settings::default()
            })
        });
        assert!(r_evs.contains(&Event::Failed(Failure::NoMatchingRtr)));
        assert!(matches!(i_evs.as_slice(), [Event::Rejected { .. }]));
    }

    #[test]
    fn bytes_after_the_reply_go_to_the_engine() {
        let mut i = Connection::initiator(Settings::default(), 0, T);
        let mut r = Connection::responder(Settings::default(), 0, T);
        i.handle_tcp_established(0);
        r.handle_bytes(&transmitted(&drain(&mut i)));
        drain(&mut r);
        r.accept(Settings::default());
        let mut stream = transmitted(&drain(&mut r));
        stream.extend_from_slice(&[1, 2, 3]);
        i.handle_bytes(&stream);
        match drain(&mut i).as_slice() {
            [Event::Established { leftover, .. }] => assert_eq!(leftover, &[1, 2, 3]),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn timeouts_and_closes_fail_with_a_reason() {
        let mut i = Connection::initiator(Settings::default(), 100, T);
        i.handle_tcp_established(200);
        drain(&mut i);
        assert_eq!(i.next_timeout(), Some(200 + T));
        i.handle_timeout(200 + T - 1);
        assert!(drain(&mut i).is_empty());
        i.handle_timeout(200 + T);
        assert_eq!(
            drain(&mut i),
            vec![Event::Failed(Failure::Timeout {
                state: State::AwaitingReply
            })]
        );
        let mut r = Connection::responder(Settings::default(), 0, T);
        r.handle_tcp_closed(CloseReason::Graceful);
        assert_eq!(
            drain(&mut r),
            vec![Event::Failed(Failure::TcpClosed(CloseReason::Graceful))]
        );
        r.handle_tcp_closed(CloseReason::Reset);
        assert!(drain(&mut r).is_empty(), "reported once");
    }

    #[test]
    fn garbage_instead_of_a_request_fails_without_panicking() {
        let mut r = Connection::responder(Settings::default(), 0, T);
        r.handle_bytes(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n");
        assert!(matches!(
            drain(&mut r).as_slice(),
            [Event::Failed(Failure::BadFrame(_))]
        ));
        let mut r = Connection::responder(Settings::default(), 0, T);
        r.accept(Settings::default());
        assert_eq!(
            drain(&mut r),
            vec![Event::Failed(Failure::NotAwaitingDecision)]
        );
    }
}
