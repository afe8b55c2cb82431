//! `gpuship doctor`'s check of the XID tracepoint: the program loaded, attached and detached
//! on the configured tracepoint, or why not.

use std::mem::MaybeUninit;

use super::program::load;
use crate::diagnosis::{refusal_or, Cause, Check, HostFacts};
use crate::sources::xid_config::XidSourceConfig;

/// The tracepoint check of `[sources.xid]` on `host`.
pub fn checks(xid: &XidSourceConfig, host: &HostFacts) -> Vec<Check> {
    let name = format!("xid_tracepoint {}", xid.tracepoint_name);
    if !xid.tracepoint {
        return vec![Check::pass(name, false, "disabled in config")];
    }
    let Some(root) = host.tracefs_root.as_deref() else {
        return vec![Check::failed_because(
            name,
            true,
            "tracefs is not available",
            &Cause::TracefsUnmounted,
        )];
    };
    let mut storage = MaybeUninit::uninit();
    let check = match load(&mut storage, xid, root) {
        Ok(Ok(loaded)) => {
            loaded.detach();
            Check::pass(name, true, "loaded, attached and detached")
        }
        Ok(Err(reason)) => Check::fail(
            name,
            true,
            reason,
            format!(
                "{} (a version that has the nvidia_dev_xid tracepoint); meanwhile XIDs come from the kernel log",
                Cause::DriverNotLoaded.fix()
            ),
        ),
        Err(err) => {
            let detail = format!("{err:#}");
            let cause = refusal_or(&detail, host.lockdown(), Cause::TracepointFormat);
            Check::failed_because(name, true, detail, &cause)
        }
    };
    vec![check]
}
