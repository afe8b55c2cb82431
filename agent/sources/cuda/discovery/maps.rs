//! Which CUDA driver libraries a process maps, read from `/proc/<pid>/maps`, and the path
//! through which the agent reaches each of them from its own mount namespace.
//!
//! A uprobe attaches to a file (its inode), so what matters is the file the process mapped,
//! wherever its mount namespace put it: the NVIDIA container toolkit mounts the host's
//! libcuda into each container at the container's own path, and a job may carry its own copy.
//! `/proc/<pid>/root/<path>` reaches the file as the process sees it (hostPID and
//! CAP_SYS_PTRACE); `/proc/<pid>/map_files/<range>` reaches the mapping itself, even of a file
//! since deleted or replaced (a driver upgrade), where the kernel allows it (CAP_SYS_ADMIN).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The start of the file name of every libcuda (`libcuda.so`, `libcuda.so.1`,
/// `libcuda.so.580.95.05`).
const LIBRARY_PREFIX: &str = "libcuda.so";

/// How much of a maps file is read at most: a process with a larger map (millions of
/// mappings) is read up to here.
const MAX_MAPS_BYTES: u64 = 64 * 1024 * 1024;

/// A file as the kernel knows it: device and inode, as `/proc/<pid>/maps` gives them (the
/// inode a uprobe attaches to, under any overlay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    /// `st_dev` of the file's filesystem.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

impl std::fmt::Display for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:x}:{:x}:{}",
            libc::major(self.dev),
            libc::minor(self.dev),
            self.ino
        )
    }
}

/// One CUDA library a process maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedLibrary {
    /// The file.
    pub key: FileKey,
    /// Its path inside the process's mount namespace (without ` (deleted)`).
    pub path: PathBuf,
    /// True when the file was deleted or replaced after the process mapped it.
    pub deleted: bool,
    /// The address range of its first mapping (`/proc/<pid>/map_files/<range>`).
    pub range: String,
}

/// The CUDA libraries `pid` maps, one per file, in the order of their first mapping. An
/// unreadable maps file (the process ended, or no permission) is an error for the caller to
/// skip.
pub fn mapped_libraries(proc_dir: &Path, pid: u32) -> std::io::Result<Vec<MappedLibrary>> {
    let file = File::open(proc_dir.join(pid.to_string()).join("maps"))?;
    let mut reader = BufReader::new(std::io::Read::take(file, MAX_MAPS_BYTES));
    let mut found: Vec<MappedLibrary> = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let Some(library) = parse_line(&line) else {
            continue;
        };
        if !found.iter().any(|known| known.key == library.key) {
            found.push(library);
        }
    }
    Ok(found)
}

/// A maps line (`start-end perms offset major:minor inode path`) that maps a CUDA library.
fn parse_line(line: &[u8]) -> Option<MappedLibrary> {
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\n');
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let _perms = fields.next()?;
    let _offset = fields.next()?;
    let device = fields.next()?;
    let inode: u64 = fields.next()?.parse().ok()?;
    let path = fields.next()?.trim_start_matches(' ');
    if inode == 0 || !path.starts_with('/') {
        return None;
    }
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(path) => (path, true),
        None => (path, false),
    };
    let name = Path::new(path).file_name()?.to_str()?;
    if !name.starts_with(LIBRARY_PREFIX) {
        return None;
    }
    let (major, minor) = device.split_once(':')?;
    let major = u32::from_str_radix(major, 16).ok()?;
    let minor = u32::from_str_radix(minor, 16).ok()?;
    Some(MappedLibrary {
        key: FileKey {
            dev: libc::makedev(major, minor),
            ino: inode,
        },
        path: PathBuf::from(path),
        deleted,
        range: range.to_string(),
    })
}

/// A path in the agent's own mount namespace to `library` as `pid` maps it: through the
/// process's root when the file there is still the one mapped (same inode), else through
/// the mapping itself. `None` when neither can be opened (say why in the error).
pub fn reachable_path(
    proc_dir: &Path,
    pid: u32,
    library: &MappedLibrary,
) -> Result<PathBuf, String> {
    let process = proc_dir.join(pid.to_string());
    let mut tried = Vec::new();
    if !library.deleted {
        let relative = library.path.strip_prefix("/").unwrap_or(&library.path);
        let through_root = process.join("root").join(relative);
        match std::fs::metadata(&through_root) {
            Ok(meta) if meta.is_file() && meta.ino() == library.key.ino => return Ok(through_root),
            Ok(meta) => tried.push(format!(
                "{}: inode {} is not the mapped {}",
                through_root.display(),
                meta.ino(),
                library.key.ino
            )),
            Err(err) => tried.push(format!("{}: {err}", through_root.display())),
        }
    }
    let through_mapping = process.join("map_files").join(&library.range);
    match std::fs::metadata(&through_mapping) {
        Ok(meta) if meta.is_file() => Ok(through_mapping),
        Ok(_) => {
            tried.push(format!("{}: not a file", through_mapping.display()));
            Err(tried.join("; "))
        }
        Err(err) => {
            tried.push(format!("{}: {err}", through_mapping.display()));
            Err(tried.join("; "))
        }
    }
}

/// Every process id under `proc_dir`.
pub fn process_ids(proc_dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(proc_dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_library_mapping_with_its_device_and_inode() {
        let line = b"7f2a10000000-7f2a10200000 r-xp 00100000 fd:01 1311747                    /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05\n";
        let library = parse_line(line).unwrap();
        assert_eq!(
            library,
            MappedLibrary {
                key: FileKey {
                    dev: libc::makedev(0xfd, 0x01),
                    ino: 1311747
                },
                path: PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05"),
                deleted: false,
                range: "7f2a10000000-7f2a10200000".into(),
            }
        );
        assert_eq!(library.key.to_string(), "fd:1:1311747");
    }

    #[test]
    fn a_deleted_file_keeps_its_path_and_is_marked() {
        let line = b"7f00-7f10 r--p 00000000 00:2a 77 /tmp/job/libcuda.so.1 (deleted)";
        let library = parse_line(line).unwrap();
        assert!(library.deleted);
        assert_eq!(library.path, PathBuf::from("/tmp/job/libcuda.so.1"));
        assert_eq!(library.key.dev, libc::makedev(0, 0x2a));
    }

    #[test]
    fn other_mappings_and_odd_lines_are_not_libraries() {
        for line in [
            &b"7f00-7f10 r--p 00000000 fd:01 12 /usr/lib/x86_64-linux-gnu/libc.so.6"[..],
            b"7f00-7f10 rw-p 00000000 00:00 0 ",
            b"7ffd-7ffe rw-p 00000000 00:00 0                          [stack]",
            b"7f00-7f10 r--p 00000000 fd:01 0 /usr/lib/libcuda.so.1",
            b"7f00-7f10 r--p 00000000 zz:01 12 /usr/lib/libcuda.so.1",
            b"7f00-7f10 r--p 00000000 fd:01 -12 /usr/lib/libcuda.so.1",
            b"7f00-7f10 r--p 00000000 fd:01 12 /usr/lib/not-libcuda.so.1",
            b"7f00-7f10 r--p 00000000 fd:01 12 /usr/lib/libcudart.so.12",
            b"garbage",
            b"",
            b"\xff\xfe 7f00-7f10",
        ] {
            assert_eq!(parse_line(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn names_with_spaces_quotes_and_escapes_are_kept_whole() {
        let line = b"7f00-7f10 r-xp 00000000 fd:01 9 /opt/my \"job\" \x1b[31m/lib/libcuda.so.1";
        let library = parse_line(line).unwrap();
        assert_eq!(
            library.path,
            PathBuf::from("/opt/my \"job\" \x1b[31m/lib/libcuda.so.1")
        );
    }

    #[test]
    fn each_file_is_listed_once_from_a_proc_tree() {
        let proc_dir = tempfile::tempdir().unwrap();
        let pid_dir = proc_dir.path().join("4242");
        std::fs::create_dir(&pid_dir).unwrap();
        std::fs::write(
            pid_dir.join("maps"),
            "1000-2000 r--p 00000000 fd:01 10 /usr/lib/libcuda.so.1\n\
             2000-3000 r-xp 00001000 fd:01 10 /usr/lib/libcuda.so.1\n\
             4000-5000 r-xp 00000000 00:31 99 /run/job/libcuda.so.580\n\
             6000-7000 r-xp 00000000 fd:01 11 /usr/lib/libc.so.6\n",
        )
        .unwrap();
        let libraries = mapped_libraries(proc_dir.path(), 4242).unwrap();
        let keys: Vec<(u64, &str)> = libraries
            .iter()
            .map(|l| (l.key.ino, l.range.as_str()))
            .collect();
        assert_eq!(keys, vec![(10, "1000-2000"), (99, "4000-5000")]);
        assert!(mapped_libraries(proc_dir.path(), 1).is_err());
        std::fs::create_dir(proc_dir.path().join("self-not-a-pid")).unwrap();
        assert_eq!(process_ids(proc_dir.path()), vec![4242]);
    }

    #[test]
    fn a_library_is_reached_through_the_process_root_when_it_is_the_mapped_file() {
        let proc_dir = tempfile::tempdir().unwrap();
        let root = proc_dir.path().join("7/root/usr/lib");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("libcuda.so.1"), b"elf").unwrap();
        let ino = std::fs::metadata(root.join("libcuda.so.1")).unwrap().ino();
        let mut library = MappedLibrary {
            key: FileKey { dev: 0, ino },
            path: "/usr/lib/libcuda.so.1".into(),
            deleted: false,
            range: "1000-2000".into(),
        };
        assert_eq!(
            reachable_path(proc_dir.path(), 7, &library).unwrap(),
            proc_dir.path().join("7/root/usr/lib/libcuda.so.1")
        );
        // Replaced since it was mapped: another inode under the same name is not attached.
        library.key.ino = ino + 1;
        let err = reachable_path(proc_dir.path(), 7, &library).unwrap_err();
        assert!(err.contains("is not the mapped"), "{err}");
        assert!(err.contains("map_files/1000-2000"), "{err}");
        // Through the mapping when the kernel lets us.
        std::fs::create_dir_all(proc_dir.path().join("7/map_files")).unwrap();
        std::fs::write(proc_dir.path().join("7/map_files/1000-2000"), b"elf").unwrap();
        library.deleted = true;
        assert_eq!(
            reachable_path(proc_dir.path(), 7, &library).unwrap(),
            proc_dir.path().join("7/map_files/1000-2000")
        );
    }
}
