//! Which process an XID hit. The kernel log names it (`pid=..., name=...`) for many XIDs; when
//! it does not (the tracepoint alone, or XIDs the driver reports without a process), the
//! candidates are the processes that made CUDA calls in the seconds before and hold the GPU's
//! device file (`/dev/nvidia<minor>`) open. Each row says how it was attributed. The attributed
//! process's container and Kubernetes pod come from `enrich::read_workload`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gpuship_sinks::schema::XidRecord;

use crate::enrich::{read_workload, PodNames};

/// Processes that made CUDA calls recently: pid -> time of its latest call.
#[derive(Debug, Default)]
pub struct CudaActivity {
    last_call: Mutex<HashMap<i32, i64>>,
}

impl CudaActivity {
    /// Records calls (pid, time) seen since the last update.
    pub fn record(&self, calls: impl IntoIterator<Item = (i32, i64)>) {
        let mut map = self.last_call.lock().unwrap_or_else(|e| e.into_inner());
        for (pid, time_ns) in calls {
            let last = map.entry(pid).or_insert(time_ns);
            *last = (*last).max(time_ns);
        }
    }

    /// Processes whose latest call is at or after `since_ns`, most recent first.
    pub fn since(&self, since_ns: i64) -> Vec<i32> {
        let mut map = self.last_call.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, last| *last >= since_ns);
        let mut pids: Vec<(i32, i64)> = map.iter().map(|(p, t)| (*p, *t)).collect();
        pids.sort_by_key(|&(pid, time)| (std::cmp::Reverse(time), pid));
        pids.into_iter().map(|(pid, _)| pid).collect()
    }
}

/// Finds and describes the processes an XID affected.
#[derive(Debug, Clone)]
pub struct Attributor {
    proc_dir: PathBuf,
    dev_dir: PathBuf,
    pod_log_dir: PathBuf,
    window_ns: i64,
}

impl Attributor {
    /// Looks at processes under `proc_dir`, device files under `dev_dir` and the kubelet's pod
    /// log folders under `pod_log_dir`; CUDA activity counts when it is at most `window_ns`
    /// older than the XID.
    pub fn new(
        proc_dir: impl Into<PathBuf>,
        dev_dir: impl Into<PathBuf>,
        pod_log_dir: impl Into<PathBuf>,
        window_ns: i64,
    ) -> Self {
        Self {
            proc_dir: proc_dir.into(),
            dev_dir: dev_dir.into(),
            pod_log_dir: pod_log_dir.into(),
            window_ns,
        }
    }

    /// Fills `pid`/`comm` (when the log did not), `attribution`, `affected_pids` and the
    /// process's `workload` (container and pod).
    pub fn attribute(&self, record: &mut XidRecord, activity: &CudaActivity) {
        let device = record
            .gpu
            .as_ref()
            .and_then(|g| g.minor)
            .map(|minor| self.dev_dir.join(format!("nvidia{minor}")));
        let users: Vec<i32> = match &device {
            Some(device) => activity
                .since(record.time_ns.saturating_sub(self.window_ns))
                .into_iter()
                .filter(|&pid| holds_file(&self.proc_dir, pid, device))
                .collect(),
            None => Vec::new(),
        };
        let annotations = &mut record.annotations;
        match record.pid {
            Some(pid) => {
                annotations.attribution = Some("driver_log".into());
                annotations.affected_pids = std::iter::once(pid)
                    .chain(users.into_iter().filter(|&p| p != pid))
                    .collect();
            }
            None if !users.is_empty() => {
                annotations.attribution = Some("cuda_activity".into());
                record.pid = Some(users[0]);
                record.comm = comm(&self.proc_dir, users[0]);
                annotations.affected_pids = users;
            }
            None => annotations.attribution = Some("none".into()),
        }
        if let Some(pid) = record.pid {
            // XIDs are rare: the pod folder is read fresh for each.
            let mut pods = PodNames::new(&self.pod_log_dir);
            record.annotations.workload =
                read_workload(&self.proc_dir, &mut pods, pid).map(Arc::new);
        }
    }
}

/// Whether `pid` has `file` open.
fn holds_file(proc_dir: &Path, pid: i32, file: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(proc_dir.join(pid.to_string()).join("fd")) else {
        return false;
    };
    entries
        .filter_map(Result::ok)
        .any(|entry| std::fs::read_link(entry.path()).is_ok_and(|target| target == file))
}

fn comm(proc_dir: &Path, pid: i32) -> Option<String> {
    std::fs::read_to_string(proc_dir.join(pid.to_string()).join("comm"))
        .ok()
        .map(|c| c.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuship_sinks::schema::{GpuIdentity, XidSource};

    const CONTAINER: &str = "4f3c1b2a9d8e7f60123456789abcdef0123456789abcdef0123456789abcdef0";

    fn fake_proc(pids: &[(i32, &str, bool)], device: &Path) -> tempfile::TempDir {
        let proc = tempfile::tempdir().unwrap();
        for &(pid, comm, holds) in pids {
            let dir = proc.path().join(pid.to_string());
            std::fs::create_dir_all(dir.join("fd")).unwrap();
            std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(
                dir.join("cgroup"),
                format!("0::/system.slice/docker-{CONTAINER}.scope\n"),
            )
            .unwrap();
            if holds {
                std::os::unix::fs::symlink(device, dir.join("fd").join("7")).unwrap();
            }
            std::os::unix::fs::symlink("/dev/null", dir.join("fd").join("0")).unwrap();
        }
        proc
    }

    fn xid_on_gpu(pid: Option<i32>) -> XidRecord {
        XidRecord {
            time_ns: 100_000,
            code: 31,
            pid,
            gpu: Some(Arc::new(GpuIdentity {
                uuid: "GPU-1".into(),
                model: "H100".into(),
                index: 0,
                minor: Some(0),
            })),
            ..XidRecord::new(XidSource::Tracepoint)
        }
    }

    #[test]
    fn without_the_log_the_recent_cuda_users_of_the_gpu_are_attributed() {
        let dev = tempfile::tempdir().unwrap();
        let device = dev.path().join("nvidia0");
        let proc = fake_proc(
            &[
                (10, "trainer", true),
                (11, "idle", false),
                (12, "old", true),
            ],
            &device,
        );
        let activity = CudaActivity::default();
        activity.record([(10, 90_000), (11, 95_000), (12, 1_000)]);
        let attributor = Attributor::new(proc.path(), dev.path(), dev.path().join("pods"), 50_000);
        let mut record = xid_on_gpu(None);
        attributor.attribute(&mut record, &activity);
        assert_eq!(
            record.annotations.attribution.as_deref(),
            Some("cuda_activity")
        );
        assert_eq!(record.pid, Some(10));
        assert_eq!(record.comm.as_deref(), Some("trainer"));
        assert_eq!(record.annotations.affected_pids, [10]);
        let workload = record.annotations.workload.as_deref().unwrap();
        assert_eq!(workload.container_id.as_deref(), Some(CONTAINER));
    }

    #[test]
    fn the_log_wins_and_nothing_found_says_none() {
        let dev = tempfile::tempdir().unwrap();
        let device = dev.path().join("nvidia0");
        let proc = fake_proc(&[(10, "trainer", true), (20, "python3", false)], &device);
        let activity = CudaActivity::default();
        activity.record([(10, 90_000)]);
        let attributor = Attributor::new(proc.path(), dev.path(), dev.path().join("pods"), 50_000);
        let mut from_log = xid_on_gpu(Some(20));
        attributor.attribute(&mut from_log, &activity);
        assert_eq!(
            from_log.annotations.attribution.as_deref(),
            Some("driver_log")
        );
        assert_eq!(from_log.annotations.affected_pids, [20, 10]);
        let mut nobody = xid_on_gpu(None);
        attributor.attribute(&mut nobody, &CudaActivity::default());
        assert_eq!(nobody.annotations.attribution.as_deref(), Some("none"));
        assert_eq!(nobody.pid, None);
        assert!(nobody.annotations.affected_pids.is_empty());
    }
}
