//! The list and struct columns the views read: an XID's `suspects` (schema version 5) and an
//! out-of-memory row's `held_memory` and `largest_allocations` (schema version 6). A missing
//! column, a field of another type or a null reads as nothing, as the flat columns do.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrowPrimitiveType, RecordBatch, StructArray};

/// One kernel the attributed process launched before an XID (`xid.suspects`), in the row's
/// order: most recent first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspect {
    /// Launch entry time, Unix ns.
    pub time_ns: i64,
    /// The launching thread.
    pub tid: Option<i32>,
    /// `cuLaunchKernel`, `cuLaunchKernelEx_ptsz`, ...
    pub function: String,
    /// Demangled kernel name (`unknown` for a handle made before the agent started).
    pub kernel: String,
    /// Grid x and block x, when the probe read them.
    pub grid_x: Option<u32>,
    pub block_x: Option<u32>,
    /// A later synchronisation covering it returned: it had finished.
    pub completed: bool,
}

/// The suspect to name first: the first one not completed, else the first (the one
/// `suspect_kernel` and the agent's log line name).
pub fn headline(suspects: &[Suspect]) -> Option<usize> {
    suspects
        .iter()
        .position(|s| !s.completed)
        .or((!suspects.is_empty()).then_some(0))
}

/// What a process held on a GPU when one of its allocations failed out of memory
/// (`cuda.held_memory`), in bytes per kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    pub device: u64,
    pub managed: u64,
    pub host_pinned: u64,
    pub pool: u64,
    pub physical: u64,
    /// Every allocation of the process was seen: not a lower bound.
    pub seen_from_start: bool,
}

/// One of an out-of-memory row's largest outstanding allocations (`largest_allocations`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub address: u64,
    /// None for a pitched allocation.
    pub bytes: Option<u64>,
    pub kind: String,
    pub function: String,
    pub time_ns: i64,
}

fn field<'a>(s: &'a StructArray, name: &str) -> Option<&'a dyn Array> {
    s.column_by_name(name).map(|a| a.as_ref())
}

fn number<T: ArrowPrimitiveType>(array: Option<&dyn Array>, i: usize) -> Option<T::Native> {
    let array = array?.as_primitive_opt::<T>()?;
    array.is_valid(i).then(|| array.value(i))
}

fn string(array: Option<&dyn Array>, i: usize) -> Option<String> {
    let array = array?;
    if !array.is_valid(i) {
        return None;
    }
    if let Some(strings) = array.as_string_opt::<i32>() {
        return Some(strings.value(i).to_string());
    }
    array
        .as_string_view_opt()
        .map(|strings| strings.value(i).to_string())
}

fn flag(array: Option<&dyn Array>, i: usize) -> Option<bool> {
    let array = array?.as_boolean_opt()?;
    array.is_valid(i).then(|| array.value(i))
}

/// The structs of list column `name` at row `i`; None when absent or null.
fn list_items(batch: &RecordBatch, name: &str, i: usize) -> Option<StructArray> {
    let list = batch.column_by_name(name)?.as_list_opt::<i32>()?;
    if !list.is_valid(i) {
        return None;
    }
    list.value(i).as_struct_opt().cloned()
}

/// Row `i`'s suspects, in list order; empty when none were looked for or seen.
pub fn suspects(batch: &RecordBatch, i: usize) -> Vec<Suspect> {
    let Some(items) = list_items(batch, "suspects", i) else {
        return Vec::new();
    };
    (0..items.len())
        .filter(|&j| items.is_valid(j))
        .map(|j| Suspect {
            time_ns: number::<Int64Type>(field(&items, "time_ns"), j).unwrap_or(0),
            tid: number::<Int32Type>(field(&items, "tid"), j),
            function: string(field(&items, "function"), j).unwrap_or_default(),
            kernel: string(field(&items, "kernel_name_demangled"), j)
                .or_else(|| string(field(&items, "kernel_name"), j))
                .unwrap_or_default(),
            grid_x: number::<UInt32Type>(field(&items, "grid_x"), j),
            block_x: number::<UInt32Type>(field(&items, "block_x"), j),
            completed: flag(field(&items, "completed"), j) == Some(true),
        })
        .collect()
}

/// Row `i`'s `held_memory`.
pub fn held(batch: &RecordBatch, i: usize) -> Option<Held> {
    let held = batch.column_by_name("held_memory")?.as_struct_opt()?;
    if !held.is_valid(i) {
        return None;
    }
    let bytes = |kind: &str| number::<UInt64Type>(field(held, kind), i).unwrap_or(0);
    Some(Held {
        device: bytes("device_bytes"),
        managed: bytes("managed_bytes"),
        host_pinned: bytes("host_pinned_bytes"),
        pool: bytes("pool_bytes"),
        physical: bytes("physical_bytes"),
        seen_from_start: flag(field(held, "seen_from_start"), i) == Some(true),
    })
}

/// Row `i`'s `largest_allocations`, largest first.
pub fn largest_allocations(batch: &RecordBatch, i: usize) -> Vec<Allocation> {
    let Some(items) = list_items(batch, "largest_allocations", i) else {
        return Vec::new();
    };
    (0..items.len())
        .filter(|&j| items.is_valid(j))
        .map(|j| Allocation {
            address: number::<UInt64Type>(field(&items, "address"), j).unwrap_or(0),
            bytes: number::<UInt64Type>(field(&items, "bytes"), j),
            kind: string(field(&items, "kind"), j).unwrap_or_default(),
            function: string(field(&items, "function"), j).unwrap_or_default(),
            time_ns: number::<Int64Type>(field(&items, "time_ns"), j).unwrap_or(0),
        })
        .collect()
}
