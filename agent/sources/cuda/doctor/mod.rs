//! `gpuship doctor`'s checks of the CUDA source: which libcuda files it finds (configured,
//! and mapped by running processes: [`libraries`]), which default functions they export, and
//! the uprobes tried (load, attach, detach).

mod libraries;

use std::mem::MaybeUninit;

use super::catalog::DEFAULT_FUNCTIONS;
use super::config::CudaSourceConfig;
use super::library::{exported_functions, resolve_libraries};
use super::probes;
use crate::diagnosis::{refusal_or, Cause, Check, HostFacts};
use crate::sources::ProcessFilter;

/// The checks of `[sources.cuda]` on `host`: configured and mapped libraries, the default
/// functions each exports, and the probes loaded, attached and detached.
pub fn checks(cuda: &CudaSourceConfig, host: &HostFacts) -> Vec<Check> {
    if !cuda.enabled {
        return vec![Check::pass("cuda", false, "disabled in config")];
    }
    let (libraries, missing) = resolve_libraries(&cuda.libraries);
    let mut checks = Vec::new();
    for path in &missing {
        checks.push(Check::failed_because(
            format!("cuda library {path}"),
            false,
            "does not exist",
            &Cause::CudaLibraryPathMissing,
        ));
    }
    let proc_dir = host.proc_dir.as_path();
    if cuda.discovers_libraries() {
        checks.extend(libraries::mapped_libraries(proc_dir));
    }
    if libraries.is_empty() && !cuda.discovers_libraries() {
        checks.push(Check::failed_because(
            "cuda",
            true,
            format!("no libcuda.so.1 found (libraries = {:?})", cuda.libraries),
            &Cause::NoCudaLibrary,
        ));
        return checks;
    }
    // Which default functions each library exports (informational: drivers differ).
    let mut exported_anywhere: Vec<String> = Vec::new();
    for library in &libraries {
        match exported_functions(library) {
            Ok(functions) => exported_anywhere.extend(functions.into_iter().map(|f| f.name)),
            Err(err) => checks.push(Check::failed_because(
                format!("cuda library {}", library.display()),
                true,
                err.to_string(),
                &Cause::NotACudaLibrary,
            )),
        }
    }
    for (function, _) in DEFAULT_FUNCTIONS.iter().filter(|_| !libraries.is_empty()) {
        let present = exported_anywhere.iter().any(|name| name == function);
        if !present {
            checks.push(Check::failed_because(
                format!("cuda:{function}"),
                false,
                "not exported by the library",
                &Cause::FunctionNotExported,
            ));
        }
    }
    let mut storage = MaybeUninit::uninit();
    let outcome = probes::load(&mut storage, cuda, ProcessFilter::All, proc_dir);
    let check = match outcome {
        Ok(Ok(loaded)) => {
            let symbols = loaded.probed_symbols;
            let count = loaded.attached_files();
            loaded.detach();
            let noun = if count == 1 { "library" } else { "libraries" };
            let waiting = if count == 0 {
                "; no process maps a libcuda yet: each one a process maps is attached then"
            } else {
                ""
            };
            Check::pass(
                "cuda",
                true,
                format!("{symbols} symbols in {count} {noun} attached and detached{waiting}"),
            )
        }
        Ok(Err(reason)) => {
            let cause = nothing_to_probe(&reason);
            Check::failed_because("cuda", true, reason, &cause)
        }
        Err(err) => {
            let detail = format!("{err:#}");
            let otherwise = Cause::KernelFeature("uprobes (CONFIG_UPROBES) and BTF");
            let cause = refusal_or(&detail, host.lockdown(), otherwise);
            Check::failed_because("cuda", true, detail, &cause)
        }
    };
    checks.push(check);
    checks
}

/// The cause of [`probes::load`]'s `Ok(Err(reason))`: nothing to probe.
pub fn nothing_to_probe(reason: &str) -> Cause {
    if reason.starts_with("no libcuda.so.1 found") {
        Cause::NoCudaLibrary
    } else {
        Cause::NoExportedFunction
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_probe_gets_the_fix_of_its_cause() {
        assert_eq!(
            nothing_to_probe("no libcuda.so.1 found (libraries = [\"auto\"]); install"),
            Cause::NoCudaLibrary
        );
        assert_eq!(
            nothing_to_probe("no requested function is exported by [...]"),
            Cause::NoExportedFunction
        );
    }
}
