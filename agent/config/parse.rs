//! From TOML text to typed sections, collecting every type error with its key and line.
//!
//! serde stops at the first error of a value, and an error inside a `[[sinks]]` table loses its
//! place when the table goes through an internally tagged enum. So the document is parsed once
//! into a tree that keeps the span of every key and value, each section is deserialized from
//! its subtree, and after an error the offending entry is taken out (its default applies) and
//! the section deserialized again, until it succeeds: every wrong key is reported, each with
//! its dotted path and line. The same tree gives the line of any key for value problems.

use std::collections::HashMap;
use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use super::Problem;

/// A parsed document: its tree, and the line of every key in it.
pub(super) struct Document<'i> {
    pub root: Spanned<DeTable<'i>>,
    pub lines: Lines,
}

impl<'i> Document<'i> {
    /// Parses `text`; a syntax error is returned as the parser's message (line, column).
    pub fn parse(text: &'i str) -> Result<Self, String> {
        let root = DeTable::parse(text).map_err(|err| err.to_string())?;
        let mut lines = Lines::default();
        for (key, value) in root.get_ref().iter() {
            lines.index(text, key.get_ref(), key.span(), value);
        }
        Ok(Document { root, lines })
    }
}

/// The 1-based line of every key path in a document (`sources.cuda.libraries`,
/// `sources.cuda.libraries[1]`, `sinks[0].buffer.max_events`).
#[derive(Debug, Default)]
pub(crate) struct Lines(HashMap<String, usize>);

impl Lines {
    /// Builds the index of `text`; empty when it does not parse.
    pub fn of(text: &str) -> Lines {
        Document::parse(text).map(|d| d.lines).unwrap_or_default()
    }

    fn index(&mut self, text: &str, path: &str, key_span: Range<usize>, value: &Spanned<DeValue>) {
        self.0
            .insert(path.to_string(), line_of(text, key_span.start));
        match value.get_ref() {
            DeValue::Table(table) => {
                for (key, child) in table.iter() {
                    let child_path = format!("{path}.{}", key.get_ref());
                    self.index(text, &child_path, key.span(), child);
                }
            }
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    // An element's own span: the `[[sinks]]` header, or the value in a list.
                    self.index(text, &format!("{path}[{i}]"), item.span(), item);
                }
            }
            _ => {}
        }
    }

    /// The line of the key `path` itself, when the document writes it.
    pub fn line_of_key(&self, path: &str) -> Option<usize> {
        self.0.get(path).copied()
    }

    /// The line of `path`, else of the nearest enclosing table written in the file (a key left
    /// at its default is reported at its table); None when none of it is written.
    pub fn find(&self, path: &str) -> Option<usize> {
        let unquoted = path.replace('"', "");
        let mut path = unquoted.as_str();
        loop {
            if let Some(line) = self.0.get(path) {
                return Some(*line);
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }
}

/// 1-based line of byte `offset` in `text`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset.min(text.len()))
        .unwrap_or(text)
        .matches('\n')
        .count()
        + 1
}

/// Where problems of one document go.
pub(super) struct Problems<'a> {
    pub text: &'a str,
    pub list: Vec<Problem>,
}

impl Problems<'_> {
    pub fn at(&mut self, key: impl Into<String>, offset: usize, message: impl Into<String>) {
        self.list.push(Problem {
            key: key.into(),
            line: Some(line_of(self.text, offset)),
            message: message.into(),
        });
    }
}

/// Most errors one section may report (a bound on the retries, not a real limit).
const MAX_ERRORS_PER_SECTION: usize = 64;

/// Deserializes `value` (found at `path`) as `T`. Each error is recorded with the key it
/// names; the key is then taken out and `T` tried again. None when the error is about the
/// value as a whole (e.g. a required key missing): nothing can be taken out to go on.
pub(super) fn typed<T: DeserializeOwned>(
    mut value: Spanned<DeValue<'_>>,
    path: &str,
    problems: &mut Problems,
) -> Option<T> {
    for _ in 0..MAX_ERRORS_PER_SECTION {
        let err = match T::deserialize(ValueDeserializer::from(value.clone())) {
            Ok(typed) => return Some(typed),
            Err(err) => err,
        };
        let span = err.span().unwrap_or_else(|| value.span());
        match take_out(&mut value, &span) {
            Some(found) => problems.at(join(path, &found.path), found.offset, err.message()),
            None => {
                problems.at(path, value.span().start, err.message());
                return None;
            }
        }
    }
    None
}

fn join(path: &str, rest: &str) -> String {
    match (path.is_empty(), rest.starts_with('[')) {
        (true, _) => rest.to_string(),
        (false, true) => format!("{path}{rest}"),
        (false, false) => format!("{path}.{rest}"),
    }
}

/// The entry an error span points at, relative to the value searched.
struct Found {
    path: String,
    /// Where to report it (the key, or the list element).
    offset: usize,
    /// Whether it was taken out already (false: the caller takes out the key holding it).
    removed: bool,
}

fn within(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && outer.start < outer.end
}

/// Whether `span` falls anywhere in `value`'s subtree (tables written under a header have
/// their entries outside the header's span, so the search descends).
fn holds(value: &Spanned<DeValue>, span: &Range<usize>) -> bool {
    within(&value.span(), span)
        || match value.get_ref() {
            DeValue::Table(table) => table
                .iter()
                .any(|(k, v)| within(&k.span(), span) || holds(v, span)),
            DeValue::Array(items) => items.iter().any(|item| holds(item, span)),
            _ => false,
        }
}

/// Finds the deepest table entry holding `span` and takes it out of `value`.
fn take_out(value: &mut Spanned<DeValue>, span: &Range<usize>) -> Option<Found> {
    match value.get_mut() {
        DeValue::Table(table) => {
            let key = table
                .iter()
                .find(|(k, v)| within(&k.span(), span) || holds(v, span))
                .map(|(k, _)| k.clone())?;
            let key_name = key.get_ref().to_string();
            let child = table.get_mut(key.get_ref().as_ref())?;
            let inner = if within(&key.span(), span) {
                None
            } else {
                take_out(child, span)
            };
            match inner {
                Some(found) if found.removed => Some(Found {
                    path: join(&key_name, &found.path),
                    ..found
                }),
                inner => {
                    table.remove(key.get_ref().as_ref());
                    Some(Found {
                        path: inner
                            .as_ref()
                            .map_or(key_name.clone(), |f| join(&key_name, &f.path)),
                        offset: inner.map_or(key.span().start, |f| f.offset),
                        removed: true,
                    })
                }
            }
        }
        DeValue::Array(items) => {
            let index = items.iter().position(|item| holds(item, span))?;
            let item = &mut items.as_mut()[index];
            let offset = item.span().start;
            match take_out(item, span) {
                Some(found) if found.removed => Some(Found {
                    path: format!("[{index}]{}", dotted(&found.path)),
                    ..found
                }),
                _ => Some(Found {
                    path: format!("[{index}]"),
                    offset,
                    removed: false,
                }),
            }
        }
        _ => None,
    }
}

fn dotted(path: &str) -> String {
    if path.is_empty() || path.starts_with('[') {
        path.to_string()
    } else {
        format!(".{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        #[serde(default)]
        size: u64,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Section {
        #[serde(default)]
        a: u64,
        #[serde(default)]
        b: String,
        #[serde(default)]
        list: Vec<u32>,
        #[serde(default)]
        inner: Option<Inner>,
    }

    fn section(text: &str) -> (Option<Section>, Vec<String>) {
        let doc = Document::parse(text).unwrap();
        let value = doc.root.get_ref().get("s").unwrap().clone();
        let mut problems = Problems {
            text,
            list: Vec::new(),
        };
        let typed = typed::<Section>(value, "s", &mut problems);
        let list = problems.list.iter().map(ToString::to_string).collect();
        (typed, list)
    }

    #[test]
    fn every_wrong_key_is_reported_and_the_rest_kept() {
        let (typed, mut problems) = section(
            "[s]\na = -5\nb = 3\nlist = [1, \"x\", 3]\nbogus = true\n[s.inner]\nsize = 1.5\n",
        );
        problems.sort();
        assert_eq!(
            problems,
            [
                "line 2: s.a: invalid value: integer `-5`, expected u64",
                "line 3: s.b: invalid type: integer `3`, expected a string",
                "line 4: s.list[1]: invalid type: string \"x\", expected u32",
                "line 5: s.bogus: unknown field `bogus`, expected one of `a`, `b`, `list`, `inner`",
                "line 7: s.inner.size: invalid type: floating point `1.5`, expected u64",
            ]
        );
        assert_eq!(
            typed,
            Some(Section {
                a: 0,
                b: String::new(),
                list: vec![],
                inner: Some(Inner { size: 0 }),
            })
        );
    }

    #[test]
    fn a_wrong_value_of_a_whole_table_is_reported_at_the_table() {
        let (typed, problems) = section("s = 5\n");
        assert_eq!(typed, None);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("line 1: s: invalid type"),
            "{problems:?}"
        );
    }

    #[test]
    fn lines_fall_back_to_the_enclosing_table() {
        let text = "[agent]\nx = 1\n\n[[sinks]]\ntype = \"jsonl\"\n[sinks.buffer]\nmax_events = 1\n\n[[sinks]]\ntype = \"otlp\"\nheaders = { \"a.b\" = \"v\" }\n";
        let lines = Lines::of(text);
        assert_eq!(lines.find("agent.x"), Some(2));
        assert_eq!(lines.find("agent.state_dir"), Some(1));
        assert_eq!(lines.find("sinks[0].buffer.max_events"), Some(7));
        assert_eq!(lines.find("sinks[0].buffer.max_bytes"), Some(6));
        assert_eq!(lines.find("sinks[0].spool.max_size"), Some(4));
        assert_eq!(lines.find("sinks[1].headers.a.b"), Some(11));
        assert_eq!(lines.find("sinks[1].headers.\"a.b\""), Some(11));
        assert_eq!(lines.find("batch.max_events"), None);
    }
}
