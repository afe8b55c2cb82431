//! `repeat`, `lpad` and `rpad` under the memory limit. They build their answer in one
//! allocation the engine's memory pool never hears of: `repeat('x', 2000000000)` asks for 2 GB
//! at once. Here each is the engine's own function behind a check: the bytes its answer will
//! take (from its arguments, before anything is built) are reserved in the session's pool, and
//! a call that does not fit fails with a clear error instead of allocating.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow_schema::{DataType, FieldRef};
use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature,
};
use datafusion::scalar::ScalarValue;

use crate::limits::{human, LIMIT_REACHED};

/// How a function's answer grows with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(text, n)`: the text's bytes `n` times.
    Repeat,
    /// `lpad(text, n [, fill])`, `rpad`: `n` characters, up to 4 bytes each.
    Pad,
}

/// One of the engine's string functions, checked against the pool before it runs.
#[derive(Debug)]
struct Bounded {
    inner: Arc<ScalarUDF>,
    growth: Growth,
    pool: Arc<dyn MemoryPool>,
    /// The pool's size, for the error.
    limit: usize,
}

impl PartialEq for Bounded {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && Arc::ptr_eq(&self.pool, &other.pool)
    }
}

impl Eq for Bounded {}

impl Hash for Bounded {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        self.growth.hash(state);
    }
}

/// The functions to register in a session whose pool is `pool`, replacing the engine's own.
pub fn functions(pool: &Arc<dyn MemoryPool>, limit: usize) -> Vec<ScalarUDF> {
    [
        (datafusion::functions::string::repeat(), Growth::Repeat),
        (datafusion::functions::unicode::lpad(), Growth::Pad),
        (datafusion::functions::unicode::rpad(), Growth::Pad),
    ]
    .into_iter()
    .map(|(inner, growth)| {
        ScalarUDF::new_from_impl(Bounded {
            inner,
            growth,
            pool: Arc::clone(pool),
            limit,
        })
    })
    .collect()
}

/// The largest and the sum of the counts in `value` (negative counts make nothing).
fn counts(value: &ColumnarValue, rows: usize) -> Result<(u64, u64)> {
    let array = match value {
        ColumnarValue::Scalar(scalar) => {
            let n = match scalar.cast_to(&DataType::Int64)? {
                ScalarValue::Int64(Some(n)) => u64::try_from(n).unwrap_or(0),
                _ => 0,
            };
            return Ok((n, n.saturating_mul(rows.max(1) as u64)));
        }
        ColumnarValue::Array(array) => cast(array, &DataType::Int64)?,
    };
    let array = array
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| DataFusionError::Internal("a count cast to Int64 is not Int64".into()))?;
    let mut max = 0u64;
    let mut sum = 0u64;
    for n in array.iter().flatten() {
        let n = u64::try_from(n).unwrap_or(0);
        max = max.max(n);
        sum = sum.saturating_add(n);
    }
    Ok((max, sum))
}

/// The bytes of the text argument: of the one value when it is a scalar, of them all when
/// it is a column.
fn text_bytes(value: &ColumnarValue) -> u64 {
    match value {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
        ) => s.len() as u64,
        ColumnarValue::Scalar(_) => 0,
        ColumnarValue::Array(array) => array.get_buffer_memory_size() as u64,
    }
}

impl Bounded {
    /// Bytes the answer to `args` will take, at most (about).
    fn answer_bytes(&self, args: &ScalarFunctionArgs) -> Result<u64> {
        let Some(count) = args.args.get(1) else {
            return Ok(0);
        };
        let (max, sum) = counts(count, args.number_rows)?;
        Ok(match self.growth {
            Growth::Repeat => {
                let text = &args.args[0];
                if matches!(text, ColumnarValue::Scalar(_)) {
                    text_bytes(text).saturating_mul(sum)
                } else {
                    text_bytes(text).saturating_mul(max)
                }
            }
            Growth::Pad => sum.saturating_mul(4),
        })
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let bytes = self.answer_bytes(&args)?;
        let reservation = MemoryConsumer::new(self.name()).register(&self.pool);
        let fits = usize::try_from(bytes)
            .ok()
            .is_some_and(|b| reservation.try_grow(b).is_ok());
        if !fits {
            let limit = human(self.limit);
            return Err(DataFusionError::ResourcesExhausted(format!(
                "memory {LIMIT_REACHED}: {}() would build a {} string, more than the \
                 memory limit ({limit}, --memory-limit) has room for",
                self.name(),
                human(usize::try_from(bytes).unwrap_or(usize::MAX)),
            )));
        }
        // The answer is made while the room is held; the pool then lets go of it (the rows
        // that hold the answer are counted again where they are kept).
        let answer = self.inner.invoke_with_args(args);
        drop(reservation);
        answer
    }
}
