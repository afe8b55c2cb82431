//! The budget's side of the kernel: the hot mode the BPF programs count by, each process's
//! trap counters in `process_traps`, and links dropped off the caller's thread.

use libbpf_rs::{MapCore, MapFlags};

use super::schedule::{Mode, Reading};
use super::HotLibrary;
use crate::bpf::cuda::CudaSkel;
use crate::sources::cuda::attach::{self, Links};
use crate::sources::cuda::plan::PlannedProbe;

/// Drops links off the caller's thread (a detach waits for a grace period).
pub(super) fn drop_later(links: Vec<Links>) {
    if links.is_empty() {
        return;
    }
    std::thread::spawn(move || {
        let mut links = links;
        for set in &mut links {
            set.detach();
        }
    });
}

pub(super) fn set_hot_mode(skel: &CudaSkel<'_>, mode: Mode) {
    let value: u32 = match mode {
        Mode::SystemWide => 0,
        Mode::PerProcess => 1,
    };
    if let Err(err) =
        skel.maps
            .hot_mode
            .update(&0u32.to_ne_bytes(), &value.to_ne_bytes(), MapFlags::ANY)
    {
        tracing::error!(%err, "cannot switch the kernel's hot mode");
    }
}

/// Every process's cumulative traps.
pub(super) fn read_traps(map: &dyn MapCore) -> Vec<Reading> {
    let keys: Vec<Vec<u8>> = map.keys().collect();
    keys.into_iter()
        .filter_map(|key| {
            let pid = u32::from_ne_bytes(key.as_slice().try_into().ok()?);
            let value = map.lookup(&key, MapFlags::ANY).ok()??;
            let hot = u64::from_ne_bytes(value.get(0..8)?.try_into().ok()?);
            let steady = u64::from_ne_bytes(value.get(8..16)?.try_into().ok()?);
            Some(Reading { pid, hot, steady })
        })
        .collect()
}

/// Attaches `library`'s hot probes, for one process or every one.
pub(super) fn attach_library(
    skel: &CudaSkel<'_>,
    library: &HotLibrary,
    pid: Option<u32>,
) -> anyhow::Result<Links> {
    let probes: Vec<&PlannedProbe> = library.probes.iter().collect();
    attach::attach_hot(skel, &library.path, &probes, pid, library.sessions)
}
