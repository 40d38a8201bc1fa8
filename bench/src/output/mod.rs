//! Where results go: the terminal table, the JSON report, the HdrHistogram interval log and
//! the SVG plots.

pub mod hlog;
pub mod plot;
pub mod table;

use crate::error::{BenchError, Result};
use crate::report::Report;
use std::path::Path;

/// Writes the report as pretty JSON to `path` (`-`: standard output).
pub fn write_json(report: &Report, path: &Path) -> Result<()> {
    let text = serde_json::to_string_pretty(report)
        .map_err(|e| BenchError::output("the JSON report", e))?;
    if path.as_os_str() == "-" {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{text}").map_err(|e| BenchError::io("standard output", e))
    } else {
        std::fs::write(path, text + "\n")
            .map_err(|e| BenchError::io(format!("writing {}", path.display()), e))
    }
}
