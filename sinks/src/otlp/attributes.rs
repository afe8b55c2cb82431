//! Which column becomes which OpenTelemetry attribute, per event kind: semantic-convention
//! names where they exist, gpuship's own under `gpu.*` and `cuda.*` (docs/otlp.md).

use opentelemetry_semantic_conventions::attribute as semconv;

use crate::EventKind;

/// The workload columns (`schema::WORKLOAD_COLUMNS`) and their semantic-convention names.
const WORKLOAD: [(&str, &str); 4] = [
    ("container_id", semconv::CONTAINER_ID),
    ("pod_uid", semconv::K8S_POD_UID),
    ("pod_name", semconv::K8S_POD_NAME),
    ("pod_namespace", semconv::K8S_NAMESPACE_NAME),
];

/// Attributes of marker columns, sent only when the row is marked (`true`): a `false` on
/// every ordinary row would add bytes to each record and say nothing.
pub const ONLY_WHEN_TRUE: &[&str] = &["cuda.flight_recorder"];

/// Column -> attribute name, per kind. Columns not listed here (`time`, `time_ns`, `host`,
/// `boot_id`) go into the timestamp and the resource instead.
pub fn attribute_names(kind: EventKind) -> &'static [(&'static str, &'static str)] {
    match kind {
        EventKind::Xid => &[
            ("code", "gpu.xid.code"),
            ("pci_bus_id", "gpu.pci_bus_id"),
            ("gpu_uuid", semconv::HW_ID),
            ("gpu_model", semconv::HW_MODEL),
            ("gpu_index", "gpu.index"),
            ("message", "gpu.xid.message"),
            ("source", "gpu.xid.source"),
            ("pid", semconv::PROCESS_PID),
            ("comm", semconv::PROCESS_EXECUTABLE_NAME),
            ("reporter_pid", "gpu.xid.reporter.pid"),
            ("reporter_comm", "gpu.xid.reporter.name"),
            ("kmsg_seq", "gpu.xid.kmsg_seq"),
            ("message_truncated", "gpu.xid.message_truncated"),
            ("xid_name", "gpu.xid.name"),
            ("category", "gpu.xid.category"),
            ("severity", "gpu.xid.severity"),
            ("action", "gpu.xid.action"),
            ("catalog_version", "gpu.xid.catalog_version"),
            ("incident_id", "gpu.xid.incident_id"),
            ("root_candidate", "gpu.xid.root_candidate"),
            ("attribution", "gpu.xid.attribution"),
            ("affected_pids", "gpu.xid.affected_pids"),
            ("container_id", semconv::CONTAINER_ID),
            ("pod_uid", semconv::K8S_POD_UID),
            ("driver_version", "gpu.driver.version"),
            ("fault_engine", "gpu.xid.fault.engine"),
            ("fault_address", "gpu.xid.fault.address"),
            ("fault_type", "gpu.xid.fault.type"),
            ("fault_access", "gpu.xid.fault.access"),
            ("channel", "gpu.xid.channel"),
            ("ecc_location", "gpu.xid.ecc.location"),
            ("recovery_action", "gpu.xid.recovery_action"),
            ("gsp_function", "gpu.xid.gsp.function"),
            ("mig_gpu_instance", "gpu.mig.gpu_instance"),
            ("mig_compute_instance", "gpu.mig.compute_instance"),
            ("caused_by_xid", "gpu.xid.caused_by"),
            ("pod_name", "k8s.pod.name"),
            ("pod_namespace", "k8s.namespace.name"),
        ],
        EventKind::Cuda => &[
            ("pid", semconv::PROCESS_PID),
            ("tid", semconv::THREAD_ID),
            ("comm", semconv::PROCESS_EXECUTABLE_NAME),
            ("function", "cuda.function"),
            ("duration_ns", "cuda.duration_ns"),
            ("result", "cuda.result"),
            ("result_name", "cuda.result_name"),
            ("bytes", "cuda.bytes"),
            ("device_ptr", "cuda.device_ptr"),
            ("stream", "cuda.stream"),
            ("grid_x", "cuda.grid.x"),
            ("grid_y", "cuda.grid.y"),
            ("grid_z", "cuda.grid.z"),
            ("block_x", "cuda.block.x"),
            ("block_y", "cuda.block.y"),
            ("block_z", "cuda.block.z"),
            ("shared_mem_bytes", "cuda.shared_mem_bytes"),
            ("incident_id", "gpu.xid.incident_id"),
            WORKLOAD[0],
            WORKLOAD[1],
            WORKLOAD[2],
            WORKLOAD[3],
            ("flight_recorder", "cuda.flight_recorder"),
        ],
        EventKind::Driver => &[
            ("pid", semconv::PROCESS_PID),
            ("tid", semconv::THREAD_ID),
            ("comm", semconv::PROCESS_EXECUTABLE_NAME),
            ("hook", "gpu.driver.hook"),
            ("device", "gpu.driver.device"),
            ("request", "gpu.driver.ioctl.request"),
            ("request_name", "gpu.driver.ioctl.name"),
            ("request_size", "gpu.driver.ioctl.size"),
            ("duration_ns", "gpu.driver.duration_ns"),
            ("result", "gpu.driver.result"),
            WORKLOAD[0],
            WORKLOAD[1],
            WORKLOAD[2],
            WORKLOAD[3],
        ],
        // The histogram stays in the lake: p50/p99/max summarise it here.
        EventKind::CudaStats => &[
            ("pid", semconv::PROCESS_PID),
            ("comm", semconv::PROCESS_EXECUTABLE_NAME),
            ("function", "cuda.function"),
            ("result", "cuda.result"),
            ("result_name", "cuda.result_name"),
            ("interval_ns", "cuda.stats.interval_ns"),
            ("calls", "cuda.stats.calls"),
            ("bytes_sum", "cuda.stats.bytes_sum"),
            ("duration_sum_ns", "cuda.stats.duration_sum_ns"),
            ("duration_min_ns", "cuda.stats.duration_min_ns"),
            ("duration_max_ns", "cuda.stats.duration_max_ns"),
            ("duration_p50_ns", "cuda.stats.duration_p50_ns"),
            ("duration_p99_ns", "cuda.stats.duration_p99_ns"),
            WORKLOAD[0],
            WORKLOAD[1],
            WORKLOAD[2],
            WORKLOAD[3],
        ],
    }
}
