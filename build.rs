//! Compiles every `bpf/*.bpf.c` into a BPF object and generates its Rust skeleton
//! (`$OUT_DIR/<name>.skel.rs`) with libbpf-cargo, and `$OUT_DIR/skeletons.rs`, a module per
//! program that `agent/bpf.rs` includes. The event layouts live in
//! `bpf/include/gpuship_events.h` and reach Rust only through these skeletons. Also sets the
//! commit and build date that `gpuship --version` prints (`build/version.rs`).

use std::env;
use std::fs;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

#[path = "build/version.rs"]
mod version;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    version::emit_version_info(&manifest_dir);
    let bpf_dir = manifest_dir.join("bpf");
    let include = bpf_dir.join("include");
    let vmlinux = include.join(&arch);
    if !vmlinux.join("vmlinux.h").exists() {
        panic!(
            "no bpf/include/{arch}/vmlinux.h; generate it with \
             `bpftool btf dump file /sys/kernel/btf/vmlinux format c` (see bpf/include/README.md)"
        );
    }
    println!("cargo:rerun-if-changed={}", include.display());

    let mut sources: Vec<PathBuf> = fs::read_dir(&bpf_dir)
        .expect("read bpf/")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    sources.sort();
    let mut modules = String::new();
    for source in sources {
        println!("cargo:rerun-if-changed={}", source.display());
        let file_name = source
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 file name");
        let stem = file_name.trim_end_matches(".bpf.c");
        SkeletonBuilder::new()
            .source(&source)
            .clang_args([
                format!("-I{}", include.display()),
                format!("-I{}", vmlinux.display()),
                // v3: atomic compare-and-swap and exchange (the CUDA call slots); Linux >= 5.12.
                "-mcpu=v3".to_string(),
                "-Wall".to_string(),
                "-Werror".to_string(),
            ])
            .build_and_generate(out_dir.join(format!("{stem}.skel.rs")))
            .unwrap_or_else(|err| panic!("building BPF program {}: {err:#}", source.display()));
        modules.push_str(&format!(
            "pub mod {stem} {{\n    include!(concat!(env!(\"OUT_DIR\"), \"/{stem}.skel.rs\"));\n}}\n"
        ));
    }
    // One module per program, so a new `bpf/<name>.bpf.c` needs no edit to `agent/bpf.rs`.
    fs::write(out_dir.join("skeletons.rs"), modules).expect("write $OUT_DIR/skeletons.rs");
}
