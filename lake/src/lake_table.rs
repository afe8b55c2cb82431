//! One table of the lake as the engine sees it: exactly the files the lake's inventory kept,
//! each with its `dt`/`hour` values read from its key, handed to DataFusion's Parquet scan.
//!
//! DataFusion's own `ListingTable` lists the folders again and keeps a statistics entry for
//! every column of every file while it plans a scan (about 9 KiB per file for the CUDA schema,
//! whether or not statistics are collected): a gigabyte for one scan of a 1,000-host day. Here
//! a planned file is its object metadata and two partition values, a few hundred bytes, and
//! nothing is listed twice. Filters on `dt`/`hour` drop files before the scan is planned;
//! every other filter goes to the Parquet scan (row groups and pages pruned by their
//! statistics, rows filtered while decoding).

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::config::TableParquetOptions;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::ExecutionPlan;
use object_store::ObjectMeta;

use crate::local::LocalStorage;
use crate::whole_file::SmallFileReaderFactory;

/// The partition columns, in the order of the keys' folders.
pub const PARTITION_COLUMNS: [&str; 2] = ["dt", "hour"];

/// A file of the table and the partition it lies in.
#[derive(Debug, Clone)]
struct TableFile {
    meta: ObjectMeta,
    dt: String,
    hour: String,
}

/// `dt` and `hour` of a key `<table>/dt=<dt>/hour=<hour>/<name>`.
fn partition_values(key: &str) -> Option<(String, String)> {
    let mut parts = key.split('/');
    let _table = parts.next()?;
    let dt = parts.next()?.strip_prefix("dt=")?;
    let hour = parts.next()?.strip_prefix("hour=")?;
    Some((dt.to_string(), hour.to_string()))
}

/// A table over a fixed list of Parquet files.
#[derive(Debug)]
pub struct LakeTable {
    url: ObjectStoreUrl,
    file_schema: SchemaRef,
    /// The file schema with `dt` and `hour` after it.
    schema: SchemaRef,
    options: TableParquetOptions,
    /// The lake's folder when it is local (small files are read from it in place).
    local: Option<LocalStorage>,
    files: Vec<TableFile>,
}

impl LakeTable {
    /// The table of `files` (keys `<table>/dt=.../hour=.../<name>` below `url`; others are left
    /// out) read as `file_schema` with the Parquet reading `options`; `local` is the lake's
    /// folder when it is local.
    pub fn new(
        url: ObjectStoreUrl,
        file_schema: SchemaRef,
        options: TableParquetOptions,
        local: Option<LocalStorage>,
        files: impl IntoIterator<Item = ObjectMeta>,
    ) -> Self {
        let mut fields: Vec<FieldRef> = file_schema.fields().iter().cloned().collect();
        fields.extend(partition_fields());
        let schema = Arc::new(Schema::new_with_metadata(
            fields,
            file_schema.metadata().clone(),
        ));
        let files = files
            .into_iter()
            .filter_map(|meta| {
                let (dt, hour) = partition_values(meta.location.as_ref())?;
                Some(TableFile { meta, dt, hour })
            })
            .collect();
        Self {
            url,
            file_schema,
            schema,
            options,
            local,
            files,
        }
    }

    /// The `(dt, hour)` partitions that every one of `filters` keeps.
    fn partitions_kept(
        &self,
        state: &dyn Session,
        filters: &[Expr],
    ) -> Result<BTreeSet<(String, String)>> {
        let partitions: BTreeSet<(String, String)> = self
            .files
            .iter()
            .map(|f| (f.dt.clone(), f.hour.clone()))
            .collect();
        let on_partitions: Vec<&Expr> = filters.iter().filter(|f| only_partitions(f)).collect();
        if on_partitions.is_empty() || partitions.is_empty() {
            return Ok(partitions);
        }
        let schema = Arc::new(Schema::new(partition_fields().to_vec()));
        let (dts, hours): (Vec<&str>, Vec<&str>) = partitions
            .iter()
            .map(|(dt, hour)| (dt.as_str(), hour.as_str()))
            .unzip();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(dts)),
            Arc::new(StringArray::from(hours)),
        ];
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        let df_schema = DFSchema::try_from(schema)?;
        let mut keep = vec![true; partitions.len()];
        for filter in on_partitions {
            let predicate = state.create_physical_expr(filter.clone(), &df_schema)?;
            let values = predicate.evaluate(&batch)?.into_array(batch.num_rows())?;
            let Some(values) = values.as_any().downcast_ref::<BooleanArray>() else {
                continue;
            };
            for (row, kept) in keep.iter_mut().enumerate() {
                // A null (a comparison with a null) keeps nothing, as in a WHERE clause.
                *kept &= values.is_valid(row) && values.value(row);
            }
        }
        Ok(partitions
            .into_iter()
            .zip(keep)
            .filter_map(|(partition, kept)| kept.then_some(partition))
            .collect())
    }
}

fn partition_fields() -> [FieldRef; 2] {
    PARTITION_COLUMNS.map(|name| Arc::new(Field::new(name, DataType::Utf8, false)))
}

/// True when `filter` names partition columns and nothing else.
fn only_partitions(filter: &Expr) -> bool {
    let columns = filter.column_refs();
    !columns.is_empty()
        && columns
            .iter()
            .all(|c| PARTITION_COLUMNS.contains(&c.name.as_str()))
}

/// `files` in `groups` groups of about the same total size, each scanned by one partition of
/// the plan; the largest files are placed first so that no group ends with a large one alone.
fn balanced_groups(mut files: Vec<PartitionedFile>, groups: usize) -> Vec<FileGroup> {
    let groups = groups.clamp(1, files.len().max(1));
    files.sort_by_key(|f| std::cmp::Reverse(f.object_meta.size));
    let mut bins: Vec<(u64, Vec<PartitionedFile>)> = (0..groups).map(|_| (0, Vec::new())).collect();
    for file in files {
        let Some(lightest) = bins.iter_mut().min_by_key(|(size, _)| *size) else {
            break;
        };
        lightest.0 += file.object_meta.size;
        lightest.1.push(file);
    }
    bins.into_iter()
        .filter(|(_, files)| !files.is_empty())
        .map(|(_, files)| FileGroup::new(files))
        .collect()
}

#[async_trait]
impl TableProvider for LakeTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|filter| {
                if only_partitions(filter) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let kept = self.partitions_kept(state, filters)?;
        let files: Vec<PartitionedFile> = self
            .files
            .iter()
            .filter(|f| kept.contains(&(f.dt.clone(), f.hour.clone())))
            .map(|f| {
                PartitionedFile::new_from_meta(f.meta.clone()).with_partition_values(vec![
                    ScalarValue::Utf8(Some(f.dt.clone())),
                    ScalarValue::Utf8(Some(f.hour.clone())),
                ])
            })
            .collect();
        if files.is_empty() {
            let schema = match projection {
                Some(columns) => Arc::new(self.schema.project(columns)?),
                None => self.schema(),
            };
            return Ok(Arc::new(EmptyExec::new(schema)));
        }
        let table_schema = TableSchema::builder(Arc::clone(&self.file_schema))
            .with_table_partition_cols(partition_fields().to_vec())
            .build();
        let store = state.runtime_env().object_store(&self.url)?;
        let metadata_cache = state.runtime_env().cache_manager.get_file_metadata_cache();
        let larger = Arc::new(CachedParquetFileReaderFactory::new(
            Arc::clone(&store),
            metadata_cache,
        ));
        let mut source = ParquetSource::new(table_schema)
            .with_table_parquet_options(self.options.clone())
            .with_parquet_file_reader_factory(Arc::new(SmallFileReaderFactory::new(
                store,
                self.local.clone(),
                larger,
            )));
        if let Some(hint) = self.options.global.metadata_size_hint {
            source = source.with_metadata_size_hint(hint);
        }
        let groups = balanced_groups(files, state.config().target_partitions());
        let config = FileScanConfigBuilder::new(self.url.clone(), Arc::new(source))
            .with_file_groups(groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .build();
        Ok(DataSourceExec::from_data_source(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(key: &str, size: u64) -> PartitionedFile {
        PartitionedFile::new(key.to_string(), size)
    }

    #[test]
    fn partition_values_come_from_the_key() {
        assert_eq!(
            partition_values("cuda/dt=2026-11-22/hour=03/part-a.parquet"),
            Some(("2026-11-22".into(), "03".into()))
        );
        assert_eq!(partition_values("cuda/part-a.parquet"), None);
        assert_eq!(partition_values("cuda/dt=2026-11-22/part-a.parquet"), None);
    }

    #[test]
    fn groups_hold_every_file_once_and_about_the_same_bytes() {
        let files: Vec<PartitionedFile> = (1..=10)
            .map(|n| file(&format!("cuda/dt=d/hour=00/{n}"), n * 100))
            .collect();
        let groups = balanced_groups(files, 3);
        assert_eq!(groups.len(), 3);
        let sizes: Vec<u64> = groups
            .iter()
            .map(|g| g.iter().map(|f| f.object_meta.size).sum())
            .collect();
        assert_eq!(sizes.iter().sum::<u64>(), 5_500);
        assert_eq!(groups.iter().map(|g| g.len()).sum::<usize>(), 10);
        let (low, high) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(high - low <= 1_000, "{sizes:?}");
        assert_eq!(balanced_groups(vec![file("a", 1)], 8).len(), 1);
        assert!(balanced_groups(Vec::new(), 8).is_empty());
    }
}
