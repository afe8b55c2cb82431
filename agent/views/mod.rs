//! Views of the data lake for people: `gpuship export-trace` (a Perfetto/Chrome trace of a time
//! range) and `gpuship report` (one self-contained HTML page). Both read the lake through
//! [`crate::lake`] and never touch the running agent or write into the lake.
//!
//! [`rows`] turns record batches into typed rows; [`trace`] and [`report`] build the outputs;
//! this file is the command-line glue (range, lake, output file).

#[cfg(test)]
mod fixtures;
pub mod report;
pub mod rows;
pub mod trace;

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use gpuship_sinks::EventKind;
use serde_json::{json, Map};

use crate::cli::{ExportTraceArgs, RangeArgs, ReportArgs};
use crate::lake::range::rfc3339;
use crate::lake::{Lake, TimeRange, Unreadable};

fn open(args: &RangeArgs) -> anyhow::Result<(Lake, TimeRange)> {
    // Milliseconds are plenty for a range people type, and keep its printed form short.
    let now = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 3);
    let range =
        TimeRange::parse(&args.since, args.until.as_deref(), now).context("--since/--until")?;
    Ok((Lake::open(&args.data)?, range))
}

/// Writes `content` to `path` (`-`: standard output).
fn write_output(path: &Path, content: &[u8]) -> anyhow::Result<()> {
    if path == Path::new("-") {
        let mut out = std::io::stdout().lock();
        return out
            .write_all(content)
            .and_then(|()| out.flush())
            .context("writing to standard output");
    }
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))
}

fn where_to(path: &Path) -> String {
    if path == Path::new("-") {
        "standard output".into()
    } else {
        path.display().to_string()
    }
}

fn warn_unreadable(command: &str, unreadable: &[Unreadable]) {
    if unreadable.is_empty() {
        return;
    }
    eprintln!(
        "gpuship {command}: {} file(s) could not be read and were skipped; their rows are missing:",
        unreadable.len()
    );
    for file in unreadable {
        eprintln!("  {}: {}", file.key, file.error);
    }
}

/// `gpuship export-trace`.
pub fn export_trace(args: &ExportTraceArgs) -> anyhow::Result<()> {
    let (lake, range) = open(&args.range)?;
    let cuda = lake.read_table(EventKind::Cuda, &range)?;
    let xid = lake.read_table(EventKind::Xid, &range)?;
    let driver = lake.read_table(EventKind::Driver, &range)?;
    let mut context = Map::new();
    context.insert(
        "generator".into(),
        json!(concat!("gpuship export-trace ", env!("CARGO_PKG_VERSION"))),
    );
    context.insert("lake".into(), json!(lake.location()));
    context.insert("since".into(), json!(rfc3339(range.since())));
    context.insert("until".into(), json!(rfc3339(range.until())));
    let (document, counts) = trace::build(
        &rows::cuda_calls(&cuda.batches),
        &rows::xids(&xid.batches),
        &rows::driver_ops(&driver.batches),
        context,
    );
    let mut json = serde_json::to_vec(&document).context("encoding the trace")?;
    json.push(b'\n');
    write_output(&args.output, &json)?;
    let unreadable = [xid.unreadable, cuda.unreadable, driver.unreadable].concat();
    warn_unreadable("export-trace", &unreadable);
    eprintln!(
        "gpuship export-trace: {} events ({} CUDA calls, {} of them entry-only; {} XIDs; {} driver \
         operations; {} names) from {} file(s), {range}, to {}",
        counts.total(),
        counts.cuda_complete + counts.cuda_instant,
        counts.cuda_instant,
        counts.xid,
        counts.driver,
        counts.metadata,
        xid.files_read + cuda.files_read + driver.files_read,
        where_to(&args.output)
    );
    Ok(())
}

/// `gpuship report`.
pub fn report(args: &ReportArgs) -> anyhow::Result<()> {
    let (lake, range) = open(&args.range)?;
    let (data, page) = report::build(&lake, range)?;
    write_output(&args.output, page.as_bytes())?;
    warn_unreadable("report", &data.totals.unreadable);
    eprintln!(
        "gpuship report: {} XIDs in {} incident(s), {} CUDA calls ({} failed), {range}, {} bytes of HTML to {}",
        data.totals.xids,
        data.incidents.len(),
        data.totals.cuda_calls,
        data.totals.cuda_failures,
        page.len(),
        where_to(&args.output)
    );
    if data.accounting.documents == 0 {
        eprintln!("gpuship report: no accounting documents under _accounting/ for this range; delivery is not shown");
    }
    Ok(())
}
