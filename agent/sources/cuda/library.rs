//! Finding libcuda.so.1 and the file offsets of its exported functions.
//!
//! Uprobes attach to (inode, file offset), so the same library reached through two paths must
//! be probed once: candidates are canonicalized and deduplicated by device and inode.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// Folders searched by `libraries = ["auto"]` after the ld.so cache.
pub const AUTO_SEARCH_DIRS: &[&str] = &[
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
    "/lib",
    "/usr/local/cuda/compat",
    // The GPU Operator's driver container, as the host sees it.
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    "/run/nvidia/driver/usr/lib64",
];

const LIBRARY_NAME: &str = "libcuda.so.1";

/// Errors reading a library's symbols.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The library.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not an ELF shared object we can read.
    #[error("parsing {path} as ELF: {source}")]
    Elf {
        /// The library.
        path: PathBuf,
        /// Parser error.
        source: object::Error,
    },
}

/// The libraries to probe for the configured `libraries` list, unique by inode.
/// Paths that do not exist are reported in the second list.
pub fn resolve_libraries(configured: &[String]) -> (Vec<PathBuf>, Vec<String>) {
    let mut candidates: Vec<PathBuf> = Vec::new();
    let mut missing = Vec::new();
    for entry in configured {
        if entry == "auto" {
            candidates.extend(ld_cache_paths());
            candidates.extend(
                AUTO_SEARCH_DIRS
                    .iter()
                    .map(|dir| Path::new(dir).join(LIBRARY_NAME)),
            );
        } else if Path::new(entry).exists() {
            candidates.push(PathBuf::from(entry));
        } else {
            missing.push(entry.clone());
        }
    }
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    for candidate in candidates {
        let Ok(canonical) = candidate.canonicalize() else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(&canonical) else {
            continue;
        };
        if meta.is_file() && seen.insert((meta.dev(), meta.ino())) {
            found.push(canonical);
        }
    }
    (found, missing)
}

/// libcuda.so.1 paths the dynamic linker's cache knows (`ldconfig -p`).
fn ld_cache_paths() -> Vec<PathBuf> {
    let output = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .iter()
        .find_map(|cmd| Command::new(cmd).arg("-p").output().ok());
    let Some(output) = output else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.trim_start().starts_with(LIBRARY_NAME))
        .filter_map(|line| line.split("=> ").nth(1))
        .map(|path| PathBuf::from(path.trim()))
        .collect()
}

/// An exported function and where its first instruction is in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedFunction {
    /// Symbol name without version.
    pub name: String,
    /// File offset, what a uprobe attaches to.
    pub file_offset: u64,
}

/// Every defined, exported function of the shared object at `path`, sorted by name.
///
/// The file is read in the ranges the parser asks for (headers, segments, the dynamic symbol
/// and string tables), not whole: libcuda of driver 580 is about 100 MB, and reading it into
/// memory made that the agent's peak RSS. Not mapped either: a file truncated while mapped
/// would kill the agent with SIGBUS; a read of a truncated file is an error.
pub fn exported_functions(path: &Path) -> Result<Vec<ExportedFunction>, LibraryError> {
    let opened = std::fs::File::open(path).map_err(|source| LibraryError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let data = object::ReadCache::new(opened);
    let file = object::File::parse(&data).map_err(|source| LibraryError::Elf {
        path: path.to_path_buf(),
        source,
    })?;
    let segments: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|seg| (seg.address(), seg.size(), seg.file_range().0))
        .collect();
    let mut functions: Vec<ExportedFunction> = file
        .dynamic_symbols()
        .filter(|sym| sym.kind() == SymbolKind::Text && sym.is_definition() && sym.is_global())
        .filter_map(|sym| {
            let name = sym.name().ok()?.to_string();
            let address = sym.address();
            let (seg_addr, _, seg_offset) = segments
                .iter()
                .find(|(start, size, _)| address >= *start && address < start + size)?;
            Some(ExportedFunction {
                name,
                file_offset: address - seg_addr + seg_offset,
            })
        })
        .collect();
    functions.sort_by(|a, b| a.name.cmp(&b.name));
    functions.dedup_by(|a, b| a.name == b.name);
    Ok(functions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_exported_functions_of_the_c_library() {
        let libc = resolve_libraries(&["/lib/x86_64-linux-gnu/libc.so.6".to_string()]).0;
        assert_eq!(libc.len(), 1);
        let functions = exported_functions(&libc[0]).unwrap();
        let malloc = functions
            .iter()
            .find(|f| f.name == "malloc")
            .expect("libc exports malloc");
        assert!(malloc.file_offset > 0);
        assert!(functions.iter().all(|f| !f.name.contains('@')));
    }

    #[test]
    fn missing_paths_are_reported_and_duplicates_removed() {
        let configured = vec![
            "/lib/x86_64-linux-gnu/libc.so.6".to_string(),
            "/usr/lib/x86_64-linux-gnu/libc.so.6".to_string(),
            "/nonexistent/libcuda.so.1".to_string(),
        ];
        let (found, missing) = resolve_libraries(&configured);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(missing, vec!["/nonexistent/libcuda.so.1".to_string()]);
    }

    #[test]
    fn non_elf_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libcuda.so.1");
        std::fs::write(&path, b"not an elf").unwrap();
        let err = exported_functions(&path).unwrap_err().to_string();
        assert!(
            err.contains("parsing") && err.contains("libcuda.so.1"),
            "{err}"
        );
    }
}
