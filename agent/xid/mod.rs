//! XID intelligence: what turns a driver report into a row an SRE can act on.
//!
//! - [`catalog`]: name, category, severity and recommended action of every documented code.
//! - [`details`]: fields decoded from the message text (page fault, ECC, GSP, recovery action).
//! - [`reconcile`]: one record from the tracepoint's and the kernel log's reports.
//! - [`incidents`]: cascades on one GPU as one incident with a root candidate; links from an
//!   incident to the failed CUDA calls of the processes it hit.
//! - [`attribution`]: which process an XID hit, and its container and pod.
//! - [`suspects`]: the kernels launched before an XID that points at a running kernel.
//! - [`stage`]: the thread-shared stage the sources report to.

pub mod attribution;
pub mod details;
pub mod incidents;
pub mod reconcile;
pub mod stage;
pub mod suspects;

/// The catalog is its own crate: the lake's views fill older rows from it too.
pub use gpuship_catalog as catalog;
pub use stage::{XidStage, XidStageSettings};

#[cfg(test)]
mod tests {
    use super::catalog;
    use crate::escape::escape_controls;
    use std::borrow::Cow;

    #[test]
    fn the_xid_catalog_gpuship_xid_prints_has_nothing_to_escape() {
        for info in catalog::entries() {
            let text = format!("{info}\n{}", catalog::CATALOG_VERSION);
            assert!(
                matches!(escape_controls(&text.replace('\n', " ")), Cow::Borrowed(_)),
                "{text:?}"
            );
        }
        let unknown = catalog::lookup(999_999).to_string();
        assert!(matches!(
            escape_controls(&unknown.replace('\n', " ")),
            Cow::Borrowed(_)
        ));
    }
}
