//! The `held_memory` and `largest_allocations` columns of the `cuda` table (schema version 6):
//! on an allocation that failed with `CUDA_ERROR_OUT_OF_MEMORY`, what the process held on that
//! GPU by kind and its largest outstanding allocations there. Null on every other row, so the
//! builder keeps only the rows that have them.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Int64Array, ListArray, StringArray, StructArray, UInt64Array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields};

/// Memory kinds, in the order of [`HeldMemory::bytes`] and of the `held_memory` fields.
pub const MEMORY_KINDS: [&str; 5] = ["device", "managed", "host_pinned", "pool", "physical"];

/// What a process held when one of its allocations failed for lack of memory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeldMemory {
    /// Bytes held per kind ([`MEMORY_KINDS`] order).
    pub bytes: [u64; 5],
    /// The agent saw the process start using CUDA (`cuInit`) and followed every allocation
    /// since: the figures are all it holds, not a lower bound.
    pub seen_from_start: bool,
    /// Its largest outstanding allocations, largest first.
    pub largest: Vec<LargeAllocation>,
}

/// One outstanding allocation (or physical handle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LargeAllocation {
    /// The pointer, or the physical allocation's handle.
    pub address: u64,
    /// Its size (None: a pitched allocation, whose size the probe does not read).
    pub bytes: Option<u64>,
    /// One of [`MEMORY_KINDS`].
    pub kind: &'static str,
    /// The function that made it.
    pub function: String,
    /// When, Unix ns.
    pub time_ns: i64,
}

fn held_fields() -> Fields {
    let mut fields: Vec<Field> = MEMORY_KINDS
        .iter()
        .map(|kind| Field::new(format!("{kind}_bytes"), DataType::UInt64, false))
        .collect();
    fields.push(Field::new("seen_from_start", DataType::Boolean, false));
    Fields::from(fields)
}

fn allocation_fields() -> Fields {
    Fields::from(vec![
        Field::new("address", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, true),
        Field::new("kind", DataType::Utf8, false),
        Field::new("function", DataType::Utf8, false),
        Field::new("time_ns", DataType::Int64, false),
    ])
}

fn item_field() -> Arc<Field> {
    Arc::new(Field::new(
        "item",
        DataType::Struct(allocation_fields()),
        true,
    ))
}

/// The two columns' fields.
pub fn fields() -> [Field; 2] {
    [
        Field::new("held_memory", DataType::Struct(held_fields()), true),
        Field::new("largest_allocations", DataType::List(item_field()), true),
    ]
}

/// The rows of a batch that carry held memory, by row index.
#[derive(Debug, Default)]
pub struct MemoryColumns {
    rows: Vec<(usize, HeldMemory)>,
}

impl MemoryColumns {
    /// Row `index` carries `held`.
    pub fn push(&mut self, index: usize, held: &HeldMemory) {
        self.rows.push((index, held.clone()));
    }

    /// Bytes the kept rows add to the batch.
    pub fn estimated_bytes(held: &HeldMemory) -> usize {
        5 * 8
            + 1
            + held
                .largest
                .iter()
                .map(|a| 8 * 3 + a.kind.len() + a.function.len())
                .sum::<usize>()
    }

    /// The two columns for a batch of `len` rows; empty afterwards.
    pub fn finish(&mut self, len: usize) -> [ArrayRef; 2] {
        let rows = std::mem::take(&mut self.rows);
        let mut at: Vec<Option<&HeldMemory>> = vec![None; len];
        for (index, held) in &rows {
            if let Some(slot) = at.get_mut(*index) {
                *slot = Some(held);
            }
        }
        let present = NullBuffer::from_iter(at.iter().map(Option::is_some));
        let validity = (present.null_count() > 0).then_some(present);
        let mut held_children: Vec<ArrayRef> = (0..MEMORY_KINDS.len())
            .map(|kind| {
                Arc::new(UInt64Array::from_iter_values(
                    at.iter().map(|h| h.map_or(0, |h| h.bytes[kind])),
                )) as ArrayRef
            })
            .collect();
        held_children.push(Arc::new(BooleanArray::from_iter(
            at.iter()
                .map(|h| Some(h.is_some_and(|h| h.seen_from_start))),
        )));
        let held = StructArray::new(held_fields(), held_children, validity.clone());
        let all: Vec<&LargeAllocation> = at.iter().flatten().flat_map(|h| &h.largest).collect();
        let items = StructArray::new(
            allocation_fields(),
            vec![
                Arc::new(UInt64Array::from_iter_values(all.iter().map(|a| a.address))),
                Arc::new(UInt64Array::from_iter(all.iter().map(|a| a.bytes))),
                Arc::new(StringArray::from_iter_values(all.iter().map(|a| a.kind))),
                Arc::new(StringArray::from_iter_values(
                    all.iter().map(|a| &a.function),
                )),
                Arc::new(Int64Array::from_iter_values(all.iter().map(|a| a.time_ns))),
            ],
            None,
        );
        let lengths = at.iter().map(|h| h.map_or(0, |h| h.largest.len()));
        let list = ListArray::new(
            item_field(),
            OffsetBuffer::from_lengths(lengths),
            Arc::new(items),
            validity,
        );
        [Arc::new(held), Arc::new(list)]
    }
}
