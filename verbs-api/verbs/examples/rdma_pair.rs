//! Two applications, one per endpoint, that run every RDMA operation between them and check
//! every byte: Send, Send with Immediate, RDMA Write, Write with Immediate, RDMA Read,
//! FetchAdd and CmpSwap (RFC 5040, RFC 7306, RDMAP version 2 for Send with Immediate).
//!
//! ```text
//! rdma_pair server --runtime-dir DIR [--port 7000]
//! rdma_pair client --runtime-dir DIR --connect 10.77.0.2:7000
//! ```
//!
//! Each side registers a 1 MiB buffer and hands its STag to the other in the MPA private
//! data of the connection (as rdma_cm applications do). The client drives; it tells the
//! server with small Sends what it wrote where, and the server checks its memory and answers.

use iwarp_verbs::{
    access, ConnSettings, Context, MemoryRegion, QpInitAttr, QueuePair, RecvWr, SendWr, Sg,
    SharedBuffer, Stag, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const BUF: usize = 1 << 20;
/// Where each side receives Sends (16 slots of 4 KiB) and what they are used for.
const RECV_AT: usize = 0;
const SLOT: usize = 4096;
const SLOTS: usize = 16;
const SEND_AT: usize = 64 << 10;
const WRITE_AT: usize = 128 << 10;
const WRITE_IMM_AT: usize = 256 << 10;
const READ_AT: usize = 384 << 10;
const ATOMIC_AT: usize = 512 << 10;
const SCRATCH: usize = 640 << 10;
const TIMEOUT: Duration = Duration::from_secs(20);

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
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
        let cq = ctx.create_cq(256)?;
        let qp = pd.create_qp(&QpInitAttr::new(&cq, 64))?;
        let buf = ctx.alloc_buffer(BUF)?;
        let rights = access::LOCAL_WRITE
            | access::REMOTE_READ
            | access::REMOTE_WRITE
            | access::REMOTE_ATOMIC;
        let mr = pd.reg_mr(&buf, 0, BUF as u64, rights)?;
        let mut s = Side {
            ctx,
            qp,
            buf,
            mr,
            next_wr: 1,
        };
        for i in 0..SLOTS {
            s.post_recv(i)?;
        }
        Ok(s)
    }

    fn post_recv(&mut self, slot: usize) -> Result<()> {
        let sg = [Sg {
            mr: &self.mr,
            offset: (RECV_AT + slot * SLOT) as u64,
            len: SLOT as u32,
        }];
        self.qp.post_recv(&RecvWr {
            wr_id: slot as u64,
            sg_list: &sg,
        })?;
        Ok(())
    }

    /// The STag and length of our buffer, for the peer (the private data).
    fn token(&self) -> Vec<u8> {
        let mut t = self.mr.stag().0.to_le_bytes().to_vec();
        t.extend_from_slice(&(BUF as u32).to_le_bytes());
        t
    }

    /// Posts one send work request and waits for its completion.
    fn run(&mut self, op: WrOpcode, offset: usize, len: u32) -> Result<WorkCompletion> {
        let wr_id = 1000 + self.next_wr;
        self.next_wr += 1;
        let sg = [Sg {
            mr: &self.mr,
            offset: offset as u64,
            len,
        }];
        self.qp.post_send(&SendWr::new(wr_id, op, &sg))?;
        let wc = self.wait(|wc| wc.wr_id == wr_id)?;
        if wc.status != WcStatus::Success {
            return Err(format!("{op:?}: completed with {:?}", wc.status).into());
        }
        Ok(wc)
    }

    fn wait(&self, want: impl Fn(&WorkCompletion) -> bool) -> Result<WorkCompletion> {
        let t = Instant::now();
        loop {
            if let Some(wc) = self.qp.send_cq().poll_one()? {
                if want(&wc) {
                    return Ok(wc);
                }
                return Err(format!("unexpected completion {wc:?}").into());
            }
            if t.elapsed() > TIMEOUT {
                return Err("no completion in 20 s".into());
            }
            std::hint::spin_loop();
        }
    }

    /// Waits for a receive (a Send, Send with Immediate or Write with Immediate), returns it
    /// with the text the Send carried, and reposts its buffer.
    fn receive(&mut self) -> Result<(WorkCompletion, String)> {
        let wc = self.wait(|wc| wc.is_recv())?;
        if wc.status != WcStatus::Success {
            return Err(format!("receive completed with {:?}", wc.status).into());
        }
        let slot = wc.wr_id as usize;
        let text = String::from_utf8_lossy(
            &self
                .buf
                .to_vec(RECV_AT + slot * SLOT, wc.byte_len as usize)?,
        )
        .into_owned();
        self.post_recv(slot)?;
        Ok((wc, text))
    }

    /// Sends a short text message.
    fn say(&mut self, text: &str) -> Result<()> {
        self.buf.write(SCRATCH, text.as_bytes())?;
        self.run(WrOpcode::Send, SCRATCH, text.len() as u32)?;
        Ok(())
    }
}

fn settings(private_data: Vec<u8>) -> ConnSettings {
    ConnSettings {
        // Send with Immediate is an RDMAP version 2 operation: both sides ask for it.
        rdmap_v2: true,
        private_data,
        ..ConnSettings::default()
    }
}

fn peer_token(pd: &[u8]) -> Result<(Stag, u32)> {
    if pd.len() < 8 {
        return Err("peer sent no STag in its private data".into());
    }
    Ok((
        Stag(u32::from_le_bytes(pd[0..4].try_into()?)),
        u32::from_le_bytes(pd[4..8].try_into()?),
    ))
}

fn server(dir: PathBuf, port: u16) -> Result<()> {
    let mut s = Side::open(&dir)?;
    s.buf.write(READ_AT, &pattern(7, 8192))?;
    s.buf.write(ATOMIC_AT, &1000u64.to_le_bytes())?;
    s.ctx.listen(port, &settings(Vec::new()))?;
    println!("server: listening on port {port}");
    let req = s.ctx.get_request(Duration::from_secs(60))?;
    let est = s
        .ctx
        .accept_blocking(&req, &s.qp, &settings(s.token()), TIMEOUT)?;
    println!(
        "server: connected to {} (IRD {}, ORD {}, RDMAP v{})",
        req.peer, est.ird, est.ord, est.rdmap_version
    );
    loop {
        let (wc, text) = s.receive()?;
        let verdict = match (
            wc.opcode,
            text.split_whitespace().collect::<Vec<_>>().as_slice(),
        ) {
            (WcOpcode::RecvImm, _) if wc.imm_data == Some(0xC0FFEE) => {
                // Send with Immediate: the data and the immediate both arrived.
                check(
                    &s.buf,
                    RECV_AT + wc.wr_id as usize * SLOT,
                    &pattern(2, wc.byte_len as usize),
                )
            }
            (WcOpcode::RecvImm, _) => {
                // Write with Immediate: the immediate carries the length written.
                let len = wc.imm_data.unwrap_or(0) as usize;
                check(&s.buf, WRITE_IMM_AT, &pattern(4, len))
            }
            (WcOpcode::Recv, _) if wc.byte_len == 1500 => {
                // The plain Send: 1500 octets of a known pattern.
                check(
                    &s.buf,
                    RECV_AT + wc.wr_id as usize * SLOT,
                    &pattern(1, 1500),
                )
            }
            (_, ["wrote", len]) => check(&s.buf, WRITE_AT, &pattern(3, len.parse()?)),
            (_, ["atomic"]) => {
                let v = s.buf.read_u64(ATOMIC_AT)?;
                if v == 42 {
                    Ok(())
                } else {
                    Err(format!("atomic target holds {v}, expected 42"))
                }
            }
            (_, ["bye"]) => {
                println!("server: every check passed");
                s.say("ok bye")?;
                return Ok(());
            }
            _ => Err(format!("unknown message {text:?}")),
        };
        match verdict {
            Ok(()) => s.say("ok")?,
            Err(e) => {
                s.say(&format!("bad {e}"))?;
                return Err(e.into());
            }
        }
    }
}

fn check(buf: &SharedBuffer, at: usize, want: &[u8]) -> std::result::Result<(), String> {
    match buf.to_vec(at, want.len()) {
        Ok(got) if got == want => Ok(()),
        Ok(_) => Err(format!("{} octets at {at} differ", want.len())),
        Err(e) => Err(e.to_string()),
    }
}

fn client(dir: PathBuf, remote: std::net::SocketAddr) -> Result<()> {
    let mut s = Side::open(&dir)?;
    let t = Instant::now();
    // The server may not be listening yet: a refused connection is retried for a while.
    let est = loop {
        match s
            .ctx
            .connect_blocking(&s.qp, remote, &settings(s.token()), TIMEOUT)
        {
            Ok(e) => break e,
            Err(iwarp_verbs::Error::ConnectionFailed { reason }) if t.elapsed() < TIMEOUT => {
                let _ = reason;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let (rkey, rlen) = peer_token(&est.private_data)?;
    println!(
        "client: connected to {remote} in {:.1} ms (IRD {}, ORD {}, RDMAP v{}); peer buffer \
         STag {rkey:#010x}, {rlen} octets",
        t.elapsed().as_secs_f64() * 1e3,
        est.ird,
        est.ord,
        est.rdmap_version
    );
    let mut rows: Vec<(&'static str, String)> = Vec::new();
    fn expect_ok(
        s: &mut Side,
        rows: &mut Vec<(&'static str, String)>,
        what: &'static str,
        detail: String,
    ) -> Result<()> {
        let (_, reply) = s.receive()?;
        if reply != "ok" {
            return Err(format!("{what}: server says {reply:?}").into());
        }
        rows.push((what, detail));
        Ok(())
    }

    // Send.
    s.buf.write(SEND_AT, &pattern(1, 1500))?;
    s.run(WrOpcode::Send, SEND_AT, 1500)?;
    expect_ok(
        &mut s,
        &mut rows,
        "Send",
        "1500 octets into a posted receive".into(),
    )?;

    // Send with Immediate (RDMAP v2).
    if est.rdmap_version >= 2 {
        let data = pattern(2, 3000);
        s.buf.write(SEND_AT, &data)?;
        s.run(WrOpcode::SendWithImm { imm: 0xC0FFEE }, SEND_AT, 3000)?;
        expect_ok(
            &mut s,
            &mut rows,
            "Send with Immediate",
            "3000 octets + immediate 0xc0ffee".into(),
        )?;
    }

    // RDMA Write, then tell the server what to check.
    let data = pattern(3, 100_000);
    s.buf.write(SEND_AT, &data)?;
    s.run(
        WrOpcode::RdmaWrite {
            rkey,
            remote_addr: WRITE_AT as u64,
        },
        SEND_AT,
        100_000,
    )?;
    s.say("wrote 100000")?;
    expect_ok(
        &mut s,
        &mut rows,
        "RDMA Write",
        "100000 octets at the peer's offset 128 KiB".into(),
    )?;

    // Write with Immediate: the server learns of it by a receive completion alone.
    let data = pattern(4, 5000);
    s.buf.write(SEND_AT, &data)?;
    s.run(
        WrOpcode::RdmaWriteWithImm {
            rkey,
            remote_addr: WRITE_IMM_AT as u64,
            imm: 5000,
        },
        SEND_AT,
        5000,
    )?;
    expect_ok(
        &mut s,
        &mut rows,
        "Write with Immediate",
        "5000 octets, immediate = length".into(),
    )?;

    // RDMA Read of what the server prepared.
    s.run(
        WrOpcode::RdmaRead {
            rkey,
            remote_addr: READ_AT as u64,
        },
        SEND_AT,
        8192,
    )?;
    if s.buf.to_vec(SEND_AT, 8192)? != pattern(7, 8192) {
        return Err("RDMA Read: the data read differs from the server's".into());
    }
    rows.push(("RDMA Read", "8192 octets, compared".into()));

    // FetchAdd then CmpSwap on the server's word (1000 to start).
    s.run(
        WrOpcode::FetchAdd {
            rkey,
            remote_addr: ATOMIC_AT as u64,
            add: 5,
        },
        SCRATCH,
        8,
    )?;
    let old = s.buf.read_u64(SCRATCH)?;
    if old != 1000 {
        return Err(format!("FetchAdd returned {old}, expected 1000").into());
    }
    rows.push(("FetchAdd", "1000 + 5, original 1000 returned".into()));
    s.run(
        WrOpcode::CmpSwap {
            rkey,
            remote_addr: ATOMIC_AT as u64,
            compare: 1005,
            swap: 42,
        },
        SCRATCH,
        8,
    )?;
    let old = s.buf.read_u64(SCRATCH)?;
    if old != 1005 {
        return Err(format!("CmpSwap returned {old}, expected 1005").into());
    }
    s.say("atomic")?;
    expect_ok(
        &mut s,
        &mut rows,
        "CmpSwap",
        "1005 -> 42, original returned, checked".into(),
    )?;

    s.say("bye")?;
    let (_, last) = s.receive()?;
    if last != "ok bye" {
        return Err(format!("server's last word: {last:?}").into());
    }
    println!();
    println!("  {:<22} result", "operation");
    for (op, detail) in &rows {
        println!("  {op:<22} ok: {detail}");
    }
    println!();
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let role = args.next().unwrap_or_default();
    let mut dir = None;
    let mut port = 7000u16;
    let mut remote = None;
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--runtime-dir", Some(v)) => dir = Some(PathBuf::from(v)),
            ("--port", Some(v)) => port = v.parse().unwrap_or(0),
            ("--connect", Some(v)) => remote = v.parse().ok(),
            _ => {
                eprintln!("usage: rdma_pair server|client --runtime-dir DIR [--port P | --connect IP:PORT]");
                return ExitCode::from(2);
            }
        }
    }
    let Some(dir) = dir.or_else(|| std::env::var_os("IWARP_RUNTIME_DIR").map(PathBuf::from)) else {
        eprintln!("rdma_pair: --runtime-dir (or IWARP_RUNTIME_DIR) names the endpoint");
        return ExitCode::from(2);
    };
    let r = match (role.as_str(), remote) {
        ("server", _) => server(dir, port),
        ("client", Some(remote)) => client(dir, remote),
        _ => Err("usage: rdma_pair server|client ... (client needs --connect IP:PORT)".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma_pair {role}: {e}");
            ExitCode::FAILURE
        }
    }
}
