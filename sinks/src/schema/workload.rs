//! Columns naming the container and Kubernetes pod a process ran in: `container_id`,
//! `pod_uid`, `pod_name`, `pod_namespace`. The `cuda` and `driver` tables end with them; the
//! `xid` table carries them for the attributed process. All null outside containers.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::ArrayRef;
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

/// Builders for the workload columns.
#[derive(Debug)]
pub(crate) struct WorkloadColumns {
    columns: [StringBuilder; 4],
}

impl WorkloadColumns {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            columns: std::array::from_fn(|_| StringBuilder::with_capacity(capacity, 0)),
        }
    }

    /// Appends one row's workload (nulls when `None`).
    #[inline]
    pub(crate) fn append(&mut self, workload: Option<&Workload>) {
        match workload {
            None => self.columns.iter_mut().for_each(StringBuilder::append_null),
            Some(w) => {
                let values = [&w.container_id, &w.pod_uid, &w.pod_name, &w.pod_namespace];
                for (builder, value) in self.columns.iter_mut().zip(values) {
                    builder.append_option(value.as_deref());
                }
            }
        }
    }

    /// The four columns for the rows appended so far; resets the builders.
    pub(crate) fn finish(&mut self) -> [ArrayRef; 4] {
        self.columns
            .each_mut()
            .map(|builder| Arc::new(builder.finish()) as ArrayRef)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::Array;

    #[test]
    fn known_parts_are_values_and_the_rest_null() {
        let mut columns = WorkloadColumns::new(2);
        columns.append(Some(&Workload {
            container_id: Some("c0ffee".into()),
            pod_uid: Some("uid-1".into()),
            pod_name: None,
            pod_namespace: Some("ml".into()),
        }));
        columns.append(None);
        let [container, uid, name, namespace] = columns.finish();
        assert_eq!(container.as_string::<i32>().value(0), "c0ffee");
        assert_eq!(uid.as_string::<i32>().value(0), "uid-1");
        assert!(name.is_null(0));
        assert_eq!(namespace.as_string::<i32>().value(0), "ml");
        for column in [&container, &uid, &name, &namespace] {
            assert_eq!(column.len(), 2);
            assert!(column.is_null(1));
        }
        assert!(Workload::default().is_empty());
    }
}
