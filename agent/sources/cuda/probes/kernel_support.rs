//! What this kernel and the settings allow the CUDA probes: uprobe_multi links, and counting
//! repeated kernel lookups at entry through a `uprobe.session` program.

use super::super::plan::ProbePlan;
use crate::sources::cuda::config::CudaSourceConfig;

/// Whether the kernel and the setting allow counting repeated lookups at entry at all.
pub(super) fn repeat_lookups_possible(
    config: &CudaSourceConfig,
    multi: bool,
    kernel_release: Option<&str>,
) -> Result<(), String> {
    if !config.repeat_lookups_at_entry {
        return Err("repeat_lookups_at_entry = false".into());
    }
    if !multi {
        return Err("needs uprobe_multi links".into());
    }
    if !kernel_release.is_some_and(|release| kernel_at_least(release, 6, 13)) {
        return Err("uprobe.session needs Linux >= 6.13".into());
    }
    Ok(())
}

/// Why repeated kernel lookups cannot be counted at entry here, if they cannot: the setting,
/// the kernel (uprobe.session programs since Linux 6.13, on uprobe_multi links), or a function
/// that changes lookups' answers left unprobed (its change would go unseen).
pub(super) fn repeat_lookups(
    config: &CudaSourceConfig,
    multi: bool,
    kernel_release: Option<&str>,
    plan: &ProbePlan,
) -> Result<(), String> {
    if !plan.probes.iter().any(|p| p.repeats_at_entry) {
        return Err("no lookup in stats mode".into());
    }
    repeat_lookups_possible(config, multi, kernel_release)?;
    if !plan.answer_changes_unprobed.is_empty() {
        return Err(format!(
            "functions that change lookups' answers are not probed (or only at entry): {:?}",
            plan.answer_changes_unprobed
        ));
    }
    Ok(())
}

/// uprobe_multi links exist since Linux 6.6.
pub(super) fn uprobe_multi_supported() -> bool {
    crate::enrich::kernel_release().is_some_and(|release| kernel_at_least(&release, 6, 6))
}

fn kernel_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    match (parts.next(), parts.next()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{kernel_at_least, repeat_lookups};
    use crate::sources::cuda::plan::{PlannedProbe, ProbePlan};

    fn plan(repeats_at_entry: bool, unprobed: &[&str]) -> ProbePlan {
        ProbePlan {
            probes: vec![PlannedProbe {
                library: "/lib/libcuda.so.1".into(),
                symbol: "cuKernelGetFunction".into(),
                file_offset: 0x1000,
                cookie: 0,
                entry_only: false,
                stats: repeats_at_entry,
                repeats_at_entry,
                hot: false,
            }],
            answer_changes_unprobed: unprobed.iter().map(|s| s.to_string()).collect(),
            ..ProbePlan::default()
        }
    }

    #[test]
    fn repeats_are_counted_at_entry_only_when_everything_allows_it() {
        let config: crate::sources::cuda::config::CudaSourceConfig = toml::from_str("").unwrap();
        let new = Some("6.18.44-fc-v669");
        assert_eq!(repeat_lookups(&config, true, new, &plan(true, &[])), Ok(()));
        assert_eq!(
            repeat_lookups(&config, true, new, &plan(false, &[])),
            Err("no lookup in stats mode".into())
        );
        let off: crate::sources::cuda::config::CudaSourceConfig =
            toml::from_str("repeat_lookups_at_entry = false").unwrap();
        assert_eq!(
            repeat_lookups(&off, true, new, &plan(true, &[])),
            Err("repeat_lookups_at_entry = false".into())
        );
        assert_eq!(
            repeat_lookups(&config, false, new, &plan(true, &[])),
            Err("needs uprobe_multi links".into())
        );
        for old in [
            Some("6.12.9"),
            Some("5.15.0-91-generic"),
            Some("garbage"),
            None,
        ] {
            assert_eq!(
                repeat_lookups(&config, true, old, &plan(true, &[])),
                Err("uprobe.session needs Linux >= 6.13".into()),
                "{old:?}"
            );
        }
        assert_eq!(
            repeat_lookups(&config, true, Some("6.13.0"), &plan(true, &[])),
            Ok(())
        );
        assert_eq!(
            repeat_lookups(&config, true, new, &plan(true, &["cuCtxDetach"])),
            Err("functions that change lookups' answers are not probed (or only at entry): [\"cuCtxDetach\"]".into())
        );
    }

    #[test]
    fn kernel_versions_compare_numerically() {
        assert!(kernel_at_least("6.18.44-fc-v769", 6, 6));
        assert!(kernel_at_least("6.6.0", 6, 6));
        assert!(!kernel_at_least("6.5.13-generic", 6, 6));
        assert!(!kernel_at_least("5.15.0-91-generic", 6, 6));
        assert!(kernel_at_least("7.0", 6, 6));
        assert!(!kernel_at_least("garbage", 6, 6));
    }
}
