//! iwarpd: the dataplane daemon's library — ports, the smoltcp device and clock, and the
//! node that runs TCP connections through the RNIC engine.
//!
//! - `port/`: the [`port::Port`] trait and its implementations (embedded Unix-socket
//!   Ethernet, TAP, DPDK, pcap capture wrapper, a lossy wrapper for tests), and
//!   `port/steer.rs`, which shares one port among several workers.
//! - `device.rs`: smoltcp's `phy::Device` over a port; checks received TCP checksums where
//!   the port's device does not, and paces ARP requests.
//! - `arp.rs`: the one parse of an ARP packet and the pacer of ARP requests.
//! - `peer_tcp.rs`: what each TCP peer's segments say that smoltcp keeps to itself: its MSS
//!   and window (the node sizes and queues only FPDUs that go whole) and whether it reset
//!   the connection.
//! - `clock.rs`: the dilated clock that brings smoltcp's retransmission timer down to the
//!   configured minimum RTO.
//! - `neighbours.rs`: keeps smoltcp's ARP entries for their real lifetime despite that clock.
//! - `node/`: one RNIC on one port: TCP per QP, the poll loop (`mod.rs`), each connection's
//!   life (`conn.rs`), MPA run by the control plane (`relay.rs`) or by the node itself
//!   (`mpa_setup.rs`), FPDU-aligned transmission (`stream.rs`).
//! - `host/`: the service a worker runs beside its node: its command and upcall rings from
//!   control, its applications' queue rings, completions and events.
//! - `worker.rs`: the poll-mode core that owns a node (pinning, busy/adaptive polling,
//!   counters readable while it runs); a daemon runs one per configured worker.
//! - `daemon.rs`: the daemon the `iwarpd` binary runs: runtime directory, daemon segment,
//!   worker threads (each opens its port with `port/open.rs`), signals, the stats file
//!   (`stats.rs`).

pub mod arp;
pub mod clock;
pub mod daemon;
pub mod device;
pub mod host;
pub mod neighbours;
pub mod node;
pub mod peer_tcp;
pub mod port;
pub mod stats;
pub mod worker;
