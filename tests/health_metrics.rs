//! The GPU-health metrics as an operator's Prometheus and OpenTelemetry collector see them:
//! real XIDs through the kernel log and real calls of the stand-in libcuda (stats mode, so
//! launches arrive aggregated) move the `/metrics` series by exactly what happened, and the
//! same totals reach a real collector (rotel) over OTLP, also after a collector outage.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support;
use crate::support::agent::{data_dir, Agent};
use crate::support::cuda_stats::stats_config;
use crate::support::lake::fake_gpu_dir;
use crate::support::metrics::{http, scrape, scrape_floats};
use crate::support::otlp_metrics::{latest, parse_points};
use crate::support::peers::{free_port, Rotel};
use crate::support::{kmsg, wait_until, Fixtures};

const UUID: &str = "GPU-4ea1c0de-0000-1111-2222-333333333333";

/// A bus id no other test and no earlier run of this one writes into the kernel log, so the
/// series of this GPU count this run's XIDs only (the agent reads the log of the whole boot).
fn unique_bus_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let domain = (nanos as u32 ^ std::process::id()) & 0xffff;
    format!("{domain:04x}:3b:00.0")
}

fn config(
    fixtures: &Fixtures,
    data: &std::path::Path,
    gpus: &std::path::Path,
    otlp_port: u16,
) -> String {
    let base = stats_config(fixtures, data, "stats_interval_secs = 1\n")
        .replace("kmsg = false", "kmsg = true");
    format!(
        "{base}\n[enrich]\nnvidia_proc_dir = \"{}\"\n\n[metrics]\naddress = \"127.0.0.1:0\"\n\n\
         [metrics.otlp]\nendpoint = \"http://127.0.0.1:{otlp_port}\"\ninterval_secs = 1\ntimeout_secs = 2\n",
        gpus.display()
    )
}

fn xid_series(bus: &str, code: u32, name: &str, severity: &str) -> String {
    format!(
        "gpuship_gpu_xid_errors_total{{gpu_uuid=\"{UUID}\",pci_bus_id=\"{bus}\",gpu_index=\"0\",\
         code=\"{code}\",name=\"{name}\",severity=\"{severity}\"}}"
    )
}

#[test]
fn xids_and_cuda_calls_move_the_health_series_by_exactly_what_happened() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let rotel = Rotel::start_printing(0, 0, "metrics");
    let data = data_dir();
    let bus = unique_bus_id();
    let gpus = fake_gpu_dir("NVIDIA H100 80GB HBM3", &[(0, &bus, UUID)]);
    let agent = Agent::start(
        &config(&fixtures, data.path(), gpus.path(), rotel.grpc_port),
        &[],
    );
    let address = agent.metrics_address();
    let fell_off = xid_series(&bus, 79, "GPU fell off the PCIe bus", "fatal");
    let before = scrape(&address);
    assert!(!before.contains_key(&fell_off), "{before:?}");

    // One XID: its series appears at exactly 1, with the GPU's latest XID.
    let (domain, rest) = bus.split_once(':').unwrap();
    let short_bus = format!("{domain}:{}", &rest[..5]);
    kmsg(&format!(
        "<3>NVRM: Xid (PCI:{short_bus}): 79, pid=1234, name=python3, GPU has fallen off the bus."
    ));
    wait_until(
        Duration::from_secs(10),
        "the XID reaches /metrics",
        || scrape(&address).contains_key(&fell_off),
        || agent.log(),
    );
    let one = scrape_floats(&address);
    assert_eq!(one[&fell_off].0, "1");
    let gpu = format!("{{gpu_uuid=\"{UUID}\",pci_bus_id=\"{bus}\",gpu_index=\"0\"}}");
    assert_eq!(one[&format!("gpuship_gpu_last_xid_code{gpu}")].0, "79");
    let when = one[&format!("gpuship_gpu_last_xid_timestamp_seconds{gpu}")].1;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - 30.0..=now).contains(&when), "{when} vs {now}");

    // Two more: each series moves by exactly what was written.
    kmsg(&format!(
        "<4>NVRM: Xid (PCI:{short_bus}): 31, pid=468, name=python3, channel 0x0000000a, intr 00000000. \
         MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
    ));
    kmsg(&format!(
        "<3>NVRM: Xid (PCI:{short_bus}): 79, pid=1234, name=python3, GPU has fallen off the bus."
    ));
    let page_fault = xid_series(&bus, 31, "GPU MMU page fault", "error");
    wait_until(
        Duration::from_secs(10),
        "both XIDs reach /metrics",
        || {
            let m = scrape(&address);
            m.get(&fell_off) == Some(&2) && m.get(&page_fault) == Some(&1)
        },
        || format!("{:?}\n{}", scrape(&address), agent.log()),
    );
    assert_eq!(
        scrape(&address)[&format!("gpuship_gpu_last_xid_code{gpu}")],
        79
    );

    // CUDA calls: 3 iterations of the stand-in sequence, launches aggregated in the kernel.
    let (_, stdout) = fixtures.run_workload(
        &["sequence", "3"],
        &[("FAKE_CUDA_RESULTS", "cuCtxSynchronize=700")],
    );
    assert_eq!(stdout.trim(), "workload: sequence iterations=3 calls=90");
    let calls = |function: &str| format!("gpuship_cuda_calls_total{{function=\"{function}\"}}");
    wait_until(
        Duration::from_secs(15),
        "every call reaches /metrics (aggregates after their interval)",
        || scrape(&address).get(&calls("cuLaunchKernel")) == Some(&3),
        || format!("{:?}", scrape(&address)),
    );
    let m = scrape(&address);
    for (function, expected) in [
        ("cuLaunchKernel", 3),
        ("cuLaunchKernelEx", 3),
        ("cuMemAlloc_v2", 6),
        ("cuCtxSynchronize", 3),
        ("cuMemFree_v2", 6),
    ] {
        assert_eq!(m[&calls(function)], expected, "{function}");
    }
    let errors = |function: &str, result: &str| {
        format!("gpuship_cuda_call_errors_total{{function=\"{function}\",result=\"{result}\"}}")
    };
    assert_eq!(m[&errors("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY")], 3);
    assert_eq!(
        m[&errors("cuCtxSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")],
        3
    );
    let failed: u64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("gpuship_cuda_call_errors_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(failed, 6, "{m:?}");
    // The histogram counts every timed call: aggregated launches and rows alike.
    let histogram = |function: &str, suffix: &str| {
        m[&format!("gpuship_cuda_call_duration_seconds_{suffix}{{function=\"{function}\"}}")]
    };
    for function in ["cuLaunchKernel", "cuMemAlloc_v2", "cuCtxSynchronize"] {
        assert_eq!(
            histogram(function, "count"),
            m[&calls(function)],
            "{function}"
        );
        let inf = m[&format!(
            "gpuship_cuda_call_duration_seconds_bucket{{le=\"+Inf\",function=\"{function}\"}}"
        )];
        assert_eq!(inf, m[&calls(function)], "{function}");
    }

    // Every name the operator kit's rules and dashboard may use is a family of a real scrape
    // (declared by `# TYPE` even before its first sample; counters without `_total` there).
    let (_, body) = http(&address, "GET /metrics HTTP/1.1\r\n\r\n");
    let families: std::collections::BTreeSet<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    for name in crate::operator_kit::EXPOSED {
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        assert!(
            families.contains(family),
            "the kit's {name} is not exposed: {families:?}"
        );
    }

    // Stopping sends the final totals to the collector.
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    let printed = parse_points(&rotel.peer.output());
    let hw_errors = |code: &str| {
        latest(
            &printed,
            "hw.errors",
            &[
                ("hw.type", "Str(gpu)"),
                ("hw.id", &format!("Str({UUID})")),
                ("error.type", &format!("Str(xid_{code})")),
            ],
        )
        .map(|p| p.value.clone())
    };
    assert_eq!(hw_errors("79").as_deref(), Some("2"), "{printed:?}");
    assert_eq!(hw_errors("31").as_deref(), Some("1"));
    let point = latest(&printed, "hw.errors", &[("error.type", "Str(xid_79)")]).unwrap();
    assert_eq!(point.unit, "{error}");
    assert_eq!(point.attributes["gpu.xid.severity"], "Str(fatal)");
    assert_eq!(point.attributes["gpu.pci_bus_id"], format!("Str({bus})"));
    assert_eq!(point.attributes["gpu.index"], "Int(0)");
    let cuda = |metric: &str, attributes: &[(&str, &str)]| {
        latest(&printed, metric, attributes).map(|p| p.value.clone())
    };
    assert_eq!(
        cuda("cuda.calls", &[("cuda.function", "Str(cuLaunchKernel)")]).as_deref(),
        Some("3")
    );
    assert_eq!(
        cuda(
            "cuda.call.errors",
            &[
                ("cuda.function", "Str(cuCtxSynchronize)"),
                ("error.type", "Str(CUDA_ERROR_ILLEGAL_ADDRESS)")
            ]
        )
        .as_deref(),
        Some("3")
    );
    let durations = latest(
        &printed,
        "cuda.call.duration",
        &[("cuda.function", "Str(cuMemAlloc_v2)")],
    )
    .expect("a duration histogram");
    assert_eq!(
        (durations.data_type.as_str(), durations.value.as_str()),
        ("Histogram", "6")
    );
}

#[test]
fn an_absent_collector_costs_nothing_and_gets_the_totals_when_it_comes() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let bus = unique_bus_id();
    let gpus = fake_gpu_dir("NVIDIA H100 80GB HBM3", &[(0, &bus, UUID)]);
    let port = free_port();
    let agent = Agent::start(&config(&fixtures, data.path(), gpus.path(), port), &[]);
    let address = agent.metrics_address();
    let exports = |outcome: &str| {
        scrape(&address)[&format!("gpuship_otlp_metrics_exports_total{{outcome=\"{outcome}\"}}")]
    };
    wait_until(
        Duration::from_secs(10),
        "exports fail while nothing listens",
        || exports("failed") >= 2,
        || agent.log(),
    );
    assert_eq!(exports("succeeded"), 0);
    let (domain, rest) = bus.split_once(':').unwrap();
    kmsg(&format!(
        "<3>NVRM: Xid (PCI:{domain}:{}): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        &rest[..5]
    ));
    // The collector comes: the next export carries the XID counted during the outage.
    let rotel = Rotel::start_printing(port, 0, "metrics");
    wait_until(
        Duration::from_secs(15),
        "the collector receives the XID counted while it was away",
        || {
            latest(
                &parse_points(&rotel.peer.output()),
                "hw.errors",
                &[("hw.id", &format!("Str({UUID})"))],
            )
            .is_some_and(|p| p.value == "1")
        },
        || format!("{}\n{}", rotel.peer.output(), agent.log()),
    );
    // The agent counts an export when the collector's answer comes back, which can be just
    // after the collector has printed what it received.
    wait_until(
        Duration::from_secs(10),
        "the agent counts the export the collector received",
        || exports("succeeded") >= 1,
        || agent.log(),
    );
    // One warning for the outage, not one per export.
    let warnings = agent.log().matches("metrics export failed").count();
    assert_eq!(warnings, 1, "{}", agent.log());
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
}
