//! Baseline: kernel TCP sockets on loopback, TCP_NODELAY on both ends — what users would pick
//! instead of RDMA.
//!
//! - Ping-pong: the client writes `size` octets, the responder thread reads them all and writes
//!   `size` octets back, the client reads them all.
//! - Stream: the client writes messages back to back on a non-blocking socket; a receiver
//!   thread reads everything and publishes how many whole messages have arrived.
//!
//! A byte stream cannot carry a zero-length message, so size 0 is sent as a one-octet token.
//!
//! `tcp-proc` moves the receiving side into another process (`iwarp-bench --tcp-peer`): one
//! poll loop (mio) accepts and reads every connection, echoes a ping-pong's, and publishes each
//! stream's received octets in a shared region file. The connection's first 8 octets name
//! its slot there and whether it echoes. A sweep to 10,000 connections then needs 10,000
//! descriptors in each process, within a hard limit that one process holding both ends
//! would pass.

use super::shm::{region_file, start_peer, Region};
use super::{pin, Backoff, PingPong, Setup, Stream, Transport};
use crate::error::{BenchError, Result};
use crate::stages::StageTimes;
use crate::workload::{Exchange, TransportKind};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Kernel TCP over 127.0.0.1: the receiving side on threads of this process
/// ([`TcpTransport::threads`]) or in a process of its own ([`TcpTransport::process`]).
#[derive(Default)]
pub struct TcpTransport {
    /// The executable started as the receiving process; `None`: threads.
    exe: Option<PathBuf>,
    /// That process, once the first connection needs it.
    peer: Mutex<Option<Arc<ProcPeer>>>,
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::transport("tcp", e)
}

// The region's words: the magic, the listener's port once ready, stop.
const MAGIC: usize = 0;
const PORT: usize = 8;
const STOP: usize = 16;
/// Slot `i`'s received octets are the word at `SLOT0 + 8 i`.
const SLOT0: usize = 4096;
const SLOTS: usize = 1 << 16;
const MAGIC_VALUE: u64 = 0x6977_6172_7074_6370; // "iwarptcp"
/// The hello's mode word: count what arrives, or echo it.
const COUNT: u32 = 0;
const ECHO: u32 = 1;

/// The receiving process of `tcp-proc` and the region it publishes in.
struct ProcPeer {
    region: Region,
    port: u16,
    next_slot: AtomicU64,
    child: Mutex<Child>,
}

impl ProcPeer {
    fn start(exe: &Path) -> Result<ProcPeer> {
        let path = region_file()?;
        let region = Region::create_file(&path, SLOT0 + 8 * SLOTS)
            .map_err(|e| err(format!("creating {}: {e}", path.display())))?;
        // SYNC POINT: Release publishes the zeroed region to the peer's Acquire of MAGIC.
        region.word(MAGIC).store(MAGIC_VALUE, Ordering::Release);
        // The peer stores its listener's port once it listens.
        let mut cmd = Command::new(exe);
        cmd.arg("--tcp-peer").arg(&path);
        let (child, port) = start_peer(&mut cmd, &path, &region, PORT).map_err(err)?;
        Ok(ProcPeer {
            region,
            port: port as u16,
            next_slot: AtomicU64::new(0),
            child: Mutex::new(child),
        })
    }

    /// A connection to the receiving process on a slot of its own, `mode` said.
    fn connect(&self, mode: u32) -> Result<(TcpStream, usize)> {
        let slot = self.next_slot.fetch_add(1, Ordering::Relaxed) as usize;
        if slot >= SLOTS {
            return Err(err(format!("more than {SLOTS} connections in one run")));
        }
        let mut c = TcpStream::connect(("127.0.0.1", self.port)).map_err(err)?;
        c.set_nodelay(true).map_err(err)?;
        let mut hello = [0u8; 8];
        hello[..4].copy_from_slice(&(slot as u32).to_le_bytes());
        hello[4..].copy_from_slice(&mode.to_le_bytes());
        c.write_all(&hello).map_err(err)?;
        Ok((c, slot))
    }

    /// Octets the receiving process has read on `slot`.
    fn received(&self, slot: usize) -> u64 {
        // SYNC POINT: Acquire pairs with the peer's Release store of the count.
        self.region.word(SLOT0 + 8 * slot).load(Ordering::Acquire)
    }

    /// Whether the receiving process ended, and how.
    fn gone(&self) -> Option<String> {
        let mut c = self.child.lock().unwrap_or_else(|p| p.into_inner());
        match c.try_wait() {
            Ok(None) => None,
            Ok(Some(st)) => Some(format!("the receiving process exited: {st}")),
            Err(e) => Some(format!("the receiving process: {e}")),
        }
    }
}

impl Drop for ProcPeer {
    fn drop(&mut self) {
        // SYNC POINT: Release; the peer polls STOP with Acquire between its waits.
        self.region.word(STOP).store(1, Ordering::Release);
        let mut c = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(c.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = c.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = c.wait();
    }
}

impl TcpTransport {
    /// Receiving threads in this process, one per connection.
    pub fn threads() -> TcpTransport {
        TcpTransport::default()
    }

    /// Every connection received by one epoll loop in `exe --tcp-peer`.
    pub fn process(exe: PathBuf) -> TcpTransport {
        TcpTransport {
            exe: Some(exe),
            peer: Mutex::new(None),
        }
    }

    /// The receiving process, started on first use.
    fn peer(&self, exe: &Path) -> Result<Arc<ProcPeer>> {
        let mut p = self.peer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(peer) = p.as_ref() {
            return Ok(peer.clone());
        }
        let peer = Arc::new(ProcPeer::start(exe)?);
        *p = Some(peer.clone());
        Ok(peer)
    }
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
        match self.exe {
            Some(_) => TransportKind::TcpProc,
            None => TransportKind::Tcp,
        }
    }

    fn supports(&self, exchange: Exchange) -> bool {
        exchange == Exchange::Message
    }

    fn ping_pong(&self, setup: &Setup) -> Result<Box<dyn PingPong>> {
        let len = wire_len(setup.size);
        if let Some(exe) = &self.exe {
            let peer = self.peer(exe)?;
            let (sock, _) = peer.connect(ECHO)?;
            return Ok(Box::new(TcpPingPong {
                sock,
                buf: vec![0x5a; len],
                responder: None,
                stages: setup.stages,
                times: StageTimes::default(),
            }));
        }
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
        if let Some(exe) = &self.exe {
            let peer = self.peer(exe)?;
            let (sock, slot) = peer.connect(COUNT)?;
            sock.set_nonblocking(true).map_err(err)?;
            return Ok(Box::new(TcpStreamTx {
                sock,
                msg: vec![0x5a; len],
                pending: 0,
                delivered: Delivered::Process { peer, slot },
                reported: 0,
                receiver: None,
            }));
        }
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
            delivered: Delivered::Thread(delivered),
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

/// Where a stream's receiver says how much arrived.
enum Delivered {
    /// Whole messages, from the receiving thread.
    Thread(Arc<AtomicU64>),
    /// Octets, from the receiving process's slot.
    Process { peer: Arc<ProcPeer>, slot: usize },
}

struct TcpStreamTx {
    sock: TcpStream,
    msg: Vec<u8>,
    /// Octets of the message being written that the socket has not taken yet.
    pending: usize,
    delivered: Delivered,
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
        let now = match &self.delivered {
            // SYNC POINT: Acquire pairs with the receiver thread's Release store.
            Delivered::Thread(d) => d.load(Ordering::Acquire),
            Delivered::Process { peer, slot } => peer.received(*slot) / self.msg.len() as u64,
        };
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
        if let Delivered::Process { peer, .. } = &self.delivered {
            // The receiving process runs until the transport stops it: gone now, it failed.
            if let Some(m) = peer.gone() {
                return Err(err(m));
            }
        }
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

/// The receiving process of `tcp-proc` (`iwarp-bench --tcp-peer <region file>`): listens on
/// 127.0.0.1, publishes its port in the region, and reads every connection from one poll
/// loop (echoing those that ask) until the region says stop.
pub fn serve_file(path: &Path) -> Result<()> {
    use mio::{Events, Interest, Poll, Token};
    let region = Region::open_file(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
    // SYNC POINT: Acquire pairs with the creator's Release store of MAGIC.
    if region.word(MAGIC).load(Ordering::Acquire) != MAGIC_VALUE {
        return Err(err(format!("{} is not a tcp-proc region", path.display())));
    }
    let mut listener = mio::net::TcpListener::bind(([127, 0, 0, 1], 0).into()).map_err(err)?;
    let port = listener.local_addr().map_err(err)?.port();
    let mut poll = Poll::new().map_err(err)?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .map_err(err)?;
    // SYNC POINT: Release pairs with the creator's Acquire load of the port.
    region.word(PORT).store(u64::from(port), Ordering::Release);
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut events = Events::with_capacity(256);
    // SYNC POINT: Acquire pairs with the creator's Release store of STOP.
    while region.word(STOP).load(Ordering::Acquire) == 0 {
        match poll.poll(&mut events, Some(Duration::from_millis(10))) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => r.map_err(err)?,
        }
        for e in &events {
            if e.token() == LISTENER {
                // Readiness comes once per change: take every connection waiting.
                while let Ok((mut sock, _)) = listener.accept() {
                    sock.set_nodelay(true).map_err(err)?;
                    let i = free.pop().unwrap_or(conns.len());
                    poll.registry()
                        .register(&mut sock, Token(i), Interest::READABLE)
                        .map_err(err)?;
                    let c = Conn {
                        sock,
                        hello: [0; 8],
                        have: 0,
                        slot: 0,
                        echo: false,
                        bytes: 0,
                    };
                    match conns.get_mut(i) {
                        Some(slot) => *slot = Some(c),
                        None => conns.push(Some(c)),
                    }
                }
                continue;
            }
            let i = e.token().0;
            let Some(c) = conns.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            if c.serve(&mut buf, &region).map_err(err)? {
                let _ = poll.registry().deregister(&mut c.sock);
                conns[i] = None;
                free.push(i);
            }
        }
    }
    Ok(())
}

/// The poll token of the listener; a connection's is its index.
const LISTENER: mio::Token = mio::Token(usize::MAX);

/// A connection the receiving process reads.
struct Conn {
    sock: mio::net::TcpStream,
    /// The first 8 octets: the slot, then the mode.
    hello: [u8; 8],
    have: usize,
    slot: usize,
    echo: bool,
    bytes: u64,
}

impl Conn {
    /// Reads all the connection has (readiness is reported once per change), publishing
    /// the count or echoing it; true once its peer closed.
    fn serve(&mut self, buf: &mut [u8], region: &Region) -> std::io::Result<bool> {
        loop {
            let n = match self.sock.read(buf) {
                Ok(0) => return Ok(true),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(true),
                Err(e) => return Err(e),
            };
            let mut data = &buf[..n];
            if self.have < self.hello.len() {
                let k = (self.hello.len() - self.have).min(data.len());
                self.hello[self.have..self.have + k].copy_from_slice(&data[..k]);
                self.have += k;
                data = &data[k..];
                if self.have == self.hello.len() {
                    let [a, b, c, d, e, f, g, h] = self.hello;
                    self.slot = u32::from_le_bytes([a, b, c, d]) as usize;
                    self.echo = u32::from_le_bytes([e, f, g, h]) == ECHO;
                    if self.slot >= SLOTS {
                        return Err(std::io::Error::new(
                            ErrorKind::InvalidData,
                            format!("slot {} past {SLOTS}", self.slot),
                        ));
                    }
                }
            }
            if data.is_empty() {
                continue;
            }
            if self.echo {
                write_all_nonblocking(&mut self.sock, data)?;
            } else {
                self.bytes += data.len() as u64;
                // SYNC POINT: Release pairs with `ProcPeer::received`'s Acquire load.
                region
                    .word(SLOT0 + 8 * self.slot)
                    .store(self.bytes, Ordering::Release);
            }
        }
    }
}

/// Writes all of `data` to a non-blocking socket, waiting out a full send buffer (a
/// ping-pong's answer is small, and its client reads it at once).
fn write_all_nonblocking(sock: &mut impl Write, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        match sock.write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                std::thread::yield_now()
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
