//! A corpus of hostile configurations (tests/fixtures/configs/hostile/*.toml): type errors,
//! negative and huge values, unknown keys in nested tables, bad sink names, colliding sinks,
//! header values that cannot be sent, explicit paths that do not exist. Each file ends with
//! `# expect: line N: KEY ~ FRAGMENT` lines: `gpuship validate` must exit 1 and list exactly
//! these problems, in this order, each message containing its fragment.

use std::path::Path;
use std::process::Command;

use crate::support::agent::binary;
use crate::support::repo_root;

/// `(line, key, message)` of each problem `validate` printed.
fn listed_problems(stderr: &str) -> Vec<(Option<usize>, String, String)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("  - "))
        .map(|problem| {
            let (line, rest) = match problem
                .strip_prefix("line ")
                .and_then(|r| r.split_once(": "))
            {
                Some((n, rest)) => (n.parse().ok(), rest),
                None => (None, problem),
            };
            let (key, message) = rest.split_once(": ").unwrap_or((rest, ""));
            (line, key.to_string(), message.to_string())
        })
        .collect()
}

fn expected_problems(text: &str) -> Vec<(Option<usize>, String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect: line "))
        .map(|l| {
            let (line, rest) = l.split_once(": ").expect("line N: key ~ fragment");
            let (key, fragment) = rest.split_once(" ~ ").expect("key ~ fragment");
            (line.parse().ok(), key.to_string(), fragment.to_string())
        })
        .collect()
}

fn check(path: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).unwrap();
    let expected = expected_problems(&text);
    assert!(!expected.is_empty(), "{}: no expectations", path.display());
    let output = Command::new(binary())
        .args(["validate", "--config"])
        .arg(path)
        .current_dir(repo_root())
        .output()
        .expect("run gpuship");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let listed = listed_problems(&stderr);
    let name = path.display();
    if output.status.code() != Some(1) {
        return Err(format!("{name}: exit {:?}\n{stderr}", output.status));
    }
    let places = |list: &[(Option<usize>, String, String)]| {
        list.iter()
            .map(|(line, key, _)| format!("line {}: {key}", line.unwrap_or(0)))
            .collect::<Vec<_>>()
    };
    if places(&listed) != places(&expected) {
        return Err(format!(
            "{name}: listed\n  {}\nexpected\n  {}\n{stderr}",
            places(&listed).join("\n  "),
            places(&expected).join("\n  ")
        ));
    }
    for ((_, key, message), (_, _, fragment)) in listed.iter().zip(&expected) {
        if !message.contains(fragment.as_str()) {
            return Err(format!("{name}: {key}: {message:?} lacks {fragment:?}"));
        }
    }
    if !stderr.contains(&format!("{} problem(s)", expected.len())) {
        return Err(format!("{name}: count not stated\n{stderr}"));
    }
    Ok(expected.len())
}

#[test]
fn every_hostile_config_is_refused_with_every_problem_at_its_key_and_line() {
    let dir = repo_root().join("tests/fixtures/configs/hostile");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    let mut failures = Vec::new();
    let mut problems = 0;
    for path in &paths {
        match check(path) {
            Ok(n) => problems += n,
            Err(failure) => failures.push(failure),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(paths.len(), 12);
    assert_eq!(problems, 64);
}
