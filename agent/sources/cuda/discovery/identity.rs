//! A file's identity as `/proc/<pid>/maps` shows it, for a path the agent opens itself.
//!
//! `stat` is not enough: on overlayfs (a container image, or the agent's own root in a
//! container) `stat` answers with the overlay's device and inode, while the kernel maps, and
//! uprobes attach to, the file underneath; maps lines show that one. So the agent maps one
//! page of the file and reads its own maps line for it: the same answer every process's maps
//! give, and so one attach per file however it is reached.

use std::os::fd::AsRawFd;
use std::path::Path;

use super::maps::FileKey;

/// The identity of the file at `path` as maps lines give it. Falls back to `stat` for a file
/// that cannot be mapped (empty).
pub fn mapped_file_key(path: &Path) -> std::io::Result<FileKey> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    let stat_key = || {
        use std::os::unix::fs::MetadataExt;
        FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    };
    if meta.len() == 0 {
        return Ok(stat_key());
    }
    // SAFETY: a private, read-only mapping of one page of a file we hold open; nothing reads
    // through the pointer, which is only compared with maps lines and unmapped below.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            1,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if address == libc::MAP_FAILED {
        return Ok(stat_key());
    }
    let key = own_mapping_key(address as usize);
    // SAFETY: the mapping made above, of one page (the length rounds up), unmapped once.
    unsafe { libc::munmap(address, 1) };
    Ok(key?.unwrap_or_else(stat_key))
}

/// The device and inode of this process's mapping that starts at `address`.
fn own_mapping_key(address: usize) -> std::io::Result<Option<FileKey>> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let start = format!("{address:x}-");
    Ok(maps
        .lines()
        .find(|line| line.starts_with(&start))
        .and_then(parse_dev_ino))
}

fn parse_dev_ino(line: &str) -> Option<FileKey> {
    let mut fields = line.split_ascii_whitespace().skip(3);
    let (major, minor) = fields.next()?.split_once(':')?;
    let ino = fields.next()?.parse().ok()?;
    Some(FileKey {
        dev: libc::makedev(
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        ),
        ino,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_plain_file_has_its_stat_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libcuda.so.1");
        std::fs::write(&path, vec![7u8; 10_000]).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let key = mapped_file_key(&path).unwrap();
        assert_eq!(
            key,
            FileKey {
                dev: meta.dev(),
                ino: meta.ino()
            }
        );
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(
            mapped_file_key(&empty).unwrap().ino,
            std::fs::metadata(&empty).unwrap().ino()
        );
        assert!(mapped_file_key(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn maps_fields_parse() {
        assert_eq!(
            parse_dev_ino("7f00-7f01 r--p 00000000 fd:0a 123 /x"),
            Some(FileKey {
                dev: libc::makedev(0xfd, 0x0a),
                ino: 123
            })
        );
        assert_eq!(parse_dev_ino("7f00-7f01 r--p"), None);
    }
}
