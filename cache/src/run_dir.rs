//! A run directory, `.pipeline/runs/<UTC time>-<pid>/`, and its `metrics.jsonl`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The directory one `pipeline run` writes its metrics and checkpoints to.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub path: PathBuf,
}

/// `YYYYMMDD-HHMMSS` in UTC for seconds since the Unix epoch.
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

impl RunDir {
    /// Creates a new run directory under `<base>/.pipeline/runs/`.
    /// The run's id: its directory's name.
    pub fn id(&self) -> String {
        self.path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    }

    pub fn create(base: &Path) -> io::Result<RunDir> {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let path = base.join(".pipeline").join("runs").join(format!(
            "{}-{}",
            utc_stamp(secs),
            std::process::id()
        ));
        fs::create_dir_all(&path)?;
        Ok(RunDir { path })
    }

    pub fn metrics_log(&self) -> io::Result<MetricsLog> {
        MetricsLog::open(&self.path.join("metrics.jsonl"))
    }
}

/// An append-only JSON-lines file; every line is flushed as soon as it is written, so a
/// crash loses at most the line being written.
#[derive(Debug)]
pub struct MetricsLog {
    file: File,
    path: PathBuf,
}

impl MetricsLog {
    pub fn open(path: &Path) -> io::Result<MetricsLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(MetricsLog {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line; `line` must be a single line of JSON.
    pub fn append(&mut self, line: &str) -> io::Result<()> {
        debug_assert!(!line.contains('\n'));
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.file.write_all(&buf)?;
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_calendar_times() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(1_795_000_000), "20261118-110640");
        assert_eq!(utc_stamp(951_825_600), "20000229-120000");
    }
}
