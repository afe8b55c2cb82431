//! The `suspects` columns of the `xid` table (schema version 5): the kernels the attributed
//! process launched last before an XID that points at a running kernel, most recent first, and
//! `suspect_kernel`, the name of the first one not seen to finish (else the first), for queries
//! and alerts that want one string; since version 7, `suspects_sampled`: whether the overhead
//! budget probed the process's launches only part of the time in the window before.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, Int64Array, ListArray, StringArray, StructArray,
    UInt32Array, UInt64Array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields};

use super::XidRecord;

/// One kernel launched before an XID.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KernelSuspect {
    /// When the launch was entered, Unix ns.
    pub time_ns: i64,
    /// The launching thread.
    pub tid: i32,
    /// `cuLaunchKernel`, `cuLaunchKernelEx_ptsz`, ...
    pub function: String,
    /// The CUfunction or CUkernel launched.
    pub handle: u64,
    /// Mangled name (`unknown` for a handle made before the agent started).
    pub kernel_name: String,
    /// Demangled name.
    pub kernel_name_demangled: String,
    /// Stream, when the probe read it.
    pub stream: Option<u64>,
    /// Grid and block dimensions, each when the probe read it.
    pub grid: [Option<u32>; 3],
    /// Block dimensions.
    pub block: [Option<u32>; 3],
    /// A later synchronisation covering it (its context, or its stream) returned successfully:
    /// the kernel had finished, so it is an unlikely culprit.
    pub completed: bool,
}

impl KernelSuspect {
    /// The suspect to name first: the most recent launch not seen to finish, else the most
    /// recent one (`suspect_kernel`, the XID log line, the report).
    pub fn headline(suspects: &[KernelSuspect]) -> Option<&KernelSuspect> {
        suspects
            .iter()
            .find(|s| !s.completed)
            .or_else(|| suspects.first())
    }
}

fn struct_fields() -> Fields {
    let u32_field = |name: &str| Field::new(name, DataType::UInt32, true);
    Fields::from(vec![
        Field::new("time_ns", DataType::Int64, false),
        Field::new("tid", DataType::Int32, false),
        Field::new("function", DataType::Utf8, false),
        Field::new("handle", DataType::UInt64, false),
        Field::new("kernel_name", DataType::Utf8, false),
        Field::new("kernel_name_demangled", DataType::Utf8, false),
        Field::new("stream", DataType::UInt64, true),
        u32_field("grid_x"),
        u32_field("grid_y"),
        u32_field("grid_z"),
        u32_field("block_x"),
        u32_field("block_y"),
        u32_field("block_z"),
        Field::new("completed", DataType::Boolean, false),
    ])
}

fn item_field() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Struct(struct_fields()), true))
}

/// The columns' fields: the list and its headline (schema version 5), and whether the
/// window they come from was sampled (schema version 7).
pub fn fields() -> [Field; 3] {
    [
        Field::new("suspects", DataType::List(item_field()), true),
        Field::new("suspect_kernel", DataType::Utf8, true),
        Field::new("suspects_sampled", DataType::Boolean, true),
    ]
}

/// The columns of `rows`: the list is null for an XID no suspects were looked for (its code
/// does not point at a kernel, or no process was attributed), empty when none were found.
pub fn columns(rows: &[XidRecord]) -> [ArrayRef; 3] {
    let lists: Vec<Option<&Vec<KernelSuspect>>> = rows
        .iter()
        .map(|r| r.annotations.suspects.as_ref())
        .collect();
    let all: Vec<&KernelSuspect> = lists
        .iter()
        .flatten()
        .flat_map(|list| list.iter())
        .collect();
    let u32s = |value: &dyn Fn(&KernelSuspect) -> Option<u32>| -> ArrayRef {
        Arc::new(UInt32Array::from_iter(all.iter().map(|s| value(s))))
    };
    let children: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(all.iter().map(|s| s.time_ns))),
        Arc::new(Int32Array::from_iter_values(all.iter().map(|s| s.tid))),
        Arc::new(StringArray::from_iter_values(
            all.iter().map(|s| &s.function),
        )),
        Arc::new(UInt64Array::from_iter_values(all.iter().map(|s| s.handle))),
        Arc::new(StringArray::from_iter_values(
            all.iter().map(|s| &s.kernel_name),
        )),
        Arc::new(StringArray::from_iter_values(
            all.iter().map(|s| &s.kernel_name_demangled),
        )),
        Arc::new(UInt64Array::from_iter(all.iter().map(|s| s.stream))),
        u32s(&|s| s.grid[0]),
        u32s(&|s| s.grid[1]),
        u32s(&|s| s.grid[2]),
        u32s(&|s| s.block[0]),
        u32s(&|s| s.block[1]),
        u32s(&|s| s.block[2]),
        Arc::new(BooleanArray::from_iter(
            all.iter().map(|s| Some(s.completed)),
        )),
    ];
    let items = StructArray::new(struct_fields(), children, None);
    let lengths = lists.iter().map(|list| list.map_or(0, Vec::len));
    let validity = NullBuffer::from_iter(lists.iter().map(Option::is_some));
    let list = ListArray::new(
        item_field(),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(items),
        (validity.null_count() > 0).then_some(validity),
    );
    let first = StringArray::from_iter(lists.iter().map(|list| {
        list.and_then(|l| KernelSuspect::headline(l))
            .map(|s| s.kernel_name_demangled.as_str())
    }));
    let sampled = BooleanArray::from_iter(rows.iter().map(|r| r.annotations.suspects_sampled));
    debug_assert_eq!(list.len(), rows.len());
    [Arc::new(list), Arc::new(first), Arc::new(sampled)]
}
