//! Reading a process's CPU time and memory from /proc, for the benches that measure processes.

/// utime + stime in seconds, of this process (`None`) or of `pid`.
pub fn cpu_seconds(pid: Option<u32>) -> f64 {
    let path = pid.map_or("/proc/self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

/// Peak resident memory (`VmHWM`) of `pid` in KiB; 0 when it cannot be read.
#[allow(dead_code)] // not every bench that includes this file reads memory
pub fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find_map(|l| {
                l.strip_prefix("VmHWM:")
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Current resident memory of `pid` in KiB: `(VmRSS, RssAnon, RssFile)`; zeros when it cannot
/// be read. Anonymous memory is the heap and stacks; file memory is mapped code and files.
#[allow(dead_code)] // not every bench that includes this file reads memory
pub fn rss_kib(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}
