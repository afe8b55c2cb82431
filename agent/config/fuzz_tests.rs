//! Fuzzing of the config loader: arbitrary TOML-ish text, byte-level mutations of the shipped
//! config files, and structured configs (the shipped files' keys given random values of every
//! type, type limits included) load and validate without a panic, and every error says where
//! in the file it is (a line).
//!
//! A short budget runs with the unit tests; `PROPTEST_CASES=N` runs N cases per property
//! (docs/fuzzing.md). Failing seeds are kept in `proptest-regressions/config/fuzz_tests.txt`.

use std::path::Path;

use proptest::prelude::*;
use toml::{Table, Value};

use super::*;

/// Cases per property in the normal test run, unless `PROPTEST_CASES` says otherwise.
const SHORT_BUDGET: u32 = 256;

fn budget() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = SHORT_BUDGET;
    }
    config
}

/// The documented default and every example: the seeds of the mutations.
fn corpus() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut files = vec![root.join("gpuship.toml")];
    let mut examples: Vec<_> = std::fs::read_dir(root.join("examples"))
        .expect("config/examples")
        .map(|entry| entry.expect("an example").path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    examples.sort();
    files.extend(examples);
    files
        .iter()
        .map(|path| std::fs::read_to_string(path).expect("a config file"))
        .collect()
}

/// Loads and validates `text`; any error must name a line.
fn check_loads_or_locates(text: &str) -> Result<(), TestCaseError> {
    match Config::from_toml(text, Path::new("fuzz.toml")) {
        Ok(config) => {
            // What loaded is valid on its own too (validation is pure and repeatable).
            prop_assert!(config.problems(text).is_empty());
        }
        Err(ConfigError::Parse { message, .. }) => {
            prop_assert!(message.contains("line "), "no line in: {message}");
        }
        Err(ConfigError::Invalid { problems, .. }) => {
            prop_assert!(!problems.is_empty());
            for problem in &problems {
                prop_assert!(problem.line.is_some(), "no line for {problem} in:\n{text}");
                prop_assert!(!problem.key.is_empty(), "no key for {problem}");
            }
        }
        Err(err @ ConfigError::Read { .. }) => prop_assert!(false, "no file was read: {err}"),
    }
    Ok(())
}

/// Text made of TOML's punctuation, keys of the real file, values and noise.
fn tomlish_text() -> impl Strategy<Value = String> {
    let fixed = prop::sample::select(vec![
        "[agent]\n",
        "[[sinks]]\n",
        "[sources.cuda]\n",
        "type = \"parquet\"\n",
        "type = \"kafka\"\n",
        "kinds = [\"xid\"]\n",
        "max_events = ",
        "stats_interval_secs = ",
        "name = ",
        "18446744073709551615",
        "-9223372036854775808",
        "\"\\u0000\\n\\\"\"",
        "'''\n",
        "\"\"\"\n",
        "{ env = \"X\" }",
        "= ",
        "[",
        "]",
        ",",
        ".",
        "#",
        "\n",
        " ",
    ])
    .prop_map(String::from);
    let token = prop_oneof![
        4 => fixed,
        1 => "[a-z_]{1,12}".prop_map(String::from),
        1 => "[0-9.e+-]{1,8}".prop_map(String::from),
        1 => "\\PC{1,4}".prop_map(String::from),
    ];
    prop::collection::vec(token, 0..60).prop_map(|tokens| tokens.concat())
}

/// A few edits of `text`: bytes replaced, removed, inserted; lines dropped and repeated.
fn mutated(text: String, edits: Vec<(u8, usize, u8)>) -> String {
    let mut bytes = text.into_bytes();
    for (op, at, byte) in edits {
        let at = at % (bytes.len() + 1);
        match op % 4 {
            0 if at < bytes.len() => bytes[at] = byte,
            1 if at < bytes.len() => {
                bytes.remove(at);
            }
            2 => bytes.insert(at, byte),
            _ => {
                // Repeat the line around `at` (a duplicate key or table).
                let start = bytes[..at]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                let end = bytes[at..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |i| at + i + 1);
                let line = bytes[start..end].to_vec();
                bytes.splice(end..end, line);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A value of any TOML type, with the limits and the strings that broke things before.
fn any_value() -> impl Strategy<Value = Value> {
    let integer = prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        Just(-1i64),
        Just(0i64),
        Just(1i64),
        Just(1i64 << 32),
        0i64..100_000,
        any::<i64>(),
    ];
    let text = prop_oneof![
        Just(String::new()),
        Just("../../escape".to_string()),
        Just("a\"b\nc\\d".to_string()),
        Just("${env:NOPE}".to_string()),
        Just("{host}/{kind}".to_string()),
        Just("http://user:pw@127.0.0.1:1".to_string()),
        Just("127.0.0.1:0".to_string()),
        Just("xid".to_string()),
        Just("cuda".to_string()),
        "\\PC{0,20}",
    ];
    let leaf = prop_oneof![
        integer.prop_map(Value::Integer),
        any::<f64>().prop_map(Value::Float),
        any::<bool>().prop_map(Value::Boolean),
        text.prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}|env|file", inner, 0..3)
                .prop_map(|map| Value::Table(map.into_iter().collect())),
        ]
    })
}

/// Paths to every value of `table` (`[i]` for array elements).
fn leaf_paths(table: &Table, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    for (key, value) in table {
        prefix.push(key.clone());
        match value {
            Value::Table(inner) => leaf_paths(inner, prefix, out),
            Value::Array(items) if items.iter().all(Value::is_table) && !items.is_empty() => {
                for (i, item) in items.iter().enumerate() {
                    prefix.push(format!("[{i}]"));
                    if let Value::Table(inner) = item {
                        leaf_paths(inner, prefix, out);
                    }
                    prefix.pop();
                }
            }
            _ => out.push(prefix.clone()),
        }
        prefix.pop();
    }
}

/// Sets (`Some`) or removes (`None`) the value at `path`.
fn set_path(table: &mut Table, path: &[String], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = table;
    let mut parents = parents.iter().peekable();
    while let Some(key) = parents.next() {
        let next = current.get_mut(key);
        let next = match (next, parents.peek()) {
            (Some(Value::Array(items)), Some(index)) => {
                let i: usize = index.trim_matches(['[', ']']).parse().unwrap_or(0);
                parents.next();
                items.get_mut(i)
            }
            (next, _) => next,
        };
        match next {
            Some(Value::Table(inner)) => current = inner,
            _ => return,
        }
    }
    match value {
        Some(value) => current.insert(last.clone(), value),
        None => current.remove(last),
    };
}

/// Valid TOML spellings of a table header that the file may use.
fn respell_headers(text: &str, style: u8) -> String {
    text.lines()
        .map(|line| match (line.starts_with('['), style % 3) {
            (true, 1) => line.replace("[[", "[[ ").replace("]]", " ]]"),
            (true, 2) => format!("{line}  # a comment"),
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

proptest! {
    #![proptest_config(budget())]

    #[test]
    fn tomlish_text_loads_or_locates_its_error(text in tomlish_text()) {
        check_loads_or_locates(&text)?;
    }

    #[test]
    fn mutated_config_files_load_or_locate_their_error(
        file in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6),
    ) {
        let corpus = corpus();
        let text = mutated(corpus[file.index(corpus.len())].clone(), edits);
        check_loads_or_locates(&text)?;
    }

    #[test]
    fn structured_configs_load_or_locate_their_errors(
        file in any::<prop::sample::Index>(),
        changes in prop::collection::vec((any::<prop::sample::Index>(), prop::option::weighted(0.9, any_value())), 1..5),
        style in any::<u8>(),
    ) {
        let corpus = corpus();
        let mut table: Table = corpus[file.index(corpus.len())].parse().expect("shipped files parse");
        let mut paths = Vec::new();
        leaf_paths(&table, &mut Vec::new(), &mut paths);
        prop_assume!(!paths.is_empty());
        for (which, value) in changes {
            set_path(&mut table, &paths[which.index(paths.len())], value);
        }
        let text = toml::to_string(&table).expect("a table serializes");
        check_loads_or_locates(&respell_headers(&text, style))?;
    }
}

/// Found by `structured_configs_load_or_locate_their_errors`: a table header with a comment
/// after it or spaces inside its brackets (both valid TOML) left the problem without a line.
#[test]
fn regression_problems_under_respelled_headers_have_lines() {
    let text = "[agent]\n\n[sources.cuda]  # tuned\nring_size_mib = 3\n\n[[ sinks ]]\ntype = \"blackhole\"\nkinds = []\n";
    let Err(ConfigError::Invalid { problems, .. }) = Config::from_toml(text, Path::new("x.toml"))
    else {
        panic!("ring_size_mib = 3 and kinds = [] are invalid");
    };
    let lines: Vec<_> = problems.iter().map(|p| (p.key.as_str(), p.line)).collect();
    assert_eq!(
        lines,
        [
            ("sources.cuda.ring_size_mib", Some(4)),
            ("sinks[0].kinds", Some(8))
        ]
    );
}
