//! Writes every frame a port sends and receives to a pcap file (Ethernet link type), so any
//! exchange opens in Wireshark. Unbuffered, so the file is complete even if the daemon is
//! killed: capture is a debugging aid, and costs a write per frame.

use super::Port;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use std::fs::File;
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

pub struct PcapPort<P: Port> {
    inner: P,
    writer: PcapWriter<File>,
}

impl<P: Port> PcapPort<P> {
    pub fn new(inner: P, path: &Path) -> io::Result<PcapPort<P>> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65535,
            ..Default::default()
        };
        let writer =
            PcapWriter::with_header(File::create(path)?, header).map_err(io::Error::other)?;
        Ok(PcapPort { inner, writer })
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }
}

fn record(w: &mut PcapWriter<File>, frame: &[u8]) {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // A capture write error must not stop the dataplane; the frame itself is unaffected.
    let _ = w.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame));
}

impl<P: Port> Port for PcapPort<P> {
    forward_to_inner!();
    type Frame = P::Frame;

    fn rx_burst<F: FnMut(P::Frame)>(&mut self, max: usize, mut f: F) -> io::Result<usize> {
        let w = &mut self.writer;
        self.inner.rx_burst(max, |frame| {
            record(w, &frame);
            f(frame)
        })
    }
    fn tx(&mut self, frame: &[u8]) -> io::Result<()> {
        record(&mut self.writer, frame);
        self.inner.tx(frame)
    }
    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }
}
