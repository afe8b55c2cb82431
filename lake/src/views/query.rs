//! `gpuship query "SQL"`: the lake's tables of a range (`xid`, `cuda`, `driver`) for anyone
//! without DuckDB, printed as a table, CSV or JSON on standard output.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use arrow_array::RecordBatch;
use datafusion::arrow::{csv, json, util::pretty};
use gpuship_model::EventKind;

use super::{no_data, open, warn_unreadable};
use crate::args::{QueryArgs, QueryFormat};
use crate::QueryError;

/// Exit status of a query whose SQL does not parse or does not fit the tables.
pub const EXIT_SQL_ERROR: u8 = 2;

/// `gpuship query`; [`EXIT_SQL_ERROR`] for wrong SQL, [`super::EXIT_NO_DATA`] when no file of
/// the range could be read.
pub fn query(args: &QueryArgs) -> anyhow::Result<ExitCode> {
    let (lake, range) = open(&args.range)?;
    // Every kind is a table (xid, cuda, driver, cuda_stats).
    let mut read = lake.tables(EventKind::ALL, &range)?;
    let batches = match read.query(&args.sql) {
        Ok(batches) => batches,
        Err(QueryError::Sql(err)) => {
            eprintln!("gpuship query: SQL error: {err}");
            return Ok(ExitCode::from(EXIT_SQL_ERROR));
        }
        Err(err) => return Err(err).context("gpuship query"),
    };
    let unreadable = read.unreadable();
    warn_unreadable("query", &unreadable);
    if read.files_read() == 0 {
        return Ok(no_data("query", &lake, &range, unreadable.len()));
    }
    let mut out = std::io::stdout().lock();
    print(&mut out, &batches, args.format).context("writing to standard output")?;
    out.flush().context("writing to standard output")?;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    eprintln!(
        "gpuship query: {rows} row(s) from {} file(s), {range}",
        read.files_read()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes `batches` to `out` in `format`.
pub fn print(
    out: &mut dyn Write,
    batches: &[RecordBatch],
    format: QueryFormat,
) -> anyhow::Result<()> {
    match format {
        QueryFormat::Table => writeln!(out, "{}", pretty::pretty_format_batches(batches)?)?,
        QueryFormat::Csv => {
            let mut writer = csv::WriterBuilder::new().with_header(true).build(out);
            for batch in batches {
                writer.write(batch)?;
            }
        }
        QueryFormat::Json => {
            let mut writer = json::ArrayWriter::new(out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
    }
    Ok(())
}
