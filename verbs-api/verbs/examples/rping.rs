//! rping on this stack: the ping-pong of rdma-core's `rping`, wire-compatible with it, so a
//! Linux soft-iWARP (`siw`) or a hardware RNIC running rdma-core's `rping` can be the other
//! end. It is how the interop tests put a real siw peer against this stack, and how an
//! operator checks a new peer.
//!
//! ```text
//! rping -s [-p PORT] [-C COUNT] [-v] --runtime-dir DIR                  (server)
//! rping -c -a ADDR [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] --runtime-dir DIR  (client)
//! ```
//!
//! The connection asks for MPA CRCs (siw turns them on when asked); `--no-crc` does not.
//! `--rtr write|read` (client) asks for RFC 6581 peer-to-peer mode with that ready-to-receive
//! message, which the client's side then sends before anything else.
//!
//! One ping, as rping does it: the client Sends the STag, address and length of its source
//! buffer (16 octets: 64-bit address, 32-bit STag, 32-bit length, big-endian); the server
//! RDMA Reads the source and Sends an empty "go ahead"; the client Sends its sink buffer;
//! the server RDMA Writes what it read (up to its terminating zero) into the sink and Sends
//! "go ahead" again. With `-V` the client compares sink and source. The server serves one
//! connection until the client disconnects and exits 0; with `-C` it exits 0 only if the
//! client stopped after exactly that many pings. A refused connect ends the client with an
//! error, as rdma-core's rping does; `--retry SECS` (ours, not rping's) keeps trying while
//! the server may still be starting. The client closes first, as with rdma-core's rping
//! server: a server closing first races siw's rping client, whose QP can take the FIN before
//! the client reposts its receive, and the client then waits for a flush that never comes.
//! Addresses are tagged offsets of this stack's zero-based regions; the peer takes them as
//! opaque.

use iwarp_verbs::Stag;
use iwarp_verbs::{
    access, ConnSettings, Context, Event, MemoryRegion, QpInitAttr, QueuePair, RecvWr, Rtr, SendWr,
    Sg, SharedBuffer, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The largest ping rping allows (its RPING_BUFSIZE, 64 KiB, less one).
const MAX_SIZE: usize = 64 * 1024 - 1;
/// The smallest: room for "rdma-ping-<INT_MAX>: " and the zero.
const MIN_SIZE: usize = 26;
/// The advertisement each side Sends: address, STag, length.
const INFO: usize = 16;
/// Layout of the one registered buffer.
const RECV_AT: usize = 0;
const SEND_AT: usize = 64;
const SOURCE_AT: usize = 4096;
const SINK_AT: usize = SOURCE_AT + 64 * 1024;
const BUF: usize = SINK_AT + 64 * 1024;
/// A software peer in an emulated VM answers slowly; nothing waits forever either.
const TIMEOUT: Duration = Duration::from_secs(60);

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// rdma-core's rping protocol on this stack (rping's own option letters).
#[derive(clap::Parser)]
#[command(name = "rping")]
struct Options {
    /// Server: serve one connection.
    #[arg(
        short = 's',
        required_unless_present = "client",
        conflicts_with = "client"
    )]
    server: bool,
    /// Client: connect to the server at -a.
    #[arg(short = 'c', requires = "addr")]
    client: bool,
    /// The server's address (client).
    #[arg(short = 'a')]
    addr: Option<IpAddr>,
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Pings: the client sends this many; the server checks the client stopped there.
    #[arg(short = 'C')]
    count: Option<u64>,
    /// Octets per ping.
    #[arg(short = 'S', default_value_t = 64)]
    size: usize,
    /// Print every ping's data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Client: compare what the server wrote back with what it read.
    #[arg(short = 'V')]
    validate: bool,
    /// Ask for no MPA CRC.
    #[arg(long = "no-crc", action = clap::ArgAction::SetFalse)]
    crc: bool,
    /// Client: RFC 6581 peer-to-peer mode with this ready-to-receive message.
    #[arg(long, value_enum)]
    rtr: Option<RtrKind>,
    /// Client: retry a refused or failed connect for this many seconds, once a second (not
    /// an option of rdma-core's rping, which gives up at once, as this does without it).
    #[arg(long, default_value_t = 0)]
    retry: u64,
    /// The endpoint (its daemon's runtime directory).
    #[arg(long = "runtime-dir", env = "IWARP_RUNTIME_DIR")]
    dir: PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum RtrKind {
    Write,
    Read,
}

/// What a peer advertises in its 16 octets.
#[derive(Debug, Clone, Copy)]
struct Info {
    addr: u64,
    stag: u32,
    len: u32,
}

impl Info {
    /// What rping's server Sends to let the client go on: its advertisement buffer, never
    /// filled, all zeros.
    const GO_AHEAD: Info = Info {
        addr: 0,
        stag: 0,
        len: 0,
    };

    fn encode(&self) -> [u8; INFO] {
        let mut b = [0; INFO];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.stag.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    fn decode(b: &[u8]) -> Result<Info> {
        if b.len() != INFO {
            return Err(format!("received {} octets, an rping message has {INFO}", b.len()).into());
        }
        Ok(Info {
            addr: u64::from_be_bytes(b[..8].try_into()?),
            stag: u32::from_be_bytes(b[8..12].try_into()?),
            len: u32::from_be_bytes(b[12..].try_into()?),
        })
    }
}

struct Side {
    ctx: Context,
    qp: QueuePair,
    buf: SharedBuffer,
    mr: MemoryRegion,
    next_wr: u64,
}

impl Side {
    fn open(dir: &std::path::Path) -> Result<Side> {
        let ctx = Context::open(dir)?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(64)?;
        // rping's queues: 16 sends, 2 receives, IRD and ORD 1.
        let mut attr = QpInitAttr::new(&cq, 16);
        attr.rq_depth = 2;
        attr.ird = 1;
        attr.ord = 1;
        let qp = pd.create_qp(&attr)?;
        let buf = ctx.alloc_buffer(BUF)?;
        let rights = access::LOCAL_WRITE | access::REMOTE_READ | access::REMOTE_WRITE;
        let mr = pd.reg_mr(&buf, 0, BUF as u64, rights)?;
        let s = Side {
            ctx,
            qp,
            buf,
            mr,
            next_wr: 1,
        };
        s.post_recv()?;
        Ok(s)
    }

    /// What siw speaks: MPA v2 with IRD/ORD (rping's 1 and 1), CRC if either side asks,
    /// RDMAP v1 (no atomics, no Immediate Data), no markers.
    fn settings(o: &Options) -> ConnSettings {
        ConnSettings {
            crc: o.crc,
            peer_to_peer: o.rtr.map(|kind| match kind {
                RtrKind::Write => Rtr {
                    write: true,
                    ..Rtr::NONE
                },
                RtrKind::Read => Rtr {
                    read: true,
                    ..Rtr::NONE
                },
            }),
            ird: 1,
            ord: 1,
            ..ConnSettings::default()
        }
    }

    fn post_recv(&self) -> Result<()> {
        let sg = [Sg {
            mr: &self.mr,
            offset: RECV_AT as u64,
            len: INFO as u32,
        }];
        self.qp.post_recv(&RecvWr {
            wr_id: 0,
            sg_list: &sg,
        })?;
        Ok(())
    }

    /// Posts one send work request and waits for its completion.
    fn run(&mut self, op: WrOpcode, offset: usize, len: usize) -> Result<()> {
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let sg = [Sg {
            mr: &self.mr,
            offset: offset as u64,
            len: len as u32,
        }];
        self.qp.post_send(&SendWr::new(wr_id, op, &sg))?;
        let wc = self.next_completion()?;
        if wc.wr_id != wr_id || wc.is_recv() || wc.status != WcStatus::Success {
            return Err(format!("{op:?}: completed as {wc:?}").into());
        }
        Ok(())
    }

    /// Sends an advertisement (or the server's [`Info::GO_AHEAD`]).
    fn send_info(&mut self, info: Info) -> Result<()> {
        self.buf.write(SEND_AT, &info.encode())?;
        self.run(WrOpcode::Send, SEND_AT, INFO)
    }

    /// The next received message, its receive reposted; None once the peer disconnected
    /// (the posted receive comes back flushed).
    fn receive(&mut self) -> Result<Option<Info>> {
        let wc = self.next_completion()?;
        if !wc.is_recv() {
            return Err(format!("a receive was due, got {wc:?}").into());
        }
        if wc.status == WcStatus::WrFlushed {
            return Ok(None);
        }
        if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
            return Err(format!("receive completed as {wc:?}").into());
        }
        let info = Info::decode(&self.buf.to_vec(RECV_AT, wc.byte_len as usize)?)?;
        self.post_recv()?;
        Ok(Some(info))
    }

    fn next_completion(&self) -> Result<WorkCompletion> {
        let t = Instant::now();
        loop {
            if let Some(wc) = self.qp.send_cq().poll_one()? {
                return Ok(wc);
            }
            // A peer that went away without our QP noticing yet: say so rather than wait.
            if let Some(Event::Disconnected { reason, .. }) = self.ctx.poll_event()? {
                if let Some(wc) = self.qp.send_cq().poll_one()? {
                    return Ok(wc);
                }
                return Err(format!("disconnected: {reason}").into());
            }
            if t.elapsed() > TIMEOUT {
                return Err("no completion in 60 s".into());
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// The zero-terminated text at `at`, for printing.
    fn text(&self, at: usize, len: usize) -> Result<String> {
        let bytes = self.buf.to_vec(at, len)?;
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(len);
        Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }
}

fn server(o: &Options) -> Result<u64> {
    let mut s = Side::open(&o.dir)?;
    s.ctx.listen(o.port, &Side::settings(o))?;
    let req = s.ctx.get_request(TIMEOUT)?;
    let est = s
        .ctx
        .accept_blocking(&req, &s.qp, &Side::settings(o), TIMEOUT)?;
    println!(
        "rping server: connection from {} (IRD {}, ORD {}, RDMAP v{})",
        req.peer, est.ird, est.ord, est.rdmap_version
    );
    let mut pings = 0;
    while o.count.is_none_or(|c| pings < c) {
        let Some(source) = s.receive()? else { break };
        let len = source.len as usize;
        if len == 0 || len > BUF - SINK_AT {
            return Err(format!("the client's source is {len} octets (1 to 64 KiB)").into());
        }
        let read = WrOpcode::RdmaRead {
            rkey: Stag(source.stag),
            remote_addr: source.addr,
        };
        s.run(read, SINK_AT, len)?;
        if o.verbose {
            println!("server ping data: {}", s.text(SINK_AT, len)?);
        }
        s.send_info(Info::GO_AHEAD)?;
        let Some(sink) = s.receive()? else { break };
        // What rping writes back: the text read, with its terminating zero.
        let echo = s.text(SINK_AT, len)?.len() + 1;
        let echo = echo.min(len).min(sink.len as usize);
        let write = WrOpcode::RdmaWrite {
            rkey: Stag(sink.stag),
            remote_addr: sink.addr,
        };
        s.run(write, SINK_AT, echo)?;
        s.send_info(Info::GO_AHEAD)?;
        pings += 1;
    }
    if let Some(c) = o.count.filter(|&c| pings < c) {
        let _ = s.ctx.disconnect(req.conn, false);
        return Err(format!("the client disconnected after {pings} of {c} pings").into());
    }
    if o.count.is_some_and(|c| pings == c) {
        // The client disconnects after its last ping: our posted receive comes back flushed
        // (or the event comes first).
        match s.receive() {
            Ok(None) => {}
            Ok(Some(_)) => return Err(format!("the client pinged again after {pings}").into()),
            Err(e) if e.to_string().starts_with("disconnected") => {}
            Err(e) => return Err(e),
        }
    }
    let _ = s.ctx.disconnect(req.conn, false);
    Ok(pings)
}

/// rping's ping text: "rdma-ping-N: " then letters from a start that moves each ping,
/// zero-terminated.
fn ping_text(ping: u64, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    let mut c = 65 + (ping % 58) as u8;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    b.truncate(size);
    b[size - 1] = 0;
    b
}

fn client(o: &Options, addr: IpAddr) -> Result<u64> {
    let mut s = Side::open(&o.dir)?;
    let remote = SocketAddr::new(addr, o.port);
    let t = Instant::now();
    let patience = Duration::from_secs(o.retry);
    let est = loop {
        match s
            .ctx
            .connect_blocking(&s.qp, remote, &Side::settings(o), TIMEOUT)
        {
            Ok(e) => break e,
            Err(iwarp_verbs::Error::ConnectionFailed { .. }) if t.elapsed() < patience => {
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e.into()),
        }
    };
    println!(
        "rping client: connected to {remote} (IRD {}, ORD {}, RDMAP v{})",
        est.ird, est.ord, est.rdmap_version
    );
    let count = o.count.unwrap_or(u64::MAX);
    let mut pings = 0;
    while pings < count {
        let text = ping_text(pings, o.size);
        s.buf.write(SOURCE_AT, &text)?;
        s.buf.write(SINK_AT, &vec![0; o.size])?;
        let stag = s.mr.stag();
        let len = o.size as u32;
        s.send_info(Info {
            addr: SOURCE_AT as u64,
            stag: stag.into(),
            len,
        })?;
        s.receive()?.ok_or("the server disconnected")?;
        s.send_info(Info {
            addr: SINK_AT as u64,
            stag: stag.into(),
            len,
        })?;
        s.receive()?.ok_or("the server disconnected")?;
        if o.validate && s.buf.to_vec(SINK_AT, o.size)? != text {
            return Err(format!("ping {pings}: data mismatch").into());
        }
        if o.verbose {
            println!("ping data: {}", s.text(SINK_AT, o.size)?);
        }
        pings += 1;
    }
    s.ctx.disconnect(est.conn, false)?;
    Ok(pings)
}

fn main() -> ExitCode {
    let o = <Options as clap::Parser>::parse();
    if !(MIN_SIZE..=MAX_SIZE).contains(&o.size) {
        eprintln!("rping: -S {}: the size is {MIN_SIZE} to {MAX_SIZE}", o.size);
        return ExitCode::from(2);
    }
    let (role, r) = match o.addr {
        Some(addr) if !o.server => ("client", client(&o, addr)),
        _ => ("server", server(&o)),
    };
    match r {
        Ok(pings) => {
            println!("rping {role}: {pings} pings");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rping {role}: {e}");
            ExitCode::FAILURE
        }
    }
}
