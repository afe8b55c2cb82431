//! Columns naming the container and Kubernetes pod a process ran in: `container_id`,
//! `pod_uid`, `pod_name`, `pod_namespace`. The `driver` table ends with them, the `cuda` table
//! has them before `flight_recorder` (schema version 4); the `xid` table carries them for the
//! attributed process. All null outside containers.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::{new_null_array, ArrayRef};
use arrow_schema::{DataType, Field};

/// Where a process runs: its container and, on Kubernetes, its pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Workload {
    /// Container id (64 hex digits) from the process's cgroup path.
    pub container_id: Option<Arc<str>>,
    /// Kubernetes pod UID from the cgroup path.
    pub pod_uid: Option<Arc<str>>,
    /// Pod name, from the kubelet's pod log folder `<namespace>_<name>_<uid>`.
    pub pod_name: Option<Arc<str>>,
    /// Pod namespace, from the same folder name.
    pub pod_namespace: Option<Arc<str>>,
}

impl Workload {
    /// True when nothing is known.
    pub fn is_empty(&self) -> bool {
        self.container_id.is_none()
            && self.pod_uid.is_none()
            && self.pod_name.is_none()
            && self.pod_namespace.is_none()
    }
}

/// Column names, in schema order.
pub const WORKLOAD_COLUMNS: [&str; 4] = ["container_id", "pod_uid", "pod_name", "pod_namespace"];

/// The four nullable text fields (schema version 3).
pub(crate) fn workload_fields() -> [Field; 4] {
    WORKLOAD_COLUMNS.map(|name| Field::new(name, DataType::Utf8, true))
}

/// Builders for the workload columns. Outside containers every row's workload is null, so
/// the builders start only at the first row that has one; until then rows are only counted
/// (hosts without containers pay nothing per row).
#[derive(Debug, Default)]
pub(crate) struct WorkloadColumns {
    columns: Option<[StringBuilder; 4]>,
    /// Rows appended while `columns` is `None`.
    leading_nulls: usize,
}

impl WorkloadColumns {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends one row's workload (nulls when `None`).
    #[inline]
    pub(crate) fn append(&mut self, workload: Option<&Workload>) {
        match (&mut self.columns, workload) {
            (None, None) => self.leading_nulls += 1,
            (Some(columns), None) => columns.iter_mut().for_each(StringBuilder::append_null),
            (columns, Some(w)) => {
                let leading = std::mem::take(&mut self.leading_nulls);
                let columns = columns.get_or_insert_with(|| {
                    std::array::from_fn(|_| {
                        let mut builder = StringBuilder::new();
                        builder.append_nulls(leading);
                        builder
                    })
                });
                let values = [&w.container_id, &w.pod_uid, &w.pod_name, &w.pod_namespace];
                for (builder, value) in columns.iter_mut().zip(values) {
                    builder.append_option(value.as_deref());
                }
            }
        }
    }

    /// The four columns for the rows appended so far; starts empty again.
    pub(crate) fn finish(&mut self) -> [ArrayRef; 4] {
        let leading = std::mem::take(&mut self.leading_nulls);
        match self.columns.take() {
            Some(mut columns) => columns
                .each_mut()
                .map(|builder| Arc::new(builder.finish()) as ArrayRef),
            None => std::array::from_fn(|_| new_null_array(&DataType::Utf8, leading)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::Array;

    #[test]
    fn known_parts_are_values_and_the_rest_null() {
        let mut columns = WorkloadColumns::new();
        columns.append(None);
        columns.append(Some(&Workload {
            container_id: Some("c0ffee".into()),
            pod_uid: Some("uid-1".into()),
            pod_name: None,
            pod_namespace: Some("ml".into()),
        }));
        columns.append(None);
        let [container, uid, name, namespace] = columns.finish();
        assert_eq!(container.as_string::<i32>().value(1), "c0ffee");
        assert_eq!(uid.as_string::<i32>().value(1), "uid-1");
        assert!(name.is_null(1));
        assert_eq!(namespace.as_string::<i32>().value(1), "ml");
        for column in [&container, &uid, &name, &namespace] {
            assert_eq!(column.len(), 3);
            assert!(column.is_null(0) && column.is_null(2));
        }
        assert!(Workload::default().is_empty());
    }

    #[test]
    fn rows_without_a_workload_cost_only_a_count_and_finish_as_nulls() {
        let mut columns = WorkloadColumns::new();
        for _ in 0..5 {
            columns.append(None);
        }
        assert!(columns.columns.is_none());
        let finished = columns.finish();
        for column in &finished {
            assert_eq!((column.len(), column.null_count()), (5, 5));
            assert_eq!(column.data_type(), &DataType::Utf8);
        }
        // The next batch starts empty.
        columns.append(None);
        assert_eq!(columns.finish()[0].len(), 1);
    }
}
