//! One kernel's name as a process gave it to the driver: the mangled name, its demangled form,
//! and how a name the probe cut short is completed from the process's memory.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use cpp_demangle::{DemangleOptions, ParseOptions, Symbol};

/// Longest name read from a process's memory when the probe's copy was cut (the probe keeps
/// `GPUSHIP_KERNEL_NAME_LEN` bytes; templated C++ kernels reach a few KiB).
pub const MAX_NAME_BYTES: usize = 16 * 1024;

/// The name every launch of a handle made before the agent started (or whose name was not
/// kept) gets.
pub const UNKNOWN: &str = "unknown";

/// A kernel's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelName {
    /// As the process passed it (`_Z10wild_writePi`); invalid UTF-8 replaced.
    pub mangled: Box<str>,
    /// Demangled (`wild_write(int*)`); the mangled name itself when it is not a mangled C++
    /// name (`extern "C"` kernels) or does not demangle.
    pub demangled: Box<str>,
}

impl KernelName {
    /// The names of `mangled`.
    pub fn new(mangled: &str) -> Self {
        let demangled = demangle(mangled).unwrap_or_else(|| mangled.to_string());
        Self {
            mangled: mangled.into(),
            demangled: demangled.into_boxed_str(),
        }
    }

    /// Bytes this name keeps on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.mangled.len() + self.demangled.len()
    }
}

/// How deep the demangler may recurse. Real kernel names nest a few dozen levels; 256 let a
/// hostile name (`_Z1fPFvPFv...`) overflow a 2 MiB thread stack in a debug build, 128 did not.
const RECURSION_LIMIT: u32 = 96;

/// Longest name demangled, and longest demangled form kept: a crafted name can make the
/// demangler's output (and time) grow far beyond its input; past these the mangled name stands.
const MAX_DEMANGLE_INPUT: usize = 8 * 1024;
const MAX_DEMANGLED: usize = 64 * 1024;

/// The Itanium C++ demangling of `name`, or None when it is not a mangled name (or is too long
/// to demangle safely). The parser's recursion is bounded, so a hostile name costs an error,
/// never the agent's stack.
fn demangle(name: &str) -> Option<String> {
    if !name.starts_with("_Z") || name.len() > MAX_DEMANGLE_INPUT {
        return None;
    }
    let parse = ParseOptions::default().recursion_limit(RECURSION_LIMIT);
    let symbol = Symbol::new_with_options(name, &parse).ok()?;
    let options = DemangleOptions::default().recursion_limit(RECURSION_LIMIT);
    symbol
        .demangle_with_options(&options)
        .ok()
        .filter(|demangled| demangled.len() <= MAX_DEMANGLED)
}

/// The NUL-terminated string at `address` in process `pid`'s memory (`<proc_dir>/<pid>/mem`),
/// up to `MAX_NAME_BYTES`; None when it cannot be read (the process is gone, or the address is
/// not mapped) or has no NUL within the bound.
pub fn read_process_string(proc_dir: &Path, pid: i32, address: u64) -> Option<Vec<u8>> {
    let file = File::open(proc_dir.join(pid.to_string()).join("mem")).ok()?;
    let mut bytes = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    while bytes.len() < MAX_NAME_BYTES {
        let offset = address.checked_add(bytes.len() as u64)?;
        let read = file.read_at(&mut chunk, offset).ok()?;
        if read == 0 {
            return None;
        }
        if let Some(end) = chunk[..read].iter().position(|&b| b == 0) {
            bytes.extend_from_slice(&chunk[..end]);
            return Some(bytes);
        }
        bytes.extend_from_slice(&chunk[..read]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mangled_names_are_demangled_and_others_kept() {
        let name = KernelName::new("_Z10wild_writePi");
        assert_eq!(&*name.demangled, "wild_write(int*)");
        let name = KernelName::new(
            "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
        );
        assert_eq!(
            &*name.demangled,
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, (unsigned long)1> >(int, at::native::FillFunctor<float>, std::array<char*, (unsigned long)1>)"
        );
        assert_eq!(&*KernelName::new("wild_write").demangled, "wild_write");
        // Looks mangled, is not: kept as given.
        assert_eq!(&*KernelName::new("_Z!broken").demangled, "_Z!broken");
        assert_eq!(&*KernelName::new("").demangled, "");
    }

    /// Run on a 2 MiB stack (a spawned thread's default, the consumer's), in the debug build
    /// too, where frames are largest.
    #[test]
    fn hostile_names_cost_an_error_not_the_stack() {
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(hostile_names)
            .unwrap()
            .join()
            .unwrap();
    }

    fn hostile_names() {
        // Deep nesting that would recurse once per level.
        let deep = format!("_Z1f{}", "PFv".repeat(20_000));
        let name = KernelName::new(&deep);
        assert_eq!(name.mangled.len(), deep.len());
        let templates = format!("_Z1fI{}E", "I".repeat(50_000));
        assert_eq!(&*KernelName::new(&templates).demangled, templates);
        let back_references = format!("_Z1f{}", "S_".repeat(50_000));
        KernelName::new(&back_references);
        let nested_templates = format!("_Z1f{}", "IN1a1bE".repeat(5_000));
        KernelName::new(&nested_templates);
        let nested_names = format!("_Z{}1fv", "N1a".repeat(20_000));
        KernelName::new(&nested_names);
        // Back references that expand: the output is bounded, else the mangled name stands.
        let expanding = format!("_Z1fPFvPFvPFvvEEE{}", "S_S0_S1_".repeat(800));
        let name = KernelName::new(&expanding);
        assert!(name.demangled.len() <= MAX_DEMANGLED.max(expanding.len()));
        // Too long to demangle: kept as given.
        let long = format!("_Z1fI{}E", "i".repeat(MAX_DEMANGLE_INPUT));
        assert_eq!(&*KernelName::new(&long).demangled, long);
    }

    #[test]
    fn reads_a_string_from_a_process() {
        let text = std::ffi::CString::new("x".repeat(10_000)).unwrap();
        let address = text.as_ptr() as u64;
        let read = read_process_string(Path::new("/proc"), std::process::id() as i32, address);
        assert_eq!(read.as_deref(), Some(text.as_bytes()));
        assert_eq!(
            read_process_string(Path::new("/proc"), i32::MAX, address),
            None
        );
        assert_eq!(
            read_process_string(Path::new("/proc"), std::process::id() as i32, 8),
            None
        );
        let unterminated = vec![b'y'; MAX_NAME_BYTES + 10];
        let address = unterminated.as_ptr() as u64;
        assert_eq!(
            read_process_string(Path::new("/proc"), std::process::id() as i32, address),
            None
        );
    }
}
