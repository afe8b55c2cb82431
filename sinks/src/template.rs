//! Name templates such as `gpuship.{kind}` (Kafka topics) and `{host}/{pci_bus_id}` (message
//! keys): literal text with `{placeholder}`s, checked once when the config is read and then
//! rendered per kind or per row without parsing again.

use arrow_array::{Array, RecordBatch};
use arrow_cast::display::{ArrayFormatter, FormatOptions};

use crate::EventKind;

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Placeholder(String),
}

/// Why a template is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{` without its `}`, or a `}` without its `{`.
    #[error("unbalanced brace at byte {0}")]
    Unbalanced(usize),
    /// `{}`.
    #[error("empty placeholder at byte {0}")]
    Empty(usize),
    /// A placeholder the template's use does not know.
    #[error("unknown placeholder {{{name}}}; known: {known}")]
    Unknown {
        /// The placeholder.
        name: String,
        /// The names allowed here.
        known: String,
    },
}

impl Template {
    /// Parses `text`, accepting only placeholders in `known`.
    pub fn parse(text: &str, known: &[&str]) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text.char_indices().peekable();
        while let Some((at, c)) = rest.next() {
            match c {
                '{' => {
                    let mut name = String::new();
                    loop {
                        match rest.next() {
                            Some((_, '}')) => break,
                            Some((bad, '{')) => return Err(TemplateError::Unbalanced(bad)),
                            Some((_, c)) => name.push(c),
                            None => return Err(TemplateError::Unbalanced(at)),
                        }
                    }
                    if name.is_empty() {
                        return Err(TemplateError::Empty(at));
                    }
                    if !known.contains(&name.as_str()) {
                        return Err(TemplateError::Unknown {
                            name,
                            known: known.join(", "),
                        });
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Placeholder(name));
                }
                '}' => return Err(TemplateError::Unbalanced(at)),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Self { parts })
    }

    /// Renders with `value` giving each placeholder's text.
    pub fn render(&self, mut value: impl FnMut(&str) -> String) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Placeholder(name) => out.push_str(&value(name)),
            }
        }
        out
    }

    /// Whether the rendered text is the same for every row (no placeholder names a column).
    pub fn is_constant(&self, per_kind: &[&str]) -> bool {
        self.parts.iter().all(|p| match p {
            Part::Literal(_) => true,
            Part::Placeholder(name) => per_kind.contains(&name.as_str()),
        })
    }
}

/// A key template bound to one batch: renders the key of each row from its columns.
/// `{kind}` is the event kind; a placeholder naming a column the kind does not have, or a null
/// value, renders as empty text.
pub struct RowKeys<'a> {
    parts: Vec<RowPart<'a>>,
}

enum RowPart<'a> {
    Text(String),
    Column(ArrayFormatter<'a>, &'a dyn Array),
    Nothing,
}

static FORMAT: FormatOptions<'static> = FormatOptions::new();

impl<'a> RowKeys<'a> {
    /// Binds `template` to the columns of `batch`.
    pub fn new(template: &Template, kind: EventKind, batch: &'a RecordBatch) -> Self {
        let parts = template
            .parts
            .iter()
            .map(|part| match part {
                Part::Literal(text) => RowPart::Text(text.clone()),
                Part::Placeholder(name) if name == "kind" => RowPart::Text(kind.to_string()),
                Part::Placeholder(name) => match batch.column_by_name(name) {
                    Some(column) => match ArrayFormatter::try_new(column.as_ref(), &FORMAT) {
                        Ok(formatter) => RowPart::Column(formatter, column.as_ref()),
                        Err(_) => RowPart::Nothing,
                    },
                    None => RowPart::Nothing,
                },
            })
            .collect();
        Self { parts }
    }

    /// Writes the key of `row` into `out` (cleared first).
    pub fn render(&self, row: usize, out: &mut String) {
        use std::fmt::Write as _;
        out.clear();
        for part in &self.parts {
            match part {
                RowPart::Text(text) => out.push_str(text),
                RowPart::Column(formatter, column) => {
                    if column.is_valid(row) {
                        let _ = write!(out, "{}", formatter.value(row));
                    }
                }
                RowPart::Nothing => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cuda_batch, xid_batch_with, xid_record};

    const KNOWN: &[&str] = &["kind", "host", "pci_bus_id", "pid"];

    #[test]
    fn parses_and_renders() {
        let t = Template::parse("gpuship.{kind}", KNOWN).unwrap();
        assert_eq!(t.render(|n| format!("<{n}>")), "gpuship.<kind>");
        assert!(t.is_constant(&["kind", "host"]));
        let t = Template::parse("{host}/{pci_bus_id}", KNOWN).unwrap();
        assert!(!t.is_constant(&["kind", "host"]));
        assert_eq!(
            Template::parse("plain", KNOWN)
                .unwrap()
                .render(|_| unreachable!()),
            "plain"
        );
    }

    #[test]
    fn bad_templates_say_why() {
        assert_eq!(
            Template::parse("a{kind", KNOWN),
            Err(TemplateError::Unbalanced(1))
        );
        assert_eq!(
            Template::parse("a}b", KNOWN),
            Err(TemplateError::Unbalanced(1))
        );
        assert_eq!(Template::parse("x{}", KNOWN), Err(TemplateError::Empty(1)));
        let err = Template::parse("{gpu}", KNOWN).unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown placeholder {gpu}; known: kind, host, pci_bus_id, pid"
        );
    }

    #[test]
    fn row_keys_come_from_columns() {
        let batch = xid_batch_with(&[
            xid_record(79, "0000:3b:00.0", "a"),
            xid_record(31, "0000:86:00.0", "b"),
        ]);
        let t = Template::parse("{host}/{pci_bus_id}/{kind}", KNOWN).unwrap();
        let keys = RowKeys::new(&t, EventKind::Xid, &batch.records);
        let mut key = String::new();
        keys.render(0, &mut key);
        assert_eq!(key, "h/0000:3b:00.0/xid");
        keys.render(1, &mut key);
        assert_eq!(key, "h/0000:86:00.0/xid");
        // CUDA rows have no bus id column: that part is empty.
        let cuda = cuda_batch(1, 0);
        let keys = RowKeys::new(&t, EventKind::Cuda, &cuda.records);
        keys.render(0, &mut key);
        assert_eq!(key, "h//cuda");
        let t = Template::parse("{pid}", KNOWN).unwrap();
        RowKeys::new(&t, EventKind::Cuda, &cuda.records).render(0, &mut key);
        assert_eq!(key, "1");
    }
}
