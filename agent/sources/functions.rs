//! Function names by id: what a probe's cookie names and what decoders, the run summary and
//! the live view turn back into names. Kept apart from the CUDA source that fills it, so that
//! the sources' output interfaces can name it without depending on that source.

use std::collections::HashMap;
use std::sync::Arc;

/// Function names by id, shared with the decoder.
#[derive(Debug, Clone, Default)]
pub struct FunctionTable {
    names: Vec<Arc<str>>,
}

impl FunctionTable {
    /// The name of function `id`, or None for an id no probe was given.
    #[inline]
    pub fn name(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize).map(|n| &**n)
    }

    /// A table with the given names at ids 0, 1, ...
    pub fn from_names<I: IntoIterator<Item = S>, S: Into<Arc<str>>>(names: I) -> Self {
        Self {
            names: names.into_iter().map(Into::into).collect(),
        }
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when no function is probed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The id of `name`, added at the next id when new (`ids` remembers the ids given).
    pub(crate) fn intern(&mut self, ids: &mut HashMap<String, u32>, name: &str) -> u32 {
        *ids.entry(name.to_string()).or_insert_with(|| {
            self.names.push(Arc::from(name));
            (self.names.len() - 1) as u32
        })
    }
}
