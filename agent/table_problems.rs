//! Problems of one table of the configuration, found by the part of the agent that owns the
//! table (each source checks its own `[sources.*]` settings). A problem is a key relative to
//! the table and a message; the configuration adds the table's path and the line in the file
//! (`config/validate.rs`), so a source needs nothing from the configuration module.

use std::fmt;
use std::ops::RangeInclusive;

use gpuship_sinks::limits::out_of_range;

/// `(key, message)` pairs of one table, in the order found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TableProblems(Vec<(String, String)>);

impl TableProblems {
    /// A problem with `key` (relative to the table, e.g. `ring_size_mib` or
    /// `tracepoint_fields.dev`).
    pub fn add(&mut self, key: &str, message: impl Into<String>) {
        self.0.push((key.to_string(), message.into()));
    }

    /// A problem when `value` is outside `range`.
    pub fn range<T: PartialOrd + fmt::Display>(
        &mut self,
        key: &str,
        value: T,
        range: RangeInclusive<T>,
    ) {
        if let Some(message) = out_of_range(value, range) {
            self.add(key, message);
        }
    }

    /// The problems, in the order found.
    pub fn into_vec(self) -> Vec<(String, String)> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_keep_their_order_and_a_value_in_range_is_none() {
        let mut problems = TableProblems::default();
        problems.range("a", 5u64, 1..=10);
        problems.range("b", 11u64, 1..=10);
        problems.add("c", "bad");
        let found = problems.into_vec();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].0, "b");
        assert!(found[0].1.contains("11"), "{}", found[0].1);
        assert_eq!(found[1], ("c".to_string(), "bad".to_string()));
    }
}
