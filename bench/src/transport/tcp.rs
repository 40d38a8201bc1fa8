//! Baseline: kernel TCP sockets on loopback, TCP_NODELAY on both ends — what users would pick
//! instead of RDMA.
//!
//! - Ping-pong: the client writes `size` octets, the responder thread reads them all and writes
//!   `size` octets back, the client reads them all.
//! - Stream: the client writes messages back to back on a non-blocking socket; a receiver
//!   thread reads everything and publishes how many whole messages have arrived.
//!
//! A byte stream cannot carry a zero-length message, so size 0 is sent as a one-octet token.

use super::{pin, Backoff, PingPong, Setup, Stream, Transport};
use crate::error::{BenchError, Result};
use crate::stages::StageTimes;
use crate::workload::{Exchange, TransportKind};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Kernel TCP over 127.0.0.1.
#[derive(Debug, Default)]
pub struct TcpTransport;

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::transport("tcp", e)
}

/// The octets a message of `size` occupies on the stream.
fn wire_len(size: usize) -> usize {
    size.max(1)
}

/// A connected pair on loopback: (client, server), both with TCP_NODELAY.
fn connected_pair() -> Result<(TcpStream, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(err)?;
    let addr = l.local_addr().map_err(err)?;
    let c = TcpStream::connect(addr).map_err(err)?;
    let (s, _) = l.accept().map_err(err)?;
    for sock in [&c, &s] {
        sock.set_nodelay(true).map_err(err)?;
    }
    Ok((c, s))
}

fn join(h: JoinHandle<Result<()>>) -> Result<()> {
    h.join().map_err(|_| err("the responder thread panicked"))?
}

impl Transport for TcpTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn supports(&self, exchange: Exchange) -> bool {
        exchange == Exchange::Message
    }

    fn ping_pong(&self, setup: &Setup) -> Result<Box<dyn PingPong>> {
        let len = wire_len(setup.size);
        let (client, mut server) = connected_pair()?;
        let core = setup.responder_core;
        let responder = std::thread::Builder::new()
            .name("tcp-responder".into())
            .spawn(move || -> Result<()> {
                pin(core);
                let mut buf = vec![0u8; len];
                loop {
                    match server.read_exact(&mut buf) {
                        Ok(()) => {}
                        // The client closed: the normal end.
                        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
                        Err(e) => return Err(err(format!("responder read: {e}"))),
                    }
                    server
                        .write_all(&buf)
                        .map_err(|e| err(format!("responder write: {e}")))?;
                }
            })
            .map_err(|e| BenchError::io("spawning the TCP responder", e))?;
        Ok(Box::new(TcpPingPong {
            sock: client,
            buf: vec![0x5a; len],
            responder: Some(responder),
            stages: setup.stages,
            times: StageTimes::default(),
        }))
    }

    fn stream(&self, setup: &Setup) -> Result<Box<dyn Stream>> {
        let len = wire_len(setup.size);
        let (client, mut server) = connected_pair()?;
        client.set_nonblocking(true).map_err(err)?;
        let delivered = Arc::new(AtomicU64::new(0));
        let d = delivered.clone();
        let core = setup.responder_core;
        let receiver = std::thread::Builder::new()
            .name("tcp-receiver".into())
            .spawn(move || -> Result<()> {
                pin(core);
                let mut buf = vec![0u8; (1 << 20).max(len)];
                let mut bytes: u64 = 0;
                loop {
                    match server.read(&mut buf) {
                        Ok(0) => return Ok(()),
                        Ok(n) => {
                            bytes += n as u64;
                            // SYNC POINT: Release pairs with the Acquire in poll_delivered.
                            d.store(bytes / len as u64, Ordering::Release);
                        }
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(err(format!("receiver read: {e}"))),
                    }
                }
            })
            .map_err(|e| BenchError::io("spawning the TCP receiver", e))?;
        Ok(Box::new(TcpStreamTx {
            sock: client,
            msg: vec![0x5a; len],
            pending: 0,
            delivered,
            reported: 0,
            receiver: Some(receiver),
        }))
    }
}

struct TcpPingPong {
    sock: TcpStream,
    buf: Vec<u8>,
    responder: Option<JoinHandle<Result<()>>>,
    stages: bool,
    times: StageTimes,
}

impl PingPong for TcpPingPong {
    fn round_trip(&mut self) -> Result<()> {
        if self.stages {
            let t0 = Instant::now();
            self.sock.write_all(&self.buf).map_err(err)?;
            let t1 = Instant::now();
            self.sock.read_exact(&mut self.buf).map_err(err)?;
            let t2 = Instant::now();
            self.times
                .add((t1 - t0).as_nanos() as u64, (t2 - t1).as_nanos() as u64);
        } else {
            self.sock.write_all(&self.buf).map_err(err)?;
            self.sock.read_exact(&mut self.buf).map_err(err)?;
        }
        Ok(())
    }

    fn stages(&self) -> StageTimes {
        self.times
    }

    fn reset_stages(&mut self) {
        self.times = StageTimes::default();
    }

    fn teardown(mut self: Box<Self>) -> Result<()> {
        // Ends the responder's read loop with EOF.
        let _ = self.sock.shutdown(Shutdown::Both);
        match self.responder.take() {
            Some(h) => join(h),
            None => Ok(()),
        }
    }
}

impl Drop for TcpPingPong {
    fn drop(&mut self) {
        let _ = self.sock.shutdown(Shutdown::Both);
        if let Some(h) = self.responder.take() {
            let _ = h.join();
        }
    }
}

struct TcpStreamTx {
    sock: TcpStream,
    msg: Vec<u8>,
    /// Octets of the message being written that the socket has not taken yet.
    pending: usize,
    delivered: Arc<AtomicU64>,
    reported: u64,
    receiver: Option<JoinHandle<Result<()>>>,
}

impl TcpStreamTx {
    /// Writes what is left of the current message; true when nothing is left.
    fn flush(&mut self) -> Result<bool> {
        while self.pending > 0 {
            let off = self.msg.len() - self.pending;
            match self.sock.write(&self.msg[off..]) {
                Ok(n) => self.pending -= n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(err(e)),
            }
        }
        Ok(true)
    }
}

impl Stream for TcpStreamTx {
    fn post(&mut self, _seq: u64) -> Result<bool> {
        if !self.flush()? {
            return Ok(false);
        }
        match self.sock.write(&self.msg) {
            Ok(n) => {
                // A partial write still posts the message; the rest goes out on the next
                // post or poll, before anything else.
                self.pending = self.msg.len() - n;
                Ok(true)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(false)
            }
            Err(e) => Err(err(e)),
        }
    }

    fn poll_delivered(&mut self, delivered: &mut dyn FnMut(u64)) -> Result<usize> {
        self.flush()?;
        // SYNC POINT: Acquire pairs with the receiver thread's Release store.
        let now = self.delivered.load(Ordering::Acquire);
        let n = now.saturating_sub(self.reported);
        for seq in self.reported..now {
            delivered(seq);
        }
        self.reported = now;
        if n == 0 {
            if let Some(h) = &self.receiver {
                if h.is_finished() {
                    return Err(err("the receiver stopped early"));
                }
            }
        }
        Ok(n as usize)
    }

    fn teardown(mut self: Box<Self>) -> Result<()> {
        // Finish the last partial message so the receiver sees whole messages, then EOF.
        let mut b = Backoff::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while !self.flush()? {
            if Instant::now() > deadline {
                break;
            }
            b.snooze();
        }
        let _ = self.sock.shutdown(Shutdown::Write);
        match self.receiver.take() {
            Some(h) => join(h),
            None => Ok(()),
        }
    }
}

impl Drop for TcpStreamTx {
    fn drop(&mut self) {
        let _ = self.sock.shutdown(Shutdown::Both);
        if let Some(h) = self.receiver.take() {
            let _ = h.join();
        }
    }
}
