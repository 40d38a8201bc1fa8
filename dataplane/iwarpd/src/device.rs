//! smoltcp's `phy::Device` over a [`Port`]: frames come in by bursts into a small queue of
//! recycled buffers (no allocation per frame once warm) and go out through the port.

use crate::port::Port;
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use std::collections::VecDeque;

/// Frames taken from the port per burst.
pub const RX_BURST: usize = 32;

pub struct PortDevice<P: Port> {
    pub port: P,
    rxq: VecDeque<Vec<u8>>,
    pool: Vec<Vec<u8>>,
    txbuf: Vec<u8>,
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

impl<P: Port> PortDevice<P> {
    pub fn new(port: P) -> PortDevice<P> {
        let frame = port.mtu() + 14;
        PortDevice {
            port,
            rxq: VecDeque::with_capacity(RX_BURST),
            pool: (0..RX_BURST).map(|_| Vec::with_capacity(frame)).collect(),
            txbuf: vec![0; frame],
            rx_frames: 0,
            tx_frames: 0,
            rx_bytes: 0,
            tx_bytes: 0,
        }
    }

    /// Whether received frames wait for smoltcp.
    pub fn has_rx(&self) -> bool {
        !self.rxq.is_empty()
    }

    /// Pulls a burst from the port when the queue is empty. Returns frames taken.
    pub fn fill(&mut self) -> usize {
        if !self.rxq.is_empty() {
            return 0;
        }
        let (rxq, pool) = (&mut self.rxq, &mut self.pool);
        let mut bytes = 0;
        let n = self
            .port
            .rx_burst(RX_BURST, |f| {
                let mut b = pool.pop().unwrap_or_default();
                b.clear();
                b.extend_from_slice(f);
                bytes += f.len() as u64;
                rxq.push_back(b);
            })
            .unwrap_or(0);
        self.rx_frames += n as u64;
        self.rx_bytes += bytes;
        n
    }
}

pub struct RxToken<'a> {
    buf: Vec<u8>,
    pool: &'a mut Vec<Vec<u8>>,
}

pub struct TxToken<'a, P: Port> {
    port: &'a mut P,
    buf: &'a mut Vec<u8>,
    frames: &'a mut u64,
    bytes: &'a mut u64,
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.buf);
        self.pool.push(self.buf);
        r
    }
}

impl<P: Port> phy::TxToken for TxToken<'_, P> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        let r = f(&mut self.buf[..len]);
        // A port that cannot send drops the frame; TCP retransmits.
        let _ = self.port.tx(&self.buf[..len]);
        *self.frames += 1;
        *self.bytes += len as u64;
        r
    }
}

impl<P: Port> phy::Device for PortDevice<P> {
    type RxToken<'a>
        = RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a, P>
    where
        Self: 'a;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken<'_>, TxToken<'_, P>)> {
        let buf = self.rxq.pop_front()?;
        Some((
            RxToken {
                buf,
                pool: &mut self.pool,
            },
            TxToken {
                port: &mut self.port,
                buf: &mut self.txbuf,
                frames: &mut self.tx_frames,
                bytes: &mut self.tx_bytes,
            },
        ))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_, P>> {
        Some(TxToken {
            port: &mut self.port,
            buf: &mut self.txbuf,
            frames: &mut self.tx_frames,
            bytes: &mut self.tx_bytes,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.port.mtu() + 14;
        caps.max_burst_size = Some(RX_BURST);
        caps
    }
}
