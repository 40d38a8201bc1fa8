//! The daemons' one logging set-up: `daemon.log_level` is the most a `tracing` subscriber on
//! stderr writes, and the subscriber also takes the `log` records of dependencies (smoltcp).

use crate::LogLevel;

impl From<LogLevel> for tracing::Level {
    fn from(l: LogLevel) -> tracing::Level {
        match l {
            LogLevel::Error => tracing::Level::ERROR,
            LogLevel::Warn => tracing::Level::WARN,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Debug => tracing::Level::DEBUG,
            LogLevel::Trace => tracing::Level::TRACE,
        }
    }
}

/// Starts the process's subscriber at `level`; a second call (a subscriber is already set)
/// changes nothing.
pub fn init(level: LogLevel) {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::from(level))
        .with_writer(std::io::stderr)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::level_filters::LevelFilter;

    /// Each level lets through itself and what is more severe, and nothing less severe.
    #[test]
    fn each_level_is_its_tracing_level() {
        let levels = [
            LogLevel::Error,
            LogLevel::Warn,
            LogLevel::Info,
            LogLevel::Debug,
            LogLevel::Trace,
        ];
        for (i, l) in levels.into_iter().enumerate() {
            let filter = LevelFilter::from_level(l.into());
            for (j, m) in levels.into_iter().enumerate() {
                assert_eq!(
                    tracing::Level::from(m) <= filter,
                    j <= i,
                    "{l:?} lets {m:?} through"
                );
            }
        }
    }
}
