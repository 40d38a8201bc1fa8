//! The crate's one error type. `Usage` errors are the harness refusing a request that makes no
//! sense (the CLI prints them and exits with status 2); the others are failures while running.

use std::fmt;

#[derive(Debug)]
#[non_exhaustive]
pub enum BenchError {
    /// The request makes no sense; the message says why and what to use instead.
    Usage(String),
    /// An I/O failure, with what was being done.
    Io {
        context: String,
        source: std::io::Error,
    },
    /// A transport could not be set up or failed during a measurement.
    Transport { transport: String, message: String },
    /// The iWARP daemons (iwarpd, iwarp-control) could not be started, found or reached.
    Daemon(String),
    /// Writing a report (JSON, histogram log, plot) failed.
    Output { what: String, message: String },
    /// Stopped by SIGINT / SIGTERM.
    Interrupted,
}

impl BenchError {
    pub fn usage(msg: impl Into<String>) -> BenchError {
        BenchError::Usage(msg.into())
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> BenchError {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }

    pub fn transport(transport: impl Into<String>, message: impl fmt::Display) -> BenchError {
        BenchError::Transport {
            transport: transport.into(),
            message: message.to_string(),
        }
    }

    pub fn output(what: impl Into<String>, message: impl fmt::Display) -> BenchError {
        BenchError::Output {
            what: what.into(),
            message: message.to_string(),
        }
    }

    /// True for a refused request (as opposed to a failure while running).
    pub fn is_usage(&self) -> bool {
        matches!(self, BenchError::Usage(_))
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Usage(m) => f.write_str(m),
            BenchError::Io { context, source } => write!(f, "{context}: {source}"),
            BenchError::Transport { transport, message } => write!(f, "{transport}: {message}"),
            BenchError::Daemon(m) => write!(f, "daemons: {m}"),
            BenchError::Output { what, message } => write!(f, "writing {what}: {message}"),
            BenchError::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;
