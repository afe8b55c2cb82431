//! Views of the data lake for people: `gpuship export-trace` (a Perfetto/Chrome trace of a time
//! range), `gpuship report` (one self-contained HTML page) and `gpuship query` (SQL). Both read the lake through
//! [`crate::Lake`] and never touch the running agent or write into the lake.
//!
//! [`rows`] and [`cuda_stats`] turn record batches into typed rows, read from the [`columns`]
//! each needs; [`histogram`] merges call durations for quantiles; [`trace`], [`report`] and
//! [`query`] build the outputs; this file is the command-line glue (range, lake, output file).

pub mod columns;
pub mod cuda_stats;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod histogram;
pub mod query;
pub mod report;
pub mod rows;
pub mod text;
pub mod trace;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use gpuship_model::EventKind;
use serde_json::{json, Map};

use crate::args::{ExportTraceArgs, RangeArgs, ReportArgs};
use crate::range::rfc3339;
use crate::{Lake, TimeRange, Unreadable};
pub use query::query;

/// Exit status of a view that found no readable data file in its range (docs/views.md): a
/// wrong `--data`, a range before the agent ran, or an object store that lists nothing must
/// not pass for a quiet, healthy fleet.
pub const EXIT_NO_DATA: u8 = 3;

/// Says loudly that nothing was found, and why that may be; the exit status to return.
fn no_data(command: &str, lake: &Lake, range: &TimeRange, unreadable: usize) -> ExitCode {
    let skipped = if unreadable > 0 {
        format!(" ({unreadable} file(s) or folder(s) found there could not be read, listed above)")
    } else {
        String::new()
    };
    eprintln!(
        "gpuship {command}: NO DATA: no readable Parquet file in {} for {range}{skipped}; \
         nothing was written. Check --data (the Parquet sink's path), --since/--until, and for \
         s3:// the endpoint (AWS_ENDPOINT or AWS_ENDPOINT_URL) and credentials. Exit status {EXIT_NO_DATA}.",
        lake.location()
    );
    ExitCode::from(EXIT_NO_DATA)
}

fn open(args: &RangeArgs) -> anyhow::Result<(Lake, TimeRange)> {
    // Milliseconds are plenty for a range people type, and keep its printed form short.
    let now = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 3);
    let range =
        TimeRange::parse(&args.since, args.until.as_deref(), now).context("--since/--until")?;
    let lake = Lake::open(&args.data)?
        .with_limits(args.limits.limits())
        .from_iceberg(args.iceberg);
    Ok((lake, range))
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

/// `gpuship export-trace`; [`EXIT_NO_DATA`] when no file of the range could be read.
pub fn export_trace(args: &ExportTraceArgs) -> anyhow::Result<ExitCode> {
    let (lake, range) = open(&args.range)?;
    let mut read = lake.tables(
        &[
            EventKind::Xid,
            EventKind::Cuda,
            EventKind::Driver,
            EventKind::CudaStats,
        ],
        &range,
    )?;
    let xid = read.rows(EventKind::Xid)?;
    let cuda = read.rows(EventKind::Cuda)?;
    let driver = read.rows(EventKind::Driver)?;
    let stats_sql = format!(
        "SELECT {} FROM cuda_stats",
        columns::select_list(cuda_stats::CUDA_STATS_COLUMNS)
    );
    let stats = read.fold(EventKind::CudaStats, &stats_sql, Vec::new, |kept, batch| {
        kept.extend(cuda_stats::cuda_stats(&[batch]));
    })?;
    let files_read = read.files_read();
    let unreadable = read.unreadable();
    warn_unreadable("export-trace", &unreadable);
    if files_read == 0 {
        return Ok(no_data("export-trace", &lake, &range, unreadable.len()));
    }
    let mut context = Map::new();
    context.insert(
        "generator".into(),
        json!(concat!("gpuship export-trace ", env!("CARGO_PKG_VERSION"))),
    );
    context.insert("lake".into(), json!(lake.location()));
    context.insert("since".into(), json!(rfc3339(range.since())));
    context.insert("until".into(), json!(rfc3339(range.until())));
    let (document, counts) = trace::build(
        trace::Rows {
            calls: &rows::cuda_calls(&cuda),
            xids: &rows::xids(&xid),
            driver: &rows::driver_ops(&driver),
            stats: &stats,
        },
        context,
    );
    let mut json = serde_json::to_vec(&document).context("encoding the trace")?;
    json.push(b'\n');
    write_output(&args.output, &json)?;
    // Said only when there are some, so lines of lakes without them read as they did.
    let recorded = match counts.flight_recorder {
        0 => String::new(),
        n => format!(", {n} of them from the flight recorder"),
    };
    let suspects = match counts.suspects {
        0 => String::new(),
        n => format!(" with {n} suspect kernels"),
    };
    eprintln!(
        "gpuship export-trace: {} events ({} CUDA calls, {} of them entry-only{recorded}; {} XIDs{suspects}; \
         {} driver operations; {} names; {} counter samples from {} cuda_stats rows) from \
         {files_read} file(s), {range}, to {}",
        counts.total(),
        counts.cuda_complete + counts.cuda_instant,
        counts.cuda_instant,
        counts.xid,
        counts.driver,
        counts.metadata,
        counts.counters,
        counts.stats_rows,
        where_to(&args.output)
    );
    Ok(ExitCode::SUCCESS)
}

/// `gpuship report`; [`EXIT_NO_DATA`] (and no page) when no file of the range could be read.
pub fn report(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let (lake, range) = open(&args.range)?;
    let (data, page) = report::build(&lake, range)?;
    warn_unreadable("report", &data.totals.unreadable);
    if data.totals.files_read == 0 {
        return Ok(no_data(
            "report",
            &lake,
            &range,
            data.totals.unreadable.len(),
        ));
    }
    write_output(&args.output, page.as_bytes())?;
    let recorded = match data.totals.flight_recorded {
        0 => String::new(),
        n => format!(", {n} flight-recorder calls beside them (not counted)"),
    };
    eprintln!(
        "gpuship report: {} XIDs in {} incident(s), {} CUDA calls ({} failed), {} of them from cuda_stats{recorded}, from {} file(s), {range}, {} bytes of HTML to {}",
        data.totals.xids,
        data.incidents.len(),
        data.totals.cuda_calls,
        data.totals.cuda_failures,
        data.totals.cuda_aggregated,
        data.totals.files_read,
        page.len(),
        where_to(&args.output)
    );
    if data.accounting.documents == 0 {
        eprintln!("gpuship report: no accounting documents under _accounting/ for this range; delivery is not shown");
    }
    Ok(ExitCode::SUCCESS)
}
