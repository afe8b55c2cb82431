//! Hands every batch to every sink that wants it, through the sink's bounded queue.
//!
//! Each sink takes the kinds it asked for (`kinds`) and, for CUDA, only the rows its
//! `cuda_filter` keeps; what a sink does when its queue is full is its queue's policy
//! (`gpuship_sinks::queue`). Capture threads are plain OS threads and call
//! [`FanOut::send_blocking`]. Batches are shared, not copied: cloning a record batch shares
//! its Arrow buffers.
//!
//! Every clone shares one set of routes, which a configuration reload replaces
//! ([`FanOut::pause`], [`Paused::resume`]): a batch goes to the old set or to the new one,
//! whole, never to both and never to neither.

use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, BooleanArray};
use gpuship_sinks::{EnumMap, EventBatch, EventKind, QueueSender, SinkStats};

use crate::config::{CudaFilter, SinkOptions};

/// One sink's route: what it takes and where it goes.
#[derive(Debug, Clone)]
struct Route {
    name: String,
    sender: Arc<QueueSender>,
    stats: Arc<SinkStats>,
    /// Whether the sink takes each kind (its `kinds`).
    takes: EnumMap<EventKind, bool>,
    cuda_filter: Option<CudaFilter>,
}

/// The set of sink routes, shared by every clone (one per producer thread). Dropping every
/// clone, or [`FanOut::close`], closes the queues, which tells the sinks to finish.
#[derive(Debug, Clone, Default)]
pub struct FanOut {
    /// The current routes. A sender takes the `Arc` and lets go of the lock before it sends,
    /// so a full queue never holds the lock; a replaced set lives until its last sender is done.
    routes: Arc<RwLock<Arc<Vec<Route>>>>,
}

/// The fan-out with its senders held off (see [`FanOut::pause`]).
pub struct Paused<'a> {
    routes: RwLockWriteGuard<'a, Arc<Vec<Route>>>,
}

impl Paused<'_> {
    /// Installs the routes of `next` and lets the senders go on.
    pub fn resume(mut self, next: &FanOut) {
        *self.routes = next.current();
    }
}

impl FanOut {
    /// Adds a sink's queue with its selection options.
    pub fn add(
        &mut self,
        name: impl Into<String>,
        sender: QueueSender,
        stats: Arc<SinkStats>,
        options: &SinkOptions,
    ) {
        self.add_shared(name, Arc::new(sender), stats, options);
    }

    /// [`FanOut::add`] for a queue that other route sets share (a sink a reload keeps).
    pub fn add_shared(
        &mut self,
        name: impl Into<String>,
        sender: Arc<QueueSender>,
        stats: Arc<SinkStats>,
        options: &SinkOptions,
    ) {
        let mut routes = self.write();
        let mut next = Vec::clone(&routes);
        next.push(Route {
            name: name.into(),
            sender,
            stats,
            takes: EnumMap::from_fn(|kind| options.kinds.contains(&kind)),
            cuda_filter: options.cuda_filter,
        });
        *routes = Arc::new(next);
    }

    /// Holds every sender off until [`Paused::resume`] (a batch being sent finishes on the
    /// routes it started with). The old routes are let go now: once the senders that still
    /// use them are done, the queues no other route set holds close.
    pub fn pause(&self) -> Paused<'_> {
        let mut routes = self.write();
        *routes = Arc::default();
        Paused { routes }
    }

    /// Lets go of every route: the queues close once the senders in progress are done.
    pub fn close(&self) {
        *self.write() = Arc::default();
    }

    fn write(&self) -> RwLockWriteGuard<'_, Arc<Vec<Route>>> {
        // Each change is one assignment: a panicking holder cannot leave it half done.
        self.routes.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn current(&self) -> Arc<Vec<Route>> {
        self.routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sends `batch` to every sink that takes it. Must not be called from async code.
    pub fn send_blocking(&self, batch: EventBatch) {
        let routes = self.current();
        for route in routes.iter() {
            if !route.takes[batch.kind] {
                route.stats.filtered.add(batch.kind, batch.len() as u64);
                continue;
            }
            let selected = match (&route.cuda_filter, batch.kind) {
                (Some(filter), EventKind::Cuda) => select_cuda(filter, &batch, &route.name),
                _ => batch.clone(),
            };
            route
                .stats
                .filtered
                .add(batch.kind, (batch.len() - selected.len()) as u64);
            route.sender.send_blocking(selected);
        }
    }

    /// Number of sinks.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// True without sinks.
    pub fn is_empty(&self) -> bool {
        self.current().is_empty()
    }
}

/// The rows of a CUDA batch that `filter` keeps.
fn select_cuda(filter: &CudaFilter, batch: &EventBatch, sink: &str) -> EventBatch {
    let records = &batch.records;
    let (Some(result), Some(duration)) = (
        records
            .column_by_name("result")
            .and_then(|c| c.as_primitive_opt::<UInt32Type>()),
        records
            .column_by_name("duration_ns")
            .and_then(|c| c.as_primitive_opt::<UInt64Type>()),
    ) else {
        return batch.clone();
    };
    // The flight recorder's rows are an incident's evidence: every filter keeps them.
    let recorded = records
        .column_by_name("flight_recorder")
        .and_then(|c| c.as_boolean_opt());
    let mask: BooleanArray = result
        .values()
        .iter()
        .zip(duration.values().iter())
        .enumerate()
        .map(|(i, (&r, &d))| {
            let incident = recorded.is_some_and(|f| f.is_valid(i) && f.value(i));
            Some(incident || filter.keeps(r, d))
        })
        .collect();
    match arrow_select::filter::filter_record_batch(records, &mask) {
        Ok(kept) => EventBatch::new(batch.kind, kept),
        Err(err) => {
            tracing::error!(sink, %err, "filtering CUDA rows failed; sending all of them");
            batch.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuship_sinks::schema::{CudaBatchBuilder, CudaRow, HostIdentity};
    use gpuship_sinks::test_support::driver_batch;
    use gpuship_sinks::{queue, BufferConfig};

    fn cuda_batch(calls: &[(u32, u64)]) -> EventBatch {
        let mut builder = CudaBatchBuilder::new(
            HostIdentity {
                host: "h".into(),
                boot_id: "b".into(),
            },
            4,
        );
        for &(result, duration_ns) in calls {
            builder.append(&CudaRow {
                time_ns: 0,
                pid: 1,
                tid: 1,
                comm: "c",
                function: "cuCtxSynchronize",
                duration_ns,
                result,
                result_name: "x",
                bytes: None,
                device_ptr: None,
                stream: None,
                launch: None,
                workload: None,
                objects: Default::default(),
            });
        }
        EventBatch::new(EventKind::Cuda, builder.finish().unwrap())
    }

    #[test]
    fn each_sink_gets_the_kinds_and_rows_it_selected() {
        let all_stats = Arc::new(SinkStats::default());
        let failed_stats = Arc::new(SinkStats::default());
        let xid_stats = Arc::new(SinkStats::default());
        let (all_tx, _all_rx) = queue(BufferConfig::default(), all_stats.clone());
        let (failed_tx, _failed_rx) = queue(BufferConfig::default(), failed_stats.clone());
        let (xid_tx, _xid_rx) = queue(BufferConfig::default(), xid_stats.clone());
        let mut fanout = FanOut::default();
        fanout.add("all", all_tx, all_stats.clone(), &SinkOptions::default());
        let failed_or_slow = SinkOptions {
            cuda_filter: Some(CudaFilter {
                all: false,
                failed: true,
                slower_than_ns: Some(1_000_000),
            }),
            ..SinkOptions::default()
        };
        fanout.add("failed", failed_tx, failed_stats.clone(), &failed_or_slow);
        let xid_only = SinkOptions {
            kinds: vec![EventKind::Xid],
            ..SinkOptions::default()
        };
        fanout.add("xid", xid_tx, xid_stats.clone(), &xid_only);

        fanout.send_blocking(cuda_batch(&[
            (0, 10),
            (700, 10),
            (0, 2_000_000),
            (0, 999_999),
        ]));
        assert_eq!(all_stats.received.get(EventKind::Cuda), 4);
        assert_eq!(failed_stats.received.get(EventKind::Cuda), 2);
        assert_eq!(failed_stats.filtered.get(EventKind::Cuda), 2);
        assert_eq!(xid_stats.received.get(EventKind::Cuda), 0);
        assert_eq!(xid_stats.filtered.get(EventKind::Cuda), 4);
        assert_eq!(
            failed_stats
                .queued_events
                .load(std::sync::atomic::Ordering::Relaxed),
            2
        );
    }

    #[test]
    fn a_paused_fan_out_resumes_on_the_new_routes_and_closes_the_dropped_ones() {
        let (kept, gone, added) = (
            Arc::new(SinkStats::default()),
            Arc::new(SinkStats::default()),
            Arc::new(SinkStats::default()),
        );
        let (kept_tx, _kept_rx) = queue(BufferConfig::default(), kept.clone());
        let (gone_tx, mut gone_rx) = queue(BufferConfig::default(), gone.clone());
        let (added_tx, _added_rx) = queue(BufferConfig::default(), added.clone());
        let kept_tx = Arc::new(kept_tx);
        let options = SinkOptions::default();
        let mut fanout = FanOut::default();
        fanout.add_shared("kept", kept_tx.clone(), kept.clone(), &options);
        fanout.add("gone", gone_tx, gone.clone(), &options);
        let producer = fanout.clone();
        producer.send_blocking(driver_batch(2));
        let mut next = FanOut::default();
        next.add_shared("kept", kept_tx, kept.clone(), &options);
        next.add("added", added_tx, added.clone(), &options);
        fanout.pause().resume(&next);
        producer.send_blocking(driver_batch(3));
        let received = |s: &SinkStats| s.received.get(EventKind::Driver);
        assert_eq!(
            (received(&kept), received(&gone), received(&added)),
            (5, 2, 3)
        );
        // The dropped sink's queue is closed: it drains what it had, then ends.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(runtime.block_on(gone_rx.recv()).map(|b| b.len()), Some(2));
        assert!(runtime.block_on(gone_rx.recv()).is_none());
        producer.close();
        assert!(fanout.is_empty());
    }

    #[test]
    fn driver_rows_follow_the_kinds_of_each_sink() {
        let with_driver = Arc::new(SinkStats::default());
        let without_driver = Arc::new(SinkStats::default());
        let (with_tx, _with_rx) = queue(BufferConfig::default(), with_driver.clone());
        let (without_tx, _without_rx) = queue(BufferConfig::default(), without_driver.clone());
        let mut fanout = FanOut::default();
        let xid_and_driver = SinkOptions {
            kinds: vec![EventKind::Xid, EventKind::Driver],
            ..SinkOptions::default()
        };
        fanout.add("with", with_tx, with_driver.clone(), &xid_and_driver);
        let cuda_only = SinkOptions {
            kinds: vec![EventKind::Cuda],
            ..SinkOptions::default()
        };
        fanout.add("without", without_tx, without_driver.clone(), &cuda_only);
        fanout.send_blocking(driver_batch(3));
        assert_eq!(with_driver.received.get(EventKind::Driver), 3);
        assert_eq!(with_driver.filtered.get(EventKind::Driver), 0);
        assert_eq!(without_driver.received.get(EventKind::Driver), 0);
        assert_eq!(without_driver.filtered.get(EventKind::Driver), 3);
    }

    #[test]
    fn the_flight_recorders_rows_pass_a_failed_only_filter() {
        let mut builder = CudaBatchBuilder::new(
            HostIdentity {
                host: "h".into(),
                boot_id: "b".into(),
            },
            4,
        );
        let row = CudaRow {
            time_ns: 0,
            pid: 1,
            tid: 1,
            comm: "c",
            function: "cuLaunchKernel",
            duration_ns: 5,
            result: 0,
            result_name: "CUDA_SUCCESS",
            bytes: None,
            device_ptr: None,
            stream: None,
            launch: None,
            workload: None,
            objects: Default::default(),
        };
        builder.append(&row);
        builder.append_flight_recorded(&row, "node/pid-1/5");
        builder.append(&CudaRow { result: 700, ..row });
        let batch = EventBatch::new(EventKind::Cuda, builder.finish().unwrap());
        let kept = select_cuda(&CudaFilter::FAILED_ONLY, &batch, "otlp");
        let results = kept
            .records
            .column_by_name("result")
            .unwrap()
            .as_primitive::<UInt32Type>();
        let recorded = kept
            .records
            .column_by_name("flight_recorder")
            .unwrap()
            .as_boolean();
        assert_eq!(kept.len(), 2);
        assert_eq!((results.value(0), recorded.value(0)), (0, true));
        assert_eq!((results.value(1), recorded.value(1)), (700, false));
    }
}
