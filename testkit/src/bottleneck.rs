//! A shared bottleneck (root only): two Linux bridges joined by a veth pair whose egress
//! toward the receiving bridge is shaped by `tbf` (this kernel has `tbf` and `htb`, not
//! `netem` or `fq_codel`), and two network namespaces, one on each bridge, for a kernel TCP
//! flow (iperf3) to share it with ours. The fairness test and `scripts/bench-fairness.sh`
//! (through the `iwarp-bottleneck` binary) build the same one.
//!
//! ```text
//!  senders ──────┐                      ┌── receivers
//!  <p>c (kernel) ┤ <p>br0 ─[tbf]─ veth ─ <p>br1 ├ <p>s (kernel)
//! ```

use std::net::Ipv4Addr;
use std::process::Command;

/// What to build. Every name starts with `prefix` (at most 9 characters, so the longest
/// interface name, `<prefix>up0`, fits Linux's 15), unique to its user: several root tests
/// and benchmarks run at the same time on one machine.
#[derive(Debug, Clone)]
pub struct Spec {
    pub prefix: String,
    /// Existing interfaces (our endpoints' TAP ports) put on the sending bridge.
    pub senders: Vec<String>,
    /// Existing interfaces put on the receiving bridge.
    pub receivers: Vec<String>,
    /// The shaped rate toward the receivers, Mbit/s.
    pub rate_mbit: u32,
    /// The kernel client's address (in `<prefix>c`, on the sending bridge) and the kernel
    /// server's (in `<prefix>s`, on the receiving bridge); prefix /24.
    pub client_ip: Ipv4Addr,
    pub server_ip: Ipv4Addr,
}

/// The built bottleneck; removed when dropped (see [`Bottleneck::keep`]).
pub struct Bottleneck {
    prefix: String,
    keep: bool,
}

fn sh(script: &str) -> Result<(), String> {
    let out = Command::new("sh")
        .args(["-c", script])
        .output()
        .map_err(|e| format!("sh: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

impl Bottleneck {
    /// Builds it, first removing any left from an earlier run with the same prefix.
    pub fn build(spec: &Spec) -> Result<Bottleneck, String> {
        if spec.prefix.is_empty() || spec.prefix.len() > 9 {
            return Err(format!("prefix {:?}: 1 to 9 characters", spec.prefix));
        }
        Bottleneck::remove(&spec.prefix);
        let p = &spec.prefix;
        let (c, s) = (spec.client_ip, spec.server_ip);
        // tbf's burst of 64 KiB and 10 ms of queue: a switch port's worth of buffer, in
        // which a flow that does not back off fills the queue and the others lose.
        let script = format!(
            "set -e
            ip netns add {p}c && ip netns add {p}s
            ip link add {p}br0 type bridge && ip link add {p}br1 type bridge
            ip link add {p}up0 type veth peer name {p}up1
            ip link add {p}c0 type veth peer name {p}c1
            ip link add {p}s0 type veth peer name {p}s1
            ip link set {p}c0 netns {p}c && ip link set {p}s0 netns {p}s
            ip netns exec {p}c ip addr add {c}/24 dev {p}c0
            ip netns exec {p}s ip addr add {s}/24 dev {p}s0
            ip netns exec {p}c ip link set {p}c0 up && ip netns exec {p}s ip link set {p}s0 up
            ip netns exec {p}c ip link set lo up && ip netns exec {p}s ip link set lo up
            for l in {senders} {p}c1 {p}up0; do ip link set $l master {p}br0 && ip link set $l up; done
            for l in {receivers} {p}s1 {p}up1; do ip link set $l master {p}br1 && ip link set $l up; done
            ip link set {p}br0 up && ip link set {p}br1 up
            tc qdisc add dev {p}up0 root tbf rate {rate}mbit burst 64kb latency 10ms",
            senders = spec.senders.join(" "),
            receivers = spec.receivers.join(" "),
            rate = spec.rate_mbit,
        );
        let b = Bottleneck {
            prefix: p.clone(),
            keep: false,
        };
        sh(&script).map_err(|e| format!("building the bottleneck {p}: {e}"))?;
        Ok(b)
    }

    /// The namespace of the kernel client (sending side).
    pub fn client_ns(&self) -> String {
        format!("{}c", self.prefix)
    }

    /// The namespace of the kernel server (receiving side).
    pub fn server_ns(&self) -> String {
        format!("{}s", self.prefix)
    }

    /// Leaves it in place when dropped, for a later [`Bottleneck::remove`] (the binary's
    /// `up`, then `down`).
    pub fn keep(mut self) {
        self.keep = true;
    }

    /// Removes the namespaces, bridges and veths of `prefix`, whatever is left of them.
    pub fn remove(prefix: &str) {
        let p = prefix;
        let _ = sh(&format!(
            "ip netns del {p}c 2>/dev/null; ip netns del {p}s 2>/dev/null; \
             ip link del {p}up0 2>/dev/null; ip link del {p}br0 2>/dev/null; \
             ip link del {p}br1 2>/dev/null; true"
        ));
    }
}

impl Drop for Bottleneck {
    fn drop(&mut self) {
        if !self.keep {
            Bottleneck::remove(&self.prefix);
        }
    }
}

/// The rate (bit/s) the receiver of an iperf3 TCP test got, from its `-J` report.
pub fn iperf3_received_bps(json: &str) -> Option<f64> {
    let at = json.find("\"sum_received\"")?;
    let rest = &json[at..];
    let at = rest.find("\"bits_per_second\":")? + "\"bits_per_second\":".len();
    let rest = rest[at..].trim_start();
    let end = rest.find([',', '\n', '}'])?;
    rest[..end].trim().parse().ok()
}

/// Jain's fairness index of `rates`: 1 when all are equal, 1/n when one takes everything.
pub fn jain(rates: &[f64]) -> f64 {
    let sum: f64 = rates.iter().sum();
    let squares: f64 = rates.iter().map(|r| r * r).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (rates.len() as f64 * squares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_a_monopoly() {
        assert!((jain(&[100.0, 100.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[200.0, 0.0]) - 0.5).abs() < 1e-12);
        assert!((jain(&[150.0, 50.0]) - 0.8).abs() < 1e-12);
    }

    #[test]
    fn iperf3_report_gives_the_received_rate() {
        let json = r#"{"end": {"sum_sent": {"bits_per_second": 2.0e8},
            "sum_received": {"seconds": 6, "bits_per_second": 95123456.5, "retransmits": 0}}}"#;
        assert_eq!(iperf3_received_bps(json), Some(95123456.5));
        assert_eq!(iperf3_received_bps("{}"), None);
    }

    #[test]
    fn a_prefix_too_long_for_interface_names_is_refused() {
        let spec = Spec {
            prefix: "muchtoolong".into(),
            senders: vec![],
            receivers: vec![],
            rate_mbit: 200,
            client_ip: Ipv4Addr::new(10, 0, 0, 1),
            server_ip: Ipv4Addr::new(10, 0, 0, 2),
        };
        assert!(Bottleneck::build(&spec).is_err());
    }
}
