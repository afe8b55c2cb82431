//! Decides which symbols of which libraries get probes, and with which cookie.
//!
//! Function ids index [`FunctionTable`], which the decoder uses to name each event's function;
//! a symbol probed in two libraries shares one id.

use std::collections::HashMap;
use std::path::PathBuf;

use super::catalog::{default_entry, kernel_role, ArgSpec, KernelRole, DEFAULT_FUNCTIONS};
use super::library::ExportedFunction;
use super::roles::{answer_change, device_role, AnswerChange, DeviceRole};
use crate::bpf::cuda::types::gpuship_cookie_layout;
pub use crate::sources::functions::FunctionTable;

/// One uprobe + uretprobe pair to attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedProbe {
    /// Library file.
    pub library: PathBuf,
    /// Exported symbol.
    pub symbol: String,
    /// File offset of the symbol.
    pub file_offset: u64,
    /// Attach cookie (function id + argument layout + entry-only bit).
    pub cookie: u64,
    /// Recorded at entry only: no return probe, no duration, no result.
    pub entry_only: bool,
    /// In `stats` mode: added to the per-interval statistics, a row only when it fails or is
    /// slow.
    pub stats: bool,
    /// A lookup whose repeats may be counted at entry, without its return
    /// (`bpf/include/cuda_lookup_memo.h`): attached with the session program when
    /// [`ProbePlan::answer_changes_unprobed`] is empty and the kernel has it.
    pub repeats_at_entry: bool,
    /// Probed part of the time under the overhead budget ([`ProbePlan::mark_hot`]): attached
    /// on its own links (system-wide or per process), not with the library's other probes.
    pub hot: bool,
}

impl PlannedProbe {
    /// The function id its cookie carries (the cookie's low bits; the bits above it say where
    /// the arguments are).
    pub fn function_id(&self) -> u32 {
        (self.cookie & gpuship_cookie_layout::GPUSHIP_COOKIE_FUNCTION_MASK.0 as u64) as u32
    }
}

/// Every probe to attach, the function table, and default functions no library exports.
#[derive(Debug, Clone, Default)]
pub struct ProbePlan {
    /// Probes, by library then symbol.
    pub probes: Vec<PlannedProbe>,
    /// Names by function id.
    pub functions: FunctionTable,
    /// Requested functions (default set entries or exact names) that no library exports.
    pub missing: Vec<String>,
    /// Exported functions that can change a kernel lookup's answer but are not probed, or,
    /// for a change to every thread's answers, are probed at entry only (such a change is
    /// taken at its return too): while any is, every lookup keeps its return probe.
    pub answer_changes_unprobed: Vec<String>,
}

/// Plans probes for `libraries` (each with its exported functions) given the configured
/// `functions` (names, globs, `"default"`) and `exclude` globs (applied to what `"default"` and
/// globs select; a function named exactly is always probed); `entry_only` and `stats` globs
/// set those modes on what is probed, and `stats_entry_only` makes functions entry-only when
/// they are in `stats` mode.
pub fn plan_probes(
    libraries: &[(PathBuf, Vec<ExportedFunction>)],
    functions: &[String],
    exclude: &[String],
    entry_only: &[String],
    stats: &[String],
    stats_entry_only: &[String],
) -> ProbePlan {
    plan_probes_onto(
        &FunctionTable::default(),
        libraries,
        &Selected {
            functions,
            exclude,
            entry_only,
            stats,
            stats_entry_only,
        },
    )
}

/// The configured lists that select functions and their modes (see [`plan_probes`]).
#[derive(Debug, Clone, Copy)]
pub struct Selected<'a> {
    /// `functions`.
    pub functions: &'a [String],
    /// `exclude_functions`.
    pub exclude: &'a [String],
    /// `entry_only`.
    pub entry_only: &'a [String],
    /// `stats`.
    pub stats: &'a [String],
    /// `stats_entry_only`.
    pub stats_entry_only: &'a [String],
}

/// [`plan_probes`] for libraries found after others were planned: a function already in
/// `known` keeps its id (the decoder, the statistics and the live view name rows by id), new
/// ones get the next ids.
pub fn plan_probes_onto(
    known: &FunctionTable,
    libraries: &[(PathBuf, Vec<ExportedFunction>)],
    selected: &Selected<'_>,
) -> ProbePlan {
    let selection = Selection::new(
        selected.functions,
        selected.exclude,
        selected.entry_only,
        selected.stats,
        selected.stats_entry_only,
    );
    let mut found = Found::new(&selection);
    let mut plan = ProbePlan {
        functions: known.clone(),
        ..ProbePlan::default()
    };
    let mut ids: HashMap<String, u32> = (0..known.len() as u32)
        .filter_map(|id| Some((known.name(id)?.to_string(), id)))
        .collect();
    for (library, exported) in libraries {
        for function in exported.iter().filter(|f| f.name.starts_with("cu")) {
            let name = function.name.as_str();
            let entry = default_entry(name);
            let excluded = selection.excludes(name);
            let exact_index = selection.exact_index(name);
            if excluded {
                // Left out on purpose: not reported as missing either.
                found.default_of(entry);
            }
            let selected = exact_index.is_some()
                || !excluded && (selection.want_default && entry.is_some() || selection.glob(name));
            let changes_answers = answer_change(name);
            if !selected {
                if changes_answers != AnswerChange::None {
                    plan.answer_changes_unprobed.push(name.to_string());
                }
                continue;
            }
            found.default_of(entry);
            if let Some(i) = exact_index {
                found.exact[i] = true;
            }
            let spec = entry.map_or(ArgSpec::GENERIC, |(_, spec)| spec);
            let id = plan.functions.intern(&mut ids, name);
            let in_stats = selection.in_stats(name);
            let at_entry = selection.at_entry_only(name, in_stats);
            if at_entry && changes_answers == AnswerChange::AllThreads {
                plan.answer_changes_unprobed.push(name.to_string());
            }
            let entry_only_bit =
                u64::from(at_entry) << gpuship_cookie_layout::GPUSHIP_COOKIE_ENTRY_ONLY_SHIFT.0;
            let stats_bit =
                u64::from(in_stats) << gpuship_cookie_layout::GPUSHIP_COOKIE_STATS_SHIFT.0;
            let row_if_new = in_stats && repeats_are_counted(name);
            let row_if_new_bit =
                u64::from(row_if_new) << gpuship_cookie_layout::GPUSHIP_COOKIE_ROW_IF_NEW_SHIFT.0;
            plan.probes.push(PlannedProbe {
                library: library.clone(),
                symbol: name.to_string(),
                file_offset: function.file_offset,
                cookie: spec.cookie(id)
                    | entry_only_bit
                    | stats_bit
                    | row_if_new_bit
                    | answer_change_bits(changes_answers),
                entry_only: at_entry,
                stats: in_stats,
                repeats_at_entry: row_if_new,
                hot: false,
            });
        }
    }
    plan.missing = found.missing(&selection);
    plan
}

impl ProbePlan {
    /// Marks the probes of `stats`-mode functions matching `hot` (globs) as hot, cookie bit
    /// included, for the overhead budget (their `cuda_stats` rows say what share was observed
    /// and estimate the rest). Functions recorded as rows stay exact (rows are the detail asked
    /// for), and so do functions that keep state beside their rows (devices, handles made or
    /// dropped): they stay probed in every process. Kernel lookups in `stats` mode may be hot:
    /// a kernel first looked up while its process is not observed is named at its next
    /// lookup in a window (the CUDA runtime looks kernels up again on every step).
    pub fn mark_hot(&mut self, hot: &[String]) {
        let hot = compile(hot);
        for probe in &mut self.probes {
            let keeps_state =
                keeps_its_return(&probe.symbol) && !repeats_are_counted(&probe.symbol);
            if !probe.stats || keeps_state {
                continue;
            }
            if hot.iter().any(|p| p.matches(&probe.symbol)) {
                probe.hot = true;
                probe.cookie |= 1 << gpuship_cookie_layout::GPUSHIP_COOKIE_HOT_SHIFT.0;
            }
        }
    }
}

/// The configured lists, compiled: `"default"`, exact names, globs, exclusions and the
/// entry-only globs. Patterns that do not parse select nothing (config validation reports them).
struct Selection<'a> {
    want_default: bool,
    exact: Vec<&'a String>,
    globs: Vec<glob::Pattern>,
    excluded: Vec<glob::Pattern>,
    entry_only: Vec<glob::Pattern>,
    stats: Vec<glob::Pattern>,
    stats_entry_only: Vec<glob::Pattern>,
}

fn compile<'a>(patterns: impl IntoIterator<Item = &'a String>) -> Vec<glob::Pattern> {
    patterns
        .into_iter()
        .filter_map(|p| glob::Pattern::new(p).ok())
        .collect()
}

impl<'a> Selection<'a> {
    fn new(
        functions: &'a [String],
        exclude: &[String],
        entry_only: &[String],
        stats: &[String],
        stats_entry_only: &[String],
    ) -> Self {
        let named = || functions.iter().filter(|f| *f != "default");
        Self {
            want_default: functions.iter().any(|f| f == "default"),
            exact: named().filter(|f| !is_glob(f)).collect(),
            globs: compile(named().filter(|f| is_glob(f))),
            excluded: compile(exclude),
            entry_only: compile(entry_only),
            stats: compile(stats),
            stats_entry_only: compile(stats_entry_only),
        }
    }

    fn excludes(&self, name: &str) -> bool {
        self.excluded.iter().any(|p| p.matches(name))
    }

    fn glob(&self, name: &str) -> bool {
        self.globs.iter().any(|p| p.matches(name))
    }

    fn exact_index(&self, name: &str) -> Option<usize> {
        self.exact.iter().position(|e| *e == name)
    }

    /// Entry-only: in `entry_only`, or in `stats_entry_only` while in `stats` mode.
    fn at_entry_only(&self, name: &str, in_stats: bool) -> bool {
        if keeps_its_return(name) {
            return false;
        }
        self.entry_only.iter().any(|p| p.matches(name))
            || in_stats && self.stats_entry_only.iter().any(|p| p.matches(name))
    }

    fn in_stats(&self, name: &str) -> bool {
        (!keeps_its_return(name) || repeats_are_counted(name))
            && self.stats.iter().any(|p| p.matches(name))
    }
}

/// Functions that keep their return but may still be in `stats` mode: the same question gets
/// the same answer again and again (the CUDA 13 runtime asks `cuKernelGetFunction` for the
/// same kernels on every training step), so the return program makes a row only of an answer
/// it has not sent for that (process, handle) and counts the repeats.
fn repeats_are_counted(name: &str) -> bool {
    kernel_role(name) == KernelRole::FunctionOfKernel
}

/// The cookie bits that make a call's entry invalidate remembered lookups.
fn answer_change_bits(change: AnswerChange) -> u64 {
    match change {
        AnswerChange::None => 0,
        AnswerChange::ThisThread => {
            1 << gpuship_cookie_layout::GPUSHIP_COOKIE_THREAD_CONTEXT_SHIFT.0
        }
        AnswerChange::AllThreads => 1 << gpuship_cookie_layout::GPUSHIP_COOKIE_ALL_ANSWERS_SHIFT.0,
    }
}

/// Functions whose rows keep state beside the rows stay rows with their return whatever the
/// globs say: kernel handles made or dropped (read at return; a getter in `stats` mode would
/// make no row, so launches could never be named), and devices and contexts (every call's
/// GPU). Allocations and frees may be aggregated (a stream-ordered allocator can be hot); the
/// memory they hold is then not followed (`memory`, which says so at start).
fn keeps_its_return(name: &str) -> bool {
    matches!(
        kernel_role(name),
        KernelRole::Names | KernelRole::FunctionOfKernel | KernelRole::Unloads
    ) || device_role(name) != DeviceRole::None
}

/// Which default functions and exact names some library exports (or the exclusions account
/// for), to report the rest as missing.
struct Found {
    default: Vec<bool>,
    exact: Vec<bool>,
}

impl Found {
    fn new(selection: &Selection<'_>) -> Self {
        Self {
            default: vec![false; DEFAULT_FUNCTIONS.len()],
            exact: vec![false; selection.exact.len()],
        }
    }

    /// Marks the default function `entry` belongs to, if any.
    fn default_of(&mut self, entry: Option<(&str, ArgSpec)>) {
        let index =
            entry.and_then(|(base, _)| DEFAULT_FUNCTIONS.iter().position(|(n, _)| *n == base));
        if let Some(i) = index {
            self.default[i] = true;
        }
    }

    fn missing(self, selection: &Selection<'_>) -> Vec<String> {
        let mut missing = Vec::new();
        if selection.want_default {
            missing.extend(
                DEFAULT_FUNCTIONS
                    .iter()
                    .zip(&self.default)
                    .filter(|(_, found)| !**found)
                    .map(|((name, _), _)| name.to_string()),
            );
        }
        missing.extend(
            selection
                .exact
                .iter()
                .zip(&self.exact)
                .filter(|(_, found)| !**found)
                .map(|(name, _)| name.to_string()),
        );
        missing
    }
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

#[cfg(test)]
mod tests;
