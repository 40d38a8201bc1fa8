//! `iwarp-bottleneck`: builds or removes the shared bottleneck of
//! [`iwarp_testkit::bottleneck`] for a script (`scripts/bench-fairness.sh`). Root only.
//!
//! ```text
//! iwarp-bottleneck up PREFIX RATE_MBIT SENDERS RECEIVERS CLIENT_IP SERVER_IP
//! iwarp-bottleneck down PREFIX
//! ```
//! SENDERS and RECEIVERS are comma-separated interface names (our TAP ports).

use iwarp_testkit::bottleneck::{Bottleneck, Spec};
use std::process::ExitCode;

const USAGE: &str = "usage: iwarp-bottleneck up PREFIX RATE_MBIT SENDERS RECEIVERS CLIENT_IP \
                     SERVER_IP | down PREFIX";

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

fn run(args: &[String]) -> Result<(), String> {
    match args {
        [cmd, prefix] if cmd == "down" => {
            Bottleneck::remove(prefix);
            Ok(())
        }
        [cmd, prefix, rate, senders, receivers, client, server] if cmd == "up" => {
            let spec = Spec {
                prefix: prefix.clone(),
                senders: list(senders),
                receivers: list(receivers),
                rate_mbit: rate
                    .parse()
                    .map_err(|e| format!("RATE_MBIT {rate:?}: {e}"))?,
                client_ip: client
                    .parse()
                    .map_err(|e| format!("CLIENT_IP {client:?}: {e}"))?,
                server_ip: server
                    .parse()
                    .map_err(|e| format!("SERVER_IP {server:?}: {e}"))?,
            };
            Bottleneck::build(&spec)?.keep();
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iwarp-bottleneck: {e}");
            ExitCode::from(2)
        }
    }
}
