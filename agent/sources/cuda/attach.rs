//! Attaching the planned probes: one uprobe_multi link per library and direction where the
//! kernel has them (one step to attach and, above all, to detach: per-symbol links cost an RCU
//! grace period each at detach, 21 s for 168 links on the GPU machine), else one link per
//! symbol and direction. With `sessions`, the lookups whose repeats are counted at entry get
//! one `uprobe.session` link per library instead (entry and return in one program).

use std::path::{Path, PathBuf};

use anyhow::Context;
use libbpf_rs::{Link, ProgramMut, UprobeMultiOpts, UprobeOpts};

use super::plan::PlannedProbe;
use crate::bpf::cuda::CudaSkel;

/// Links by direction; return links are detached first (see `CudaProbes::detach`).
#[derive(Default)]
pub struct Links {
    /// Entry probes (and the fork tracker).
    pub entry: Vec<Link>,
    /// Return probes.
    pub ret: Vec<Link>,
}

/// Attaches every probe of `probes` (grouped by library); each library's links come back
/// beside it, so that a library can be detached alone. `sessions` (only with `multi`):
/// attach the probes with `repeats_at_entry` through the session program, after every other
/// probe of every library, so that whatever invalidates a remembered lookup is probed before
/// any lookup can be remembered. Returns how many probes got a session link.
pub fn attach_all(
    skel: &CudaSkel<'_>,
    probes: &[PlannedProbe],
    multi: bool,
    sessions: bool,
) -> anyhow::Result<(Vec<(PathBuf, Links)>, usize)> {
    let sessions = multi && sessions;
    let mut libraries: Vec<&Path> = probes.iter().map(|p| p.library.as_path()).collect();
    libraries.dedup();
    // Hot probes have links of their own (`budget`).
    let of = |library: &Path, in_session: bool| -> Vec<&PlannedProbe> {
        probes
            .iter()
            .filter(|p| {
                !p.hot && p.library == library && (sessions && p.repeats_at_entry) == in_session
            })
            .collect()
    };
    let mut attached: Vec<(PathBuf, Links)> = Vec::new();
    for &library in &libraries {
        let mut links = Links::default();
        attach_library(skel, library, &of(library, false), multi, &mut links)?;
        attached.push((library.to_path_buf(), links));
    }
    let mut in_sessions = 0;
    for (library, links) in attached.iter_mut().filter(|_| sessions) {
        let session = of(library, true);
        if session.is_empty() {
            continue;
        }
        match attach_sessions(skel, library, &session) {
            Ok(link) => {
                // Detached with the returns: its entries then stop counting repeats.
                links.ret.push(link);
                in_sessions += session.len();
            }
            Err(err) => {
                tracing::warn!(
                    library = %library.display(),
                    error = format!("{err:#}"),
                    "uprobe.session attach failed; repeated lookups keep their return probe"
                );
                attach_library(skel, library, &session, multi, links)?;
            }
        }
    }
    Ok((attached, in_sessions))
}

/// One library's probes: a uprobe_multi link per direction, else one link per symbol.
fn attach_library(
    skel: &CudaSkel<'_>,
    library: &Path,
    probes: &[&PlannedProbe],
    multi: bool,
    links: &mut Links,
) -> anyhow::Result<()> {
    if probes.is_empty() {
        return Ok(());
    }
    if multi {
        match attach_multi(skel, library, probes) {
            Ok((entry, ret)) => {
                links.entry.push(entry);
                links.ret.extend(ret);
                return Ok(());
            }
            Err(err) => tracing::warn!(
                library = %library.display(),
                error = format!("{err:#}"),
                "uprobe_multi attach failed; attaching one probe per symbol"
            ),
        }
    }
    attach_single(skel, library, probes, links)
}

fn attach_sessions(
    skel: &CudaSkel<'_>,
    library: &Path,
    probes: &[&PlannedProbe],
) -> anyhow::Result<Link> {
    attach_sessions_for(skel, library, probes, -1, 0)
}

fn attach_sessions_for(
    skel: &CudaSkel<'_>,
    library: &Path,
    probes: &[&PlannedProbe],
    pid: i32,
    extra_cookie_bits: u64,
) -> anyhow::Result<Link> {
    let opts = UprobeMultiOpts {
        offsets: probes.iter().map(|p| p.file_offset as usize).collect(),
        cookies: probes
            .iter()
            .map(|p| p.cookie | extra_cookie_bits)
            .collect(),
        session: true,
        ..Default::default()
    };
    skel.progs
        .cuda_lookup_session
        .attach_uprobe_multi_with_opts(pid, library, "", opts)
        .with_context(|| {
            format!(
                "attaching {} uprobe.session to {}",
                probes.len(),
                library.display()
            )
        })
}

/// The hot probes of one library on their own uprobe_multi links: system-wide (`pid` None) or
/// for one process, whose links then carry the per-process cookie bit (`bpf/include/
/// cuda_budget.h`: only the links of the kernel's current hot mode record). With `sessions`,
/// lookups whose repeats are counted at entry get a session link (detached with the returns).
pub fn attach_hot(
    skel: &CudaSkel<'_>,
    library: &Path,
    probes: &[&PlannedProbe],
    pid: Option<u32>,
    sessions: bool,
) -> anyhow::Result<Links> {
    let per_process = u64::from(pid.is_some())
        << crate::bpf::cuda::types::gpuship_cookie_layout::GPUSHIP_COOKIE_PER_PROCESS_SHIFT.0;
    let pid = pid.map_or(-1, |pid| pid as i32);
    let (in_session, plain): (Vec<&PlannedProbe>, Vec<&PlannedProbe>) = probes
        .iter()
        .copied()
        .partition(|p| sessions && p.repeats_at_entry);
    let mut links = Links::default();
    if !plain.is_empty() {
        let (entry, ret) = attach_multi_for(skel, library, &plain, pid, per_process)?;
        links.entry.push(entry);
        links.ret.extend(ret);
    }
    if !in_session.is_empty() {
        links.ret.push(attach_sessions_for(
            skel,
            library,
            &in_session,
            pid,
            per_process,
        )?);
    }
    Ok(links)
}

fn attach_multi(
    skel: &CudaSkel<'_>,
    library: &Path,
    probes: &[&PlannedProbe],
) -> anyhow::Result<(Link, Option<Link>)> {
    attach_multi_for(skel, library, probes, -1, 0)
}

/// One entry link and, when some probe keeps its return, one return link, for `pid` (-1: every
/// process), with `extra_cookie_bits` or'ed into every cookie.
fn attach_multi_for(
    skel: &CudaSkel<'_>,
    library: &Path,
    probes: &[&PlannedProbe],
    pid: i32,
    extra_cookie_bits: u64,
) -> anyhow::Result<(Link, Option<Link>)> {
    let attach = |program: &ProgramMut<'_>, retprobe: bool, probes: &[&PlannedProbe]| {
        let opts = UprobeMultiOpts {
            offsets: probes.iter().map(|p| p.file_offset as usize).collect(),
            cookies: probes
                .iter()
                .map(|p| p.cookie | extra_cookie_bits)
                .collect(),
            retprobe,
            ..Default::default()
        };
        program
            .attach_uprobe_multi_with_opts(pid, library, "", opts)
            .with_context(|| {
                format!(
                    "attaching {} uprobe_multi to {}",
                    probes.len(),
                    library.display()
                )
            })
    };
    let entry = attach(&skel.progs.cuda_call_entry_multi, false, probes)?;
    // Entry-only functions get no return probe.
    let returning: Vec<&PlannedProbe> = probes.iter().copied().filter(|p| !p.entry_only).collect();
    let ret = if returning.is_empty() {
        None
    } else {
        Some(attach(
            &skel.progs.cuda_call_return_multi,
            true,
            &returning,
        )?)
    };
    Ok((entry, ret))
}

fn attach_single(
    skel: &CudaSkel<'_>,
    library: &Path,
    probes: &[&PlannedProbe],
    links: &mut Links,
) -> anyhow::Result<()> {
    for probe in probes {
        let directions: &[bool] = if probe.entry_only {
            &[false]
        } else {
            &[false, true]
        };
        for &retprobe in directions {
            let program = if retprobe {
                &skel.progs.cuda_call_return
            } else {
                &skel.progs.cuda_call_entry
            };
            let opts = UprobeOpts {
                cookie: probe.cookie,
                retprobe,
                ..Default::default()
            };
            let link = program
                .attach_uprobe_with_opts(-1, library, probe.file_offset as usize, opts)
                .with_context(|| {
                    let kind = if retprobe { "uretprobe" } else { "uprobe" };
                    format!(
                        "attaching {kind} {} at {}+{:#x}",
                        probe.symbol,
                        library.display(),
                        probe.file_offset
                    )
                })?;
            if retprobe {
                links.ret.push(link);
            } else {
                links.entry.push(link);
            }
        }
    }
    Ok(())
}

impl Links {
    /// Detaches return links, then entry links (a uretprobe rides on the entry breakpoint:
    /// see `CudaProbes::detach`).
    pub fn detach(&mut self) {
        self.ret.clear();
        self.entry.clear();
    }
}
