//! Where on a function its uprobe sits.
//!
//! At a uprobe's breakpoint the kernel emulates a few x86-64 instructions (a push of a
//! register, a nop, a relative jmp, call or jcc) and single-steps every other one out of line,
//! which costs a second trap: 6-10 µs a call instead of about 0.8 µs on the VMs measured
//! (`benches/gpu/single_step.sh`, docs/performance.md). Code built with `-fcf-protection`
//! starts every function with `endbr64`, which is single-stepped; such a function is probed on
//! the instruction after it. `endbr64` changes no register and not the stack, so the arguments
//! and the return address (which a return probe replaces) are where they were at the call.
//! Probes that still land on a single-stepped instruction are named in a warning at start.
//!
//! Every driver 580 `libcuda.so.1` entry point starts `push rbp` (emulated); this matters for
//! libraries built otherwise, such as a stand-in built on a distribution that enables CET.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::plan::PlannedProbe;

/// `endbr64`.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// How the kernel handles a breakpoint on an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    /// Emulated at the breakpoint: one trap.
    Emulated,
    /// `endbr64`: single-stepped, and skippable.
    Endbr64,
    /// Single-stepped out of line: a second trap per call.
    SingleStepped,
}

/// What the instruction starting `code` costs a probe (conservative: an instruction not known
/// to be emulated counts as single-stepped).
pub fn classify(code: &[u8]) -> Site {
    match code {
        [0xf3, 0x0f, 0x1e, 0xfa, ..] => Site::Endbr64,
        // push r64, with or without REX.B.
        [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..] => Site::Emulated,
        // nop, multi-byte nop.
        [0x90, ..] | [0x0f, 0x1f, ..] => Site::Emulated,
        // call rel32, jmp rel32, jmp rel8, jcc rel8, jcc rel32.
        [0xe8 | 0xe9 | 0xeb, ..] | [0x70..=0x7f, ..] | [0x0f, 0x80..=0x8f, ..] => Site::Emulated,
        _ => Site::SingleStepped,
    }
}

/// What [`place_probes`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Probes moved past a leading `endbr64`.
    pub past_endbr64: usize,
    /// Symbols whose probe is single-stepped still (sorted, each once).
    pub single_stepped: Vec<String>,
}

/// Moves each probe that starts on `endbr64` to the next instruction, and names the symbols
/// whose probe site is single-stepped. A library that cannot be read leaves its probes as
/// they are.
pub fn place_probes(probes: &mut [PlannedProbe]) -> Placement {
    let mut placement = Placement::default();
    let mut files: BTreeMap<PathBuf, Option<File>> = BTreeMap::new();
    let mut single_stepped = std::collections::BTreeSet::new();
    for probe in probes.iter_mut() {
        let file = files
            .entry(probe.library.clone())
            .or_insert_with(|| open(&probe.library));
        let Some(file) = file.as_ref() else {
            continue;
        };
        let mut code = [0u8; 8];
        if file.read_exact_at(&mut code, probe.file_offset).is_err() {
            continue;
        }
        let mut site = classify(&code);
        if site == Site::Endbr64 {
            probe.file_offset += ENDBR64.len() as u64;
            placement.past_endbr64 += 1;
            site = classify(&code[ENDBR64.len()..]);
        }
        if site != Site::Emulated {
            single_stepped.insert(probe.symbol.clone());
        }
    }
    placement.single_stepped = single_stepped.into_iter().collect();
    placement
}

fn open(path: &Path) -> Option<File> {
    File::open(path)
        .map_err(|err| tracing::debug!(path = %path.display(), %err, "cannot read probe sites"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_the_kernel_emulates_are_recognised() {
        for code in [
            &[0x55, 0x48, 0x89, 0xe5][..], // push rbp (driver 580's libcuda)
            &[0x53][..],                   // push rbx
            &[0x41, 0x57][..],             // push r15
            &[0x90][..],                   // nop
            &[0x0f, 0x1f, 0x44, 0x00, 0x00][..],
            &[0xe9, 0, 0, 0, 0][..], // jmp rel32 (a PLT-style thunk)
            &[0xeb, 0x10][..],
            &[0xe8, 0, 0, 0, 0][..],
            &[0x74, 0x05][..],
            &[0x0f, 0x84, 0, 0, 0, 0][..],
        ] {
            assert_eq!(classify(code), Site::Emulated, "{code:02x?}");
        }
    }

    #[test]
    fn everything_else_is_single_stepped() {
        for code in [
            &[0x48, 0x89, 0xf8][..],       // mov rax, rdi
            &[0x48, 0x83, 0xec, 0x08][..], // sub rsp, 8
            &[0x41, 0x58 + 7][..],         // pop r15
            &[0xc3][..],                   // ret
            &[0x48, 0x50][..],             // REX.W push: not the emulated form
            &[0x0f][..],                   // cut short
            &[][..],
        ] {
            assert_eq!(classify(code), Site::SingleStepped, "{code:02x?}");
        }
        assert_eq!(classify(&ENDBR64), Site::Endbr64);
    }

    fn probe(library: &Path, symbol: &str, file_offset: u64) -> PlannedProbe {
        PlannedProbe {
            library: library.to_path_buf(),
            symbol: symbol.into(),
            file_offset,
            cookie: 0,
            entry_only: false,
            stats: false,
            repeats_at_entry: false,
            hot: false,
        }
    }

    #[test]
    fn probes_move_past_endbr64_and_single_stepped_sites_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let library = dir.path().join("libcuda.so.1");
        let mut code = Vec::new();
        code.extend_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5]); // 0: endbr64; push
        code.extend_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x89, 0xf8, 0x90]); // 8: endbr64; mov
        code.extend_from_slice(&[0x55, 0x48, 0x89, 0xe5, 0x90, 0x90, 0x90, 0x90]); // 16: push
        code.extend_from_slice(&[0x48, 0x83, 0xec, 0x08, 0x90, 0x90, 0x90, 0x90]); // 24: sub
        std::fs::write(&library, &code).unwrap();
        let mut probes = vec![
            probe(&library, "cuLaunchKernel", 0),
            probe(&library, "cuMemAlloc_v2", 8),
            probe(&library, "cuInit", 16),
            probe(&library, "cuCtxSynchronize", 24),
            probe(&library, "cuPastTheEnd", 30), // fewer than 8 bytes left: unread, kept
            probe(&dir.path().join("missing.so"), "cuGone", 0),
        ];
        let placement = place_probes(&mut probes);
        let offsets: Vec<u64> = probes.iter().map(|p| p.file_offset).collect();
        assert_eq!(offsets, [4, 12, 16, 24, 30, 0]);
        assert_eq!(
            placement,
            Placement {
                past_endbr64: 2,
                single_stepped: vec!["cuCtxSynchronize".into(), "cuMemAlloc_v2".into()],
            }
        );
    }
}
