//! [`EventKind`]: the kinds of events gpuship records, each with its own schema and table,
//! and [`Retention`], how full queues and spools treat each.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The kinds of events gpuship records; each has its own Arrow schema and Parquet table.
///
/// Kinds are data: per-kind tables (counters, queue and spool counts, routes, Kafka topics,
/// Parquet writer settings) are [`enum_map::EnumMap`]s indexed by this enum, and names and
/// iteration are derived. A new variant therefore needs only its schema, its source and the
/// exhaustive `match`es the compiler points at (schema, OTLP mapping, spool byte, policy).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    enum_map::Enum,
    strum::EnumIter,
    strum::EnumCount,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum EventKind {
    /// NVIDIA XID errors, from the driver's tracepoint and the kernel log.
    Xid,
    /// CUDA driver API calls, from uprobes on libcuda.
    Cuda,
    /// NVIDIA kernel-driver operations: ioctls on NVIDIA device files, driver function calls.
    Driver,
    /// Per-interval statistics of the CUDA functions in `stats` mode (calls, bytes, durations
    /// per process, function and result), aggregated in the kernel.
    CudaStats,
    /// The memory each process holds per GPU and kind, as of the end of each interval.
    CudaMemory,
}

/// How a sink's queue and spool treat a kind when they are full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Never dropped by policy: its own queue lane, written ahead to the XID journal, kept in
    /// a full spool.
    Kept,
    /// Obeys `when_full` and the spool's `max_size` (dropped and counted when both are full).
    Droppable,
}

impl EventKind {
    /// Every kind, in declaration order (derived: a new variant is in it).
    pub const ALL: &'static [EventKind] = <EventKind as strum::VariantArray>::VARIANTS;

    /// Every kind, in declaration order (used for per-kind counters and table listings).
    pub fn all() -> impl Iterator<Item = EventKind> + Clone {
        <EventKind as strum::IntoEnumIterator>::iter()
    }

    /// The name used in paths, topics and metrics.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// How queues and spools keep this kind when they are full. A per-kind decision: a new
    /// kind must choose.
    pub fn retention(self) -> Retention {
        match self {
            EventKind::Xid => Retention::Kept,
            EventKind::Cuda | EventKind::Driver | EventKind::CudaStats | EventKind::CudaMemory => {
                Retention::Droppable
            }
        }
    }

    /// True when a full queue or spool may drop this kind (see [`Retention`]).
    pub fn droppable(self) -> bool {
        self.retention() == Retention::Droppable
    }

    /// The names of every kind, quoted and comma-separated (`"xid", "cuda", ...`), for
    /// messages that list the choices.
    pub fn quoted_names() -> String {
        Self::all()
            .map(|kind| format!("{:?}", kind.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_serde_names_for_every_kind() {
        let kinds: Vec<EventKind> = EventKind::all().collect();
        assert_eq!(kinds.len(), <EventKind as strum::EnumCount>::COUNT);
        assert_eq!(kinds, EventKind::ALL);
        for kind in kinds {
            let serde_name = serde_json::to_value(kind).unwrap();
            assert_eq!(serde_name, kind.as_str(), "{kind:?}");
        }
        assert_eq!(EventKind::Driver.as_str(), "driver");
        assert_eq!(EventKind::CudaStats.as_str(), "cuda_stats");
        assert_eq!(EventKind::CudaMemory.as_str(), "cuda_memory");
        assert_eq!(
            EventKind::quoted_names(),
            r#""xid", "cuda", "driver", "cuda_stats", "cuda_memory""#
        );
    }

    #[test]
    fn only_xids_are_kept_when_full() {
        assert!(!EventKind::Xid.droppable());
        assert!(EventKind::Cuda.droppable());
        assert!(EventKind::Driver.droppable());
        assert!(EventKind::CudaStats.droppable());
    }
}
