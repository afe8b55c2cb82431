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
