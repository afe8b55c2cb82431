//! Container id and Kubernetes pod UID from a process's cgroup path, as the container runtimes
//! name them (cgroup v1 or v2; Docker, containerd, CRI-O, Podman; cgroupfs or systemd driver).

use std::path::Path;

/// Container id and pod UID of `pid`, from `<proc_dir>/<pid>/cgroup`; `(None, None)` when the
/// process is gone or runs outside containers.
pub fn cgroup_ids(proc_dir: &Path, pid: i32) -> (Option<String>, Option<String>) {
    std::fs::read_to_string(proc_dir.join(pid.to_string()).join("cgroup"))
        .map(|text| parse_cgroup(&text))
        .unwrap_or((None, None))
}

/// Reads the ids out of `/proc/<pid>/cgroup` lines.
pub fn parse_cgroup(text: &str) -> (Option<String>, Option<String>) {
    let mut container = None;
    let mut pod = None;
    for line in text.lines() {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        for segment in path.split('/') {
            let name = segment
                .trim_end_matches(".scope")
                .trim_end_matches(".slice");
            let name = ["docker-", "cri-containerd-", "crio-", "libpod-"]
                .iter()
                .find_map(|prefix| name.strip_prefix(prefix))
                .unwrap_or(name);
            if name.len() == 64 && name.chars().all(|c| c.is_ascii_hexdigit()) {
                container = Some(name.to_string());
            }
            if let Some(at) = segment.rfind("pod") {
                // The systemd driver writes the UID with '_' for '-'.
                let uid = segment[at + 3..]
                    .trim_end_matches(".slice")
                    .replace('_', "-");
                if uid.len() == 36 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                    pod = Some(uid);
                }
            }
        }
    }
    (container, pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTAINER: &str = "4f3c1b2a9d8e7f60123456789abcdef0123456789abcdef0123456789abcdef0";

    #[test]
    fn cgroup_paths_of_common_runtimes() {
        let v2 = format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_4a1b_9c8d_7e6f5a4b3c2d.slice/cri-containerd-{CONTAINER}.scope\n");
        assert_eq!(
            parse_cgroup(&v2),
            (
                Some(CONTAINER.into()),
                Some("1b2c3d4e-5f60-4a1b-9c8d-7e6f5a4b3c2d".into())
            )
        );
        let v1 = format!("12:memory:/kubepods/burstable/pod1b2c3d4e-5f60-4a1b-9c8d-7e6f5a4b3c2d/{CONTAINER}\n11:cpu:/\n");
        assert_eq!(
            parse_cgroup(&v1),
            (
                Some(CONTAINER.into()),
                Some("1b2c3d4e-5f60-4a1b-9c8d-7e6f5a4b3c2d".into())
            )
        );
        let docker = format!("0::/system.slice/docker-{CONTAINER}.scope\n");
        assert_eq!(parse_cgroup(&docker), (Some(CONTAINER.into()), None));
        assert_eq!(
            parse_cgroup("0::/user.slice/user-0.slice/session-3.scope\n"),
            (None, None)
        );
    }
}
