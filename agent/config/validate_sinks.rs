//! Pure validation of the `[[sinks]]` entries: each sink's own values and ranges, its name
//! (a folder name under `state_dir` and a metric label), and collisions between sinks (one
//! name, one Parquet root or one jsonl file for two sinks).

use std::path::{Component, Path, PathBuf};

use gpuship_sinks::EventKind;

use super::validate::Report;
use super::{sink_name_problem, sink_names, Config, SinkConfig, SinkEntry};

impl Config {
    /// Problems of every sink; `sink_index` is each entry's position in the file.
    pub(super) fn sink_problems(&self, report: &mut Report, sink_index: &[usize]) {
        let names = sink_names(&self.sinks);
        let mut parquet_roots: Vec<(String, usize)> = Vec::new();
        let mut jsonl_files: Vec<(PathBuf, usize)> = Vec::new();
        for (position, entry) in self.sinks.iter().enumerate() {
            let index = sink_index.get(position).copied().unwrap_or(position);
            let table = format!("sinks[{index}]");
            let name = &names[position];
            // A default name is the type (numbered): always a valid name, so only names
            // written in the file can fail; duplicates are reported at the later sink.
            if let Some(problem) = sink_name_problem(name) {
                report.add(&table, "name", problem);
            } else if let Some(first) = names[..position].iter().position(|n| n == name) {
                let first = sink_index.get(first).copied().unwrap_or(first);
                let origin = if entry.options.name.is_some() {
                    "its `name`"
                } else {
                    "its default name"
                };
                report.add(
                    &table,
                    "name",
                    format!("{name:?} ({origin}) is already the name of sinks[{first}]; names must be unique"),
                );
            }
            options_problems(report, &table, entry);
            destination_problems(report, &table, &entry.sink);
            match &entry.sink {
                SinkConfig::Parquet(parquet) => {
                    let root = parquet_root(&parquet.path);
                    if let Some((_, first)) = parquet_roots.iter().find(|(r, _)| *r == root) {
                        report.add(
                            &table,
                            "path",
                            format!(
                                "{} is the same directory as the path of sinks[{first}] ({root})",
                                parquet.path.display()
                            ),
                        );
                    }
                    parquet_roots.push((root, index));
                }
                SinkConfig::Jsonl(jsonl) => {
                    // Standard output may be shared: each batch is written whole.
                    if let Some(file) = jsonl.file() {
                        let file = normalized(file);
                        if let Some((_, first)) = jsonl_files.iter().find(|(f, _)| *f == file) {
                            report.add(
                                &table,
                                "path",
                                format!(
                                    "{} is also the file of sinks[{first}]: two sinks cannot append to one file",
                                    file.display()
                                ),
                            );
                        }
                        jsonl_files.push((file, index));
                    }
                }
                _ => {}
            }
        }
    }
}

/// Problems of the keys every sink has.
fn options_problems(report: &mut Report, table: &str, entry: &SinkEntry) {
    let options = &entry.options;
    if options.kinds.is_empty() {
        report.add(
            table,
            "kinds",
            format!("needs at least one of {}", EventKind::quoted_names()),
        );
    }
    if options.cuda_filter.is_some() && !options.kinds.contains(&EventKind::Cuda) {
        report.add(
            table,
            "cuda_filter",
            "set, but the sink does not take \"cuda\" events",
        );
    }
    if let Some(filter) = &options.cuda_filter {
        if !filter.all && !filter.failed && filter.slower_than_ns.is_none() {
            report.add(
                table,
                "cuda_filter",
                "keeps nothing: set failed = true and/or slower_than_ns",
            );
        }
        if let Some(threshold) = filter.slower_than_ns {
            // One day: longer thresholds keep nothing a trace would show.
            report.range(
                table,
                "cuda_filter.slower_than_ns",
                threshold,
                0..=86_400_000_000_000,
            );
        }
    }
    for (key, message) in options
        .buffer
        .problems()
        .into_iter()
        .chain(options.spool.problems())
    {
        report.add(table, key, message);
    }
}

/// Problems of the type-specific keys.
fn destination_problems(report: &mut Report, table: &str, sink: &SinkConfig) {
    for (key, message) in sink.sink_type().problems() {
        report.add(table, &key, message);
    }
}

/// A Parquet root as compared between sinks: an `s3://` URL without trailing slashes, or a
/// local path made absolute and normalized.
fn parquet_root(path: &Path) -> String {
    match path.to_str() {
        Some(url) if url.starts_with("s3://") => {
            let (bucket, prefix) = url["s3://".len()..]
                .split_once('/')
                .unwrap_or((&url["s3://".len()..], ""));
            let prefix: Vec<&str> = prefix.split('/').filter(|s| !s.is_empty()).collect();
            format!("s3://{bucket}/{}", prefix.join("/"))
        }
        _ => normalized(path).display().to_string(),
    }
}

/// `path` made absolute (against the working directory) with `.`, `..`, repeated and
/// trailing separators resolved lexically: `a/../b`, `./b` and `b/` are all `<cwd>/b`.
/// Symbolic links are not followed (validation does not touch the file system).
fn normalized(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_compared_after_normalization() {
        let cwd = std::env::current_dir().unwrap();
        for spelling in ["b", "./b", "b/", "a/../b", "a//..//b/.", "./x/../b//"] {
            assert_eq!(normalized(Path::new(spelling)), cwd.join("b"), "{spelling}");
        }
        assert_eq!(normalized(Path::new("/d/./e/../f/")), PathBuf::from("/d/f"));
        assert_eq!(normalized(Path::new("/../d")), PathBuf::from("/d"));
        assert_eq!(
            parquet_root(Path::new("s3://bucket/lake/")),
            parquet_root(Path::new("s3://bucket//lake"))
        );
        assert_ne!(
            parquet_root(Path::new("s3://bucket/lake")),
            parquet_root(Path::new("s3://other/lake"))
        );
    }
}
