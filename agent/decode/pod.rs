//! The ring records as plain old data ([`bytemuck::Pod`]), so that records are read from and
//! written to bytes without `unsafe` at the use sites.
//!
//! The record structs are generated (libbpf-cargo skeletons), so `Pod` cannot be derived on
//! them; [`plain_record`] implements it, and what the derive would check is checked at
//! compile time: every field starts where the previous one ends (no padding the compiler
//! inserted, whose bytes would be uninitialized) and the struct ends with its last field.
//! Each source lists its records in its own `records.rs`; the field list is the layout in
//! `bpf/include/gpuship_events.h`, and a change there that is not made there fails the build.

/// Implements `Zeroable` and `Pod` for a `#[repr(C)]` record after checking at compile time
/// that its fields, in order, leave no gap.
macro_rules! plain_record {
    ($record:ty { $($field:ident: $ty:ty),+ $(,)? }) => {
        const _: () = {
            let mut end = 0;
            $(
                assert!(
                    std::mem::offset_of!($record, $field) == end,
                    concat!(stringify!($record), ".", stringify!($field), " follows padding")
                );
                end += std::mem::size_of::<$ty>();
            )+
            assert!(
                std::mem::size_of::<$record>() == end,
                concat!(stringify!($record), " ends with padding")
            );
        };
        // SAFETY: a #[repr(C)] struct of integers and integer arrays (every bit pattern is a
        // valid value, and all are `Pod`), `Copy`, with no padding bytes (checked above).
        unsafe impl bytemuck::Zeroable for $record {}
        // SAFETY: as above.
        unsafe impl bytemuck::Pod for $record {}
    };
}

pub(crate) use plain_record;
