//! Which container and Kubernetes pod a process runs in, for every row it causes. The container
//! id and pod UID come from the process's cgroup path; the pod's name and namespace from the
//! kubelet's pod log folders, `/var/log/pods/<namespace>_<name>_<uid>`, which every kubelet
//! writes before it starts a pod's containers. Answers are cached per process, so the per-event
//! cost is one map lookup (none while the same process keeps calling).
//!
//! Limits: a process is looked up when its first row is decoded, so one that exits within the
//! drain interval of its first call is written without a workload; a pid reused within the
//! cache lifetime keeps its predecessor's answer until the cache expires.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuship_sinks::schema::Workload;

use super::cgroup::cgroup_ids;

/// How long a process's answer is kept before it is read again.
const CACHE_LIFETIME: Duration = Duration::from_secs(30);
/// The pod folder is read again for an unknown UID at most this often.
const RESCAN_INTERVAL: Duration = Duration::from_secs(2);
/// Bound on cached processes between expiries (a fork storm must not grow memory unbounded).
const MAX_CACHED_PROCESSES: usize = 65_536;

/// Pod UID -> (namespace, name), read from the kubelet's pod log folder.
#[derive(Debug)]
pub struct PodNames {
    dir: PathBuf,
    by_uid: HashMap<String, (Arc<str>, Arc<str>)>,
    scanned_at: Option<Instant>,
}

impl PodNames {
    /// Names from the folders under `dir` (usually `/var/log/pods`); read on first use.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            by_uid: HashMap::new(),
            scanned_at: None,
        }
    }

    /// (namespace, name) of the pod with `uid`, reading the folder again when the UID is new
    /// and the last read is older than [`RESCAN_INTERVAL`].
    pub fn name_of(&mut self, uid: &str) -> Option<(Arc<str>, Arc<str>)> {
        if let Some(found) = self.by_uid.get(uid) {
            return Some(found.clone());
        }
        if self
            .scanned_at
            .is_some_and(|at| at.elapsed() < RESCAN_INTERVAL)
        {
            return None;
        }
        self.scan();
        self.by_uid.get(uid).cloned()
    }

    fn scan(&mut self) {
        self.scanned_at = Some(Instant::now());
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        self.by_uid = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let folder = entry.file_name().to_string_lossy().into_owned();
                let (namespace, name, uid) = parse_pod_folder(&folder)?;
                Some((uid.to_string(), (namespace.into(), name.into())))
            })
            .collect();
    }
}

/// `<namespace>_<name>_<uid>` -> its parts. Namespaces and pod names are DNS names, which
/// cannot hold `_`, so the split is exact.
pub fn parse_pod_folder(folder: &str) -> Option<(&str, &str, &str)> {
    let mut parts = folder.split('_');
    let (namespace, name, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let valid = parts.next().is_none()
        && !namespace.is_empty()
        && !name.is_empty()
        && uid.len() == 36
        && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    valid.then_some((namespace, name, uid))
}

/// The workload of `pid` read now; `None` outside containers or when the process is gone.
pub fn read_workload(proc_dir: &Path, pods: &mut PodNames, pid: i32) -> Option<Workload> {
    let (container_id, pod_uid) = cgroup_ids(proc_dir, pid);
    let (pod_namespace, pod_name) = match pod_uid.as_deref().and_then(|uid| pods.name_of(uid)) {
        Some((namespace, name)) => (Some(namespace), Some(name)),
        None => (None, None),
    };
    let workload = Workload {
        container_id: container_id.map(Into::into),
        pod_uid: pod_uid.map(Into::into),
        pod_name,
        pod_namespace,
    };
    (!workload.is_empty()).then_some(workload)
}

/// Cached [`read_workload`] for the consumer's hot path.
#[derive(Debug)]
pub struct WorkloadResolver {
    proc_dir: PathBuf,
    pods: PodNames,
    by_pid: HashMap<i32, Option<Arc<Workload>>>,
    last: Option<(i32, Option<Arc<Workload>>)>,
    cached_since: Instant,
}

impl WorkloadResolver {
    /// Reads processes under `proc_dir` and pod folders under `pod_log_dir`.
    pub fn new(proc_dir: impl Into<PathBuf>, pod_log_dir: impl Into<PathBuf>) -> Self {
        Self {
            proc_dir: proc_dir.into(),
            pods: PodNames::new(pod_log_dir),
            by_pid: HashMap::new(),
            last: None,
            cached_since: Instant::now(),
        }
    }

    /// The workload of `pid`, from the cache when it has one. Borrowed: while one process
    /// keeps calling, a row costs one comparison and no reference count.
    #[inline]
    pub fn resolve(&mut self, pid: i32) -> Option<&Arc<Workload>> {
        if !matches!(&self.last, Some((last_pid, _)) if *last_pid == pid) {
            let workload = self.lookup(pid);
            self.last = Some((pid, workload));
        }
        self.last
            .as_ref()
            .and_then(|(_, workload)| workload.as_ref())
    }

    fn lookup(&mut self, pid: i32) -> Option<Arc<Workload>> {
        if self.by_pid.len() >= MAX_CACHED_PROCESSES {
            self.by_pid.clear();
        }
        match self.by_pid.get(&pid) {
            Some(cached) => cached.clone(),
            None => {
                let read = read_workload(&self.proc_dir, &mut self.pods, pid).map(Arc::new);
                self.by_pid.insert(pid, read.clone());
                read
            }
        }
    }

    /// Forgets every answer once the cache is [`CACHE_LIFETIME`] old (called between drains).
    pub fn expire_if_due(&mut self, now: Instant) {
        if now.duration_since(self.cached_since) >= CACHE_LIFETIME {
            self.by_pid.clear();
            self.last = None;
            self.cached_since = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "1b2c3d4e-5f60-4a1b-9c8d-7e6f5a4b3c2d";
    const CONTAINER: &str = "4f3c1b2a9d8e7f60123456789abcdef0123456789abcdef0123456789abcdef0";

    fn fake_node(cgroups: &[(i32, String)]) -> (tempfile::TempDir, tempfile::TempDir) {
        let proc = tempfile::tempdir().unwrap();
        for (pid, cgroup) in cgroups {
            let dir = proc.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cgroup"), cgroup).unwrap();
        }
        let pods = tempfile::tempdir().unwrap();
        std::fs::create_dir(pods.path().join(format!("ml-team_trainer-0_{UID}"))).unwrap();
        std::fs::create_dir(pods.path().join("not-a-pod")).unwrap();
        (proc, pods)
    }

    fn kube_cgroup() -> String {
        let systemd_uid = UID.replace('-', "_");
        format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{systemd_uid}.slice/cri-containerd-{CONTAINER}.scope\n"
        )
    }

    #[test]
    fn pod_folders_split_into_namespace_name_and_uid() {
        assert_eq!(
            parse_pod_folder(&format!("kube-system_nvidia-dcgm-x7k2p_{UID}")),
            Some(("kube-system", "nvidia-dcgm-x7k2p", UID))
        );
        assert_eq!(parse_pod_folder("default_web_not-a-uid"), None);
        assert_eq!(parse_pod_folder(&format!("a_b_c_{UID}")), None);
        assert_eq!(parse_pod_folder(&format!("_web_{UID}")), None);
    }

    #[test]
    fn a_pod_process_gets_container_uid_name_and_namespace() {
        let (proc, pods) = fake_node(&[
            (10, kube_cgroup()),
            (11, format!("0::/system.slice/docker-{CONTAINER}.scope\n")),
            (12, "0::/user.slice/session-3.scope\n".into()),
        ]);
        let mut resolver = WorkloadResolver::new(proc.path(), pods.path());
        let pod = resolver.resolve(10).cloned().expect("pod process");
        assert_eq!(pod.container_id.as_deref(), Some(CONTAINER));
        assert_eq!(pod.pod_uid.as_deref(), Some(UID));
        assert_eq!(pod.pod_name.as_deref(), Some("trainer-0"));
        assert_eq!(pod.pod_namespace.as_deref(), Some("ml-team"));
        let docker = resolver.resolve(11).cloned().expect("container process");
        assert_eq!(docker.container_id.as_deref(), Some(CONTAINER));
        assert_eq!(
            (docker.pod_uid.clone(), docker.pod_name.clone()),
            (None, None)
        );
        assert_eq!(resolver.resolve(12), None, "host process");
        assert_eq!(resolver.resolve(13), None, "gone process");
    }

    #[test]
    fn answers_are_cached_until_the_cache_expires() {
        let (proc, pods) = fake_node(&[(10, kube_cgroup())]);
        let mut resolver = WorkloadResolver::new(proc.path(), pods.path());
        assert!(resolver.resolve(10).is_some());
        std::fs::remove_dir_all(proc.path().join("10")).unwrap();
        assert!(resolver.resolve(10).is_some(), "cached");
        resolver.expire_if_due(Instant::now());
        assert!(resolver.resolve(10).is_some(), "not yet expired");
        resolver.expire_if_due(Instant::now() + CACHE_LIFETIME);
        assert_eq!(resolver.resolve(10), None, "read again after expiry");
    }

    #[test]
    fn without_a_pod_folder_the_uid_still_comes_from_the_cgroup() {
        let (proc, _pods) = fake_node(&[(10, kube_cgroup())]);
        let mut resolver = WorkloadResolver::new(proc.path(), "/nonexistent/pods");
        let workload = resolver.resolve(10).unwrap();
        assert_eq!(workload.pod_uid.as_deref(), Some(UID));
        assert_eq!(workload.pod_name, None);
    }
}
