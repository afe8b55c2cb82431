use super::*;

fn library(names: &[&str]) -> Vec<(PathBuf, Vec<ExportedFunction>)> {
    let exported = names
        .iter()
        .enumerate()
        .map(|(i, n)| ExportedFunction {
            name: n.to_string(),
            file_offset: 0x1000 + i as u64 * 16,
        })
        .collect();
    vec![(PathBuf::from("/lib/libcuda.so.1"), exported)]
}

fn symbols(plan: &ProbePlan) -> Vec<&str> {
    plan.probes.iter().map(|p| p.symbol.as_str()).collect()
}

#[test]
fn default_selects_known_functions_and_variants_only() {
    let lib = library(&[
        "cuCtxGetDevice_v2",
        "cuCtxSynchronize",
        "cuCtxSynchronize_v2",
        "cuLaunchKernel",
        "cuLaunchKernel_ptsz",
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "helper",
    ]);
    let plan = plan_probes(&lib, &["default".into()], &[], &[], &[], &[]);
    assert_eq!(
        symbols(&plan),
        vec![
            "cuCtxSynchronize",
            "cuCtxSynchronize_v2",
            "cuLaunchKernel",
            "cuLaunchKernel_ptsz",
            "cuMemAlloc_v2"
        ]
    );
    assert_eq!(plan.functions.name(4), Some("cuMemAlloc_v2"));
    assert!(plan.missing.contains(&"cuLaunchKernelEx".to_string()));
    assert!(!plan.missing.contains(&"cuLaunchKernel".to_string()));
    assert_eq!(plan.probes[0].file_offset, 0x1010);
}

#[test]
fn globs_add_generic_probes_minus_exclusions_and_exact_names_report_missing() {
    let lib = library(&[
        "cuDeviceGetCount",
        "cuGetProcAddress_v2",
        "cuMemAlloc_v2",
        "nvSomething",
    ]);
    let plan = plan_probes(
        &lib,
        &["cu*".into(), "cuNotThere".into()],
        &["cuGetProcAddress*".into()],
        &[],
        &[],
        &[],
    );
    assert_eq!(symbols(&plan), vec!["cuDeviceGetCount", "cuMemAlloc_v2"]);
    assert_eq!(plan.probes[0].cookie, ArgSpec::GENERIC.cookie(0));
    // Known functions keep their decoded arguments when a glob selects them.
    assert_ne!(plan.probes[1].cookie, ArgSpec::GENERIC.cookie(1));
    assert_eq!(plan.missing, vec!["cuNotThere".to_string()]);
}

#[test]
fn exclusions_also_remove_default_functions_but_not_exact_names() {
    let lib = library(&[
        "cuLaunchKernel",
        "cuLaunchKernel_ptsz",
        "cuLaunchKernelEx",
        "cuMemAlloc_v2",
    ]);
    let plan = plan_probes(
        &lib,
        &["default".into()],
        &["cuLaunchKernel*".into()],
        &[],
        &[],
        &[],
    );
    assert_eq!(symbols(&plan), vec!["cuMemAlloc_v2"]);
    assert!(!plan.missing.iter().any(|m| m.starts_with("cuLaunch")));
    let named = plan_probes(
        &lib,
        &["default".into(), "cuLaunchKernel".into()],
        &["cuLaunchKernel*".into()],
        &[],
        &[],
        &[],
    );
    assert_eq!(symbols(&named), vec!["cuLaunchKernel", "cuMemAlloc_v2"]);
}

#[test]
fn entry_only_functions_carry_the_bit_and_no_return_probe() {
    let lib = library(&["cuLaunchKernel", "cuLaunchKernel_ptsz", "cuMemAlloc_v2"]);
    let plan = plan_probes(
        &lib,
        &["default".into()],
        &[],
        &["cuLaunchKernel*".into()],
        &[],
        &[],
    );
    let bit = 1u64 << 52;
    let flags: Vec<(bool, bool)> = plan
        .probes
        .iter()
        .map(|p| (p.entry_only, p.cookie & bit != 0))
        .collect();
    assert_eq!(flags, [(true, true), (true, true), (false, false)]);
}

/// `stats_entry_only` drops the return probe of the functions it names only while they are
/// in `stats` mode: with `stats` empty (gpuship run -- COMMAND) launches keep their return.
#[test]
fn stats_entry_only_applies_to_stats_functions_only() {
    let lib = library(&["cuLaunchKernel", "cuMemAlloc_v2", "cuMemcpyAsync"]);
    let entry_only = |stats: &[String]| -> Vec<(String, bool)> {
        plan_probes(
            &lib,
            &["default".into()],
            &[],
            &[],
            stats,
            &["cuLaunchKernel*".into(), "cuMemAlloc_v2".into()],
        )
        .probes
        .into_iter()
        .map(|p| (p.symbol, p.entry_only))
        .collect()
    };
    let stats = ["cuLaunchKernel*".to_string(), "cuMemcpyAsync".to_string()];
    assert_eq!(
        entry_only(&stats),
        [
            ("cuLaunchKernel".to_string(), true),
            ("cuMemAlloc_v2".to_string(), false),
            ("cuMemcpyAsync".to_string(), false)
        ]
    );
    assert!(entry_only(&[]).iter().all(|(_, at_entry)| !at_entry));
}

#[test]
fn stats_functions_carry_the_stats_bit_and_keep_their_return_probe() {
    let lib = library(&["cuLaunchKernel", "cuLaunchKernelEx", "cuMemAlloc_v2"]);
    let plan = plan_probes(
        &lib,
        &["default".into()],
        &[],
        &["cuLaunchKernelEx".into()],
        &["cuLaunchKernel*".into()],
        &[],
    );
    let stats_bit = 1u64 << 53;
    let entry_bit = 1u64 << 52;
    let flags: Vec<(bool, bool, bool)> = plan
        .probes
        .iter()
        .map(|p| {
            (
                p.stats,
                p.cookie & stats_bit != 0,
                p.cookie & entry_bit != 0,
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            (true, true, false),
            (true, true, true),
            (false, false, false)
        ],
        "cuLaunchKernelEx is aggregated at entry (no duration, no result)"
    );
    // The function id and the argument layout are unchanged by the mode.
    let rows = plan_probes(&lib, &["default".into()], &[], &[], &[], &[]);
    for (aggregated, row) in plan.probes.iter().zip(&rows.probes) {
        assert_eq!(
            aggregated.cookie & !(stats_bit | entry_bit),
            row.cookie,
            "{}",
            row.symbol
        );
    }
}

#[test]
fn same_symbol_in_two_libraries_shares_an_id() {
    let mut libs = library(&["cuInit"]);
    libs.push((PathBuf::from("/other/libcuda.so.1"), libs[0].1.clone()));
    let plan = plan_probes(&libs, &["default".into()], &[], &[], &[], &[]);
    assert_eq!(plan.probes.len(), 2);
    assert_eq!(plan.probes[0].cookie, plan.probes[1].cookie);
    assert_eq!(plan.functions.len(), 1);
}

#[test]
fn calls_that_make_kernel_handles_keep_their_return_and_only_lookups_of_functions_aggregate() {
    let lib = library(&[
        "cuLibraryGetKernel",
        "cuModuleGetFunction",
        "cuKernelGetFunction",
        "cuLibraryUnload",
        "cuLaunchKernel",
    ]);
    // Globs that would aggregate or enter-only every call.
    let plan = plan_probes(
        &lib,
        &["default".into()],
        &[],
        &["cu*".into()],
        &["cu*".into()],
        &["cu*".into()],
    );
    let row_if_new = 1u64 << gpuship_cookie_layout::GPUSHIP_COOKIE_ROW_IF_NEW_SHIFT.0;
    let modes: Vec<(&str, bool, bool, bool)> = plan
        .probes
        .iter()
        .map(|p| {
            (
                p.symbol.as_str(),
                p.stats,
                p.entry_only,
                p.cookie & row_if_new != 0,
            )
        })
        .collect();
    // The function ids are the table's, whatever the argument bits above them.
    let ids: Vec<u32> = plan.probes.iter().map(PlannedProbe::function_id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    // cuKernelGetFunction may be aggregated with its return: new answers stay rows.
    assert_eq!(
        modes,
        [
            ("cuLibraryGetKernel", false, false, false),
            ("cuModuleGetFunction", false, false, false),
            ("cuKernelGetFunction", true, false, true),
            ("cuLibraryUnload", false, false, false),
            ("cuLaunchKernel", true, true, false),
        ]
    );
    // Out of `stats`, it is a plain row again.
    let plan = plan_probes(&lib, &["default".into()], &[], &[], &[], &[]);
    assert!(plan
        .probes
        .iter()
        .all(|p| !p.stats && p.cookie & row_if_new == 0));
}

#[test]
fn calls_that_change_lookup_answers_carry_their_bit_and_unprobed_ones_are_named() {
    let lib = library(&[
        "cuCtxSetCurrent",
        "cuCtxPopCurrent",
        "cuCtxPopCurrent_v2",
        "cuCtxDestroy_v2",
        "cuDevicePrimaryCtxRelease_v2",
        "cuKernelGetFunction",
        "cuLibraryUnload",
        "cuMemAlloc_v2",
    ]);
    let thread = 1u64 << gpuship_cookie_layout::GPUSHIP_COOKIE_THREAD_CONTEXT_SHIFT.0;
    let all = 1u64 << gpuship_cookie_layout::GPUSHIP_COOKIE_ALL_ANSWERS_SHIFT.0;
    let stats = ["cuKernelGetFunction".to_string()];
    let plan = plan_probes(&lib, &["default".into()], &[], &[], &stats, &[]);
    let bits: Vec<(&str, bool, bool, bool)> = plan
        .probes
        .iter()
        .map(|p| {
            (
                p.symbol.as_str(),
                p.cookie & thread != 0,
                p.cookie & all != 0,
                p.repeats_at_entry,
            )
        })
        .collect();
    assert_eq!(
        bits,
        [
            ("cuCtxSetCurrent", true, false, false),
            ("cuCtxPopCurrent", true, false, false),
            ("cuCtxPopCurrent_v2", true, false, false),
            ("cuCtxDestroy_v2", false, true, false),
            ("cuDevicePrimaryCtxRelease_v2", false, true, false),
            ("cuKernelGetFunction", false, false, true),
            ("cuLibraryUnload", false, true, false),
            ("cuMemAlloc_v2", false, false, false),
        ]
    );
    assert!(plan.answer_changes_unprobed.is_empty());

    // Excluded (or not selected) answer changes are named: repeats then keep their return.
    let plan = plan_probes(
        &lib,
        &["default".into()],
        &["cuCtxPop*".into(), "cuLibraryUnload".into()],
        &[],
        &stats,
        &[],
    );
    assert_eq!(
        plan.answer_changes_unprobed,
        ["cuCtxPopCurrent", "cuCtxPopCurrent_v2", "cuLibraryUnload"]
    );
    let plan = plan_probes(&lib, &["cuKernelGetFunction".into()], &[], &[], &stats, &[]);
    assert_eq!(plan.answer_changes_unprobed.len(), 6);
    // An all-threads change probed at entry only is not seen whole (it is taken at its return
    // too); a thread's own context change at entry only is, and an unload always keeps its
    // return (it retires kernel names).
    let plan = plan_probes(
        &lib,
        &["default".into()],
        &[],
        &[
            "cuDevicePrimaryCtxRelease*".into(),
            "cuLibraryUnload".into(),
            "cuCtxSetCurrent".into(),
        ],
        &stats,
        &[],
    );
    assert_eq!(
        plan.answer_changes_unprobed,
        ["cuDevicePrimaryCtxRelease_v2"]
    );
    // Out of `stats`, a lookup is a row with its return: nothing to count at entry.
    let plan = plan_probes(&lib, &["default".into()], &[], &[], &[], &[]);
    assert!(plan.probes.iter().all(|p| !p.repeats_at_entry));
}

#[test]
fn only_stats_mode_functions_matching_the_hot_globs_become_hot() {
    use crate::bpf::cuda::types::gpuship_cookie_layout as layout;
    let library = PathBuf::from("/lib/libcuda.so.1");
    let exported = [
        "cuLaunchKernel",
        "cuMemcpyAsync",
        "cuMemAlloc_v2",
        "cuKernelGetFunction",
        "cuCtxSynchronize",
    ]
    .iter()
    .enumerate()
    .map(|(i, name)| ExportedFunction {
        name: name.to_string(),
        file_offset: 0x1000 * (i as u64 + 1),
    })
    .collect();
    let mut plan = plan_probes(
        &[(library, exported)],
        &["default".to_string()],
        &[],
        &[],
        &["cuLaunchKernel*".into(), "cuKernelGetFunction".into()],
        &[],
    );
    plan.mark_hot(&["cu*".into()]);
    let hot_bit = 1u64 << layout::GPUSHIP_COOKIE_HOT_SHIFT.0;
    let hot: Vec<(&str, bool, bool)> = plan
        .probes
        .iter()
        .map(|p| (p.symbol.as_str(), p.hot, p.cookie & hot_bit != 0))
        .collect();
    // Launches and the lookup are in stats mode: hot (a kernel is named at its next lookup
    // in a window). cuMemcpyAsync, allocations and syncs are rows here: exact.
    assert_eq!(
        hot,
        vec![
            ("cuLaunchKernel", true, true),
            ("cuMemcpyAsync", false, false),
            ("cuMemAlloc_v2", false, false),
            ("cuKernelGetFunction", true, true),
            ("cuCtxSynchronize", false, false),
        ]
    );
    // The hot bit leaves the function id alone.
    assert!(plan
        .probes
        .iter()
        .all(|p| (p.function_id() as usize) < plan.functions.len()));
}
