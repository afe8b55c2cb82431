//! The state-file family of `/metrics` (docs/operations.md, "State directory"): state files
//! found unusable at start and set aside, by file and reason (both fixed sets).

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::family;
use crate::accounting::state_files::StateFileSnapshot;

/// The family's name.
pub const STATE_FILE_FAMILY: &str = "gpuship_state_files_set_aside_total";

/// Encodes the family: one sample per (file, reason), zeros included.
pub(super) fn encode(
    set_aside: &StateFileSnapshot,
    encoder: &mut DescriptorEncoder,
) -> std::fmt::Result {
    let samples = set_aside.iter().flat_map(|(file, reasons)| {
        reasons
            .iter()
            .map(move |(reason, count)| (vec![("file", *file), ("reason", *reason)], *count))
    });
    family(
        encoder,
        STATE_FILE_FAMILY,
        "State files found unusable at start (unreadable, too large, not a regular file, \
         another user's, or ahead of the kernel log) and renamed aside.",
        MetricType::Counter,
        samples,
    )
}
