//! What one lake command may use: memory (`--memory-limit`) and time (`--timeout`). The engine
//! holds its sorts, joins, aggregations, the answer it collects and the strings `repeat`,
//! `lpad` and `rpad` would make ([`crate::bounded_udf`]) in one pool of `--memory-limit`; a query
//! that needs more fails with [`LIMIT_REACHED`] in its message instead of growing (docs/views.md,
//! "Limits"). The command stops with the same words when `--timeout` has passed.

use std::time::Duration;

use clap::Args;

/// Words every error of a reached limit starts with, so people and scripts can tell it from a
/// damaged file.
pub const LIMIT_REACHED: &str = "limit reached";

/// The default `--timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The default memory limit is this fraction of the machine's memory (`MemTotal`) ...
const DEFAULT_MEMORY_FRACTION: u64 = 4;
/// ... but no less than this (a machine whose memory cannot be read gets this) ...
const MIN_DEFAULT_MEMORY: u64 = 256 << 20;
/// ... and no more than this.
const MAX_DEFAULT_MEMORY: u64 = 8 << 30;

/// `--memory-limit` and `--timeout`, shared by every lake command.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Memory the query engine may hold (sorts, joins, aggregations, the answer, strings it
    /// builds), e.g. 512MiB, 2GiB; default a quarter of the machine's memory, between 256 MiB
    /// and 8 GiB. A query that needs more stops with an error (exit status 1).
    #[arg(long, value_parser = parse_size)]
    pub memory_limit: Option<u64>,
    /// How long the command may run (e.g. 90s, 10m); it stops with an error (exit status 1)
    /// when this has passed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "300s")]
    pub timeout: Duration,
}

/// The limits of one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes the engine's pool holds at most.
    pub memory: usize,
    /// How long the command may run.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: usize::try_from(default_memory()).unwrap_or(usize::MAX),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl LimitArgs {
    /// The limits these flags ask for.
    pub fn limits(&self) -> Limits {
        let memory = self.memory_limit.unwrap_or_else(default_memory);
        Limits {
            memory: usize::try_from(memory).unwrap_or(usize::MAX),
            timeout: self.timeout,
        }
    }
}

/// A quarter of `MemTotal`, between [`MIN_DEFAULT_MEMORY`] and [`MAX_DEFAULT_MEMORY`].
pub fn default_memory() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total(&text))
        .unwrap_or(0);
    (total / DEFAULT_MEMORY_FRACTION).clamp(MIN_DEFAULT_MEMORY, MAX_DEFAULT_MEMORY)
}

/// `MemTotal` of /proc/meminfo, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A size people write: `512MiB`, `2GiB`, `1G` (powers of 1,000), `1048576` (bytes). At
/// least 1 MiB: a smaller pool cannot run any query.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 512MiB, 2GiB)"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" | "ki" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" | "mi" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" | "gi" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" | "ti" => 1 << 40,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)"
            ))
        }
    };
    let bytes = number * scale as f64;
    if !(bytes.is_finite() && bytes < u64::MAX as f64) {
        return Err(format!("{text:?} is too large"));
    }
    let bytes = bytes as u64;
    if bytes < 1 << 20 {
        return Err(format!("{text:?} is below the smallest memory limit, 1MiB"));
    }
    Ok(bytes)
}

/// `bytes` for people (`256.0 MiB`).
pub fn human(bytes: usize) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", units[unit])
}

/// The system allocator, saying in words what failed when it refuses an allocation (Rust then
/// aborts): which program, how much, and the flag that bounds the engine. The limits above keep
/// the lake's own reads and the engine under `--memory-limit`; this is for what is left.
#[derive(Debug, Clone, Copy)]
pub struct LoudAllocator;

impl LoudAllocator {
    fn refused(size: usize) {
        use std::io::Write;
        // No allocation here: a fixed buffer on the stack, one write(2).
        let mut line = [0u8; 200];
        let mut cursor = std::io::Cursor::new(&mut line[..]);
        let _ = writeln!(
            cursor,
            "gpuship-lake: out of memory: the system refused {size} bytes; \
             lower --memory-limit or narrow the query"
        );
        let len = usize::try_from(cursor.position()).unwrap_or(0);
        let _ = std::io::stderr().write_all(&line[..len]);
    }
}

// SAFETY: every call is passed to `System` unchanged; only a null answer is reported.
unsafe impl std::alloc::GlobalAlloc for LoudAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as GlobalAlloc requires.
        let ptr = unsafe { std::alloc::System.alloc(layout) };
        if ptr.is_null() {
            Self::refused(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let ptr = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if ptr.is_null() {
            Self::refused(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`.
        let new = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        if new.is_null() {
            Self::refused(new_size);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_people_write() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("2G"), Ok(2_000_000_000));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size(" 300 mb "), Ok(300_000_000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("1KiB").unwrap_err().contains("smallest"));
        assert!(parse_size("1e30").is_err());
    }

    #[test]
    fn the_default_is_a_quarter_of_memtotal_within_bounds() {
        let meminfo = "MemTotal:       16384000 kB\nMemFree: 1 kB\n";
        assert_eq!(mem_total(meminfo), Some(16_384_000 * 1024));
        assert_eq!(mem_total("nothing"), None);
        let memory = default_memory();
        assert!((MIN_DEFAULT_MEMORY..=MAX_DEFAULT_MEMORY).contains(&memory));
        assert_eq!(human(256 << 20), "256.0 MiB");
        assert_eq!(human(1536), "1.5 KiB");
    }
}
