//! Checks of a configuration against the host it is loaded on: what the operator named
//! explicitly must be there. These are the partial starts that are refused (docs/operations.md,
//! "Partial starts"): `gpuship run` would otherwise start without the part the file asked for
//! and exit 0. What is discovered (`libraries = ["auto"]`, the XID tracepoint) may be absent:
//! the agent says so and runs with the rest.

use super::parse::Lines;
use super::{Config, Problem};

/// Every problem of `config` on this host: each source checks its own table
/// ([`SourcesConfig::host_problems`](crate::sources::config::SourcesConfig::host_problems)).
pub(super) fn problems(config: &Config, lines: &Lines) -> Vec<Problem> {
    config
        .sources
        .host_problems()
        .into_iter()
        .map(|(table, key, message)| {
            let key = format!("{table}.{key}");
            Problem {
                line: lines.find(&key),
                key,
                message,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn host_problems(text: &str) -> Vec<String> {
        let config = Config::from_toml(text, Path::new("t.toml")).unwrap();
        problems(&config, &Lines::of(text))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn an_explicit_library_that_is_not_there_is_a_problem_auto_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let present = dir.path().join("libcuda.so.1");
        std::fs::write(&present, b"\x7fELF").unwrap();
        let text = format!(
            "[sources.cuda]\nlibraries = [\n  \"auto\",\n  \"{}\",\n  \"/nonexistent/libcuda.so.1\",\n  \"{}\",\n]\n",
            present.display(),
            dir.path().display()
        );
        assert_eq!(
            host_problems(&text),
            [
                "line 5: sources.cuda.libraries[2]: /nonexistent/libcuda.so.1 does not exist on this host (use \"auto\" to search the usual places, or [sources.cuda] enabled = false)".to_string(),
                format!("line 6: sources.cuda.libraries[3]: {} is not a file", dir.path().display()),
            ]
        );
        assert!(host_problems("[sources.cuda]\nlibraries = [\"auto\"]\n").is_empty());
        // A disabled source needs nothing.
        assert!(host_problems(
            "[sources.cuda]\nenabled = false\nlibraries = [\"/nonexistent/libcuda.so.1\"]\n"
        )
        .is_empty());
    }
}
