//! The points of a run a test can stop it at, to kill it there and prove that a rerun loses
//! and duplicates nothing. `GPUSHIP_LAKE_COMPACT_PAUSE_AT=<phase>` makes the run print
//! `gpuship-lake compact: paused at <phase>` on stderr the first time it reaches that point and
//! then wait forever (until killed). Unset, nothing waits.

use std::time::Duration;

/// The environment variable that names the phase to pause at.
pub const PAUSE_ENV: &str = "GPUSHIP_LAKE_COMPACT_PAUSE_AT";

/// The points of a run, in order, for the first hour that has work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Planned: nothing written or deleted yet.
    Listed,
    /// A compacted file is being written: its first part is in the store (an S3 multipart
    /// upload, or a staged `<name>#<n>` file on a local disk), the file not complete.
    Writing,
    /// Every compacted file of the hour is complete; the marker is not written.
    Written,
    /// The marker is written; no replaced file deleted.
    Committed,
    /// One replaced file deleted, the others not yet.
    Retiring,
    /// A table's new manifest and manifest list are written (after every hour of its kind);
    /// its metadata file is not.
    IcebergWritten,
    /// A table's new metadata file is written (the commit); `version-hint.text` is not.
    IcebergCommitted,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 7] = [
        Phase::Listed,
        Phase::Writing,
        Phase::Written,
        Phase::Committed,
        Phase::Retiring,
        Phase::IcebergWritten,
        Phase::IcebergCommitted,
    ];

    /// Its name in `GPUSHIP_LAKE_COMPACT_PAUSE_AT`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Listed => "listed",
            Phase::Writing => "writing",
            Phase::Written => "written",
            Phase::Committed => "committed",
            Phase::Retiring => "retiring",
            Phase::IcebergWritten => "iceberg-written",
            Phase::IcebergCommitted => "iceberg-committed",
        }
    }
}

/// Where this run pauses, if anywhere.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pauser {
    at: Option<Phase>,
}

impl Pauser {
    /// From [`PAUSE_ENV`]; an unknown phase name is an error.
    pub fn from_env() -> Result<Pauser, String> {
        let Some(value) = std::env::var_os(PAUSE_ENV) else {
            return Ok(Pauser::default());
        };
        let value = value.to_string_lossy();
        let at = Phase::ALL
            .into_iter()
            .find(|p| p.name() == value)
            .ok_or_else(|| {
                let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
                format!("{PAUSE_ENV}={value}: not a phase ({})", names.join(", "))
            })?;
        Ok(Pauser { at: Some(at) })
    }

    /// Marks `phase` reached: waits forever if this run pauses there.
    pub fn reached(&self, phase: Phase) {
        if self.at == Some(phase) {
            eprintln!("gpuship-lake compact: paused at {}", phase.name());
            loop {
                std::thread::sleep(Duration::from_secs(3_600));
            }
        }
    }
}
