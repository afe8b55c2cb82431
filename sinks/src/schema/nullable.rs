//! A nullable column whose nulls cost a counter until a value comes: most of the `cuda`
//! table's nullable columns (launch dimensions, handles, kernel names, the GPU, the incident)
//! are null in most rows, and Arrow's per-row `append_null` (a validity bit materialized,
//! a zeroed value pushed) was an eighth of the consumer's time at 0.7 M rows/s. Waiting nulls
//! are appended in one run before the next value and at `finish`.

use arrow_array::builder::{ArrayBuilder, PrimitiveBuilder, StringBuilder};
use arrow_array::types::ArrowPrimitiveType;
use arrow_array::ArrayRef;
use std::sync::Arc;

/// The builders a [`Nullable`] column wraps.
pub(crate) trait ValueBuilder: ArrayBuilder {
    /// A value appended.
    type Value<'v>;
    fn push_nulls(&mut self, count: usize);
    fn push_value(&mut self, value: Self::Value<'_>);
    fn finish_array(&mut self) -> ArrayRef;
}

impl<T: ArrowPrimitiveType> ValueBuilder for PrimitiveBuilder<T> {
    type Value<'v> = T::Native;

    #[inline]
    fn push_nulls(&mut self, count: usize) {
        self.append_nulls(count);
    }

    #[inline]
    fn push_value(&mut self, value: T::Native) {
        self.append_value(value);
    }

    fn finish_array(&mut self) -> ArrayRef {
        Arc::new(self.finish())
    }
}

impl ValueBuilder for StringBuilder {
    type Value<'v> = &'v str;

    #[inline]
    fn push_nulls(&mut self, count: usize) {
        self.append_nulls(count);
    }

    #[inline]
    fn push_value(&mut self, value: &str) {
        self.append_value(value);
    }

    fn finish_array(&mut self) -> ArrayRef {
        Arc::new(self.finish())
    }
}

/// A nullable column: `builder` holds the rows up to the last value, `waiting` the nulls
/// appended since.
#[derive(Debug)]
pub(crate) struct Nullable<B> {
    builder: B,
    waiting: usize,
}

impl<B: ValueBuilder> Nullable<B> {
    pub(crate) fn new(builder: B) -> Self {
        Self {
            builder,
            waiting: 0,
        }
    }

    #[inline]
    pub(crate) fn append_null(&mut self) {
        self.waiting += 1;
    }

    #[inline]
    pub(crate) fn append_value(&mut self, value: B::Value<'_>) {
        if self.waiting > 0 {
            self.builder.push_nulls(self.waiting);
            self.waiting = 0;
        }
        self.builder.push_value(value);
    }

    #[inline]
    pub(crate) fn append_option(&mut self, value: Option<B::Value<'_>>) {
        match value {
            Some(value) => self.append_value(value),
            None => self.append_null(),
        }
    }

    /// Rows appended, nulls included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.builder.len() + self.waiting
    }

    /// The column of every row appended; the builder starts empty again.
    pub(crate) fn finish(&mut self) -> ArrayRef {
        if self.waiting > 0 {
            self.builder.push_nulls(self.waiting);
            self.waiting = 0;
        }
        self.builder.finish_array()
    }

    #[cfg(test)]
    pub(crate) fn builder(&self) -> &B {
        &self.builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::UInt64Builder;
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    use arrow_array::Array;

    #[test]
    fn nulls_around_values_land_on_their_rows() {
        let mut column = Nullable::new(UInt64Builder::with_capacity(8));
        column.append_null();
        column.append_null();
        column.append_value(7);
        column.append_null();
        column.append_option(Some(u64::MAX));
        column.append_option(None);
        assert_eq!(column.len(), 6);
        let array = column.finish();
        let values = array.as_primitive::<UInt64Type>();
        let got: Vec<Option<u64>> = values.iter().collect();
        assert_eq!(got, [None, None, Some(7), None, Some(u64::MAX), None]);
        assert_eq!(column.len(), 0);
        assert_eq!(column.finish().len(), 0);
    }

    #[test]
    fn a_column_of_nulls_only_has_every_row_null() {
        let mut column = Nullable::new(StringBuilder::new());
        for _ in 0..5 {
            column.append_null();
        }
        assert_eq!(column.builder().len(), 0);
        let array = column.finish();
        assert_eq!((array.len(), array.null_count()), (5, 5));
        column.append_value("a\"b\n");
        let array = column.finish();
        assert_eq!(array.as_string::<i32>().value(0), "a\"b\n");
        assert_eq!(array.null_count(), 0);
    }
}
