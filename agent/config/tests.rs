//! Tests of config parsing and validation.

use std::path::Path;

use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, Path::new("test.toml"))
}

#[test]
fn empty_file_means_every_default() {
    let config = parse("").unwrap();
    assert!(
        config.sources.xid.tracepoint && config.sources.xid.kmsg && config.sources.cuda.enabled
    );
    assert_eq!(config.sources.cuda.libraries, vec!["auto"]);
    assert_eq!(config.sources.xid.tracepoint_name, "nvidia:nvidia_dev_xid");
    assert!(config.sinks.is_empty());
    let embedded = Config::embedded_default();
    assert_eq!(embedded.sinks.len(), 1);
    assert_eq!(embedded.sinks[0].sink.type_name(), "parquet");
}

#[test]
fn documented_default_file_parses_to_the_embedded_default() {
    let text = include_str!("../../config/gpuship.toml");
    let config = parse(text).unwrap();
    assert_eq!(config, Config::embedded_default());
}

#[test]
fn example_files_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            checked += 1;
        }
    }
    assert!(checked >= 1);
}

#[test]
fn unknown_key_names_the_key_and_line() {
    let text = "[sources.cuda]\nenabled = true\nlibraries = [\"auto\"]\nfuctions = [\"cu*\"]\n";
    let err = parse(text).unwrap_err().to_string();
    assert!(err.contains("line 4"), "{err}");
    assert!(err.contains("fuctions"), "{err}");
}

#[test]
fn unknown_key_inside_a_sink_names_the_key_and_line() {
    let text = "[[sinks]]\ntype = \"parquet\"\npath = \"/tmp/x\"\n\n[[sinks]]\ntype = \"parquet\"\npathh = \"/tmp/y\"\n";
    let err = parse(text).unwrap_err().to_string();
    assert!(err.contains("pathh"), "{err}");
    assert!(err.contains("line 5") || err.contains("line 7"), "{err}");
}

#[test]
fn unknown_sink_type_is_an_error() {
    let err = parse("[[sinks]]\ntype = \"s3\"\n").unwrap_err().to_string();
    assert!(err.contains("s3"), "{err}");
    assert!(err.contains("parquet"), "{err}");
}

#[test]
fn every_bad_value_is_reported_with_its_line() {
    let text = "\
[sources.cuda]
ring_size_mib = 3
inflight_slots = 1000
drain_interval_ms = 0
functions = [\"cu[\"]

[batch]
max_events = 0

[[sinks]]
type = \"parquet\"
path = \"/tmp/a\"
zstd_level = 99
";
    let err = parse(text).unwrap_err();
    let ConfigError::Invalid { problems, .. } = &err else {
        panic!("{err}")
    };
    let got: Vec<(String, Option<usize>)> =
        problems.iter().map(|p| (p.key.clone(), p.line)).collect();
    assert_eq!(
        got,
        vec![
            ("sources.cuda.functions".to_string(), Some(5)),
            ("sources.cuda.drain_interval_ms".to_string(), Some(4)),
            ("sources.cuda.ring_size_mib".to_string(), Some(2)),
            ("sources.cuda.inflight_slots".to_string(), Some(3)),
            ("batch.max_events".to_string(), Some(8)),
            ("sinks[0].zstd_level".to_string(), Some(13)),
        ]
    );
    let text = err.to_string();
    assert!(text.contains("6 problem(s)"), "{text}");
    assert!(
        text.contains("line 13: sinks[0].zstd_level: 99 is outside 1..=22"),
        "{text}"
    );
    assert!(
        text.contains(
            "line 3: sources.cuda.inflight_slots: 1000 is not a power of two in 1..=65536"
        ),
        "{text}"
    );
}

#[test]
fn wrong_type_is_a_parse_error_with_line() {
    let err = parse("[batch]\nmax_events = \"many\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn duplicate_parquet_roots_are_rejected() {
    let text = "[[sinks]]\ntype = \"parquet\"\npath = \"/d\"\n[[sinks]]\ntype = \"parquet\"\npath = \"/d\"\n";
    let err = parse(text).unwrap_err().to_string();
    assert!(err.contains("sinks[1].path"), "{err}");
}

#[test]
fn a_sink_without_cuda_rows_gets_no_default_filter_and_is_valid() {
    let config = parse(
        "[[sinks]]\ntype = \"otlp\"\nendpoint = \"http://127.0.0.1:4317\"\nkinds = [\"xid\", \"cuda_stats\"]\n\
         [[sinks]]\ntype = \"otlp\"\nname = \"calls\"\nendpoint = \"http://127.0.0.1:4317\"\n",
    )
    .unwrap();
    assert_eq!(config.sinks[0].options.cuda_filter, None);
    assert!(
        config.sinks[1].options.cuda_filter.is_some(),
        "OTLP's default (failed calls) still applies to a sink taking cuda rows"
    );
    let err = parse(
        "[[sinks]]\ntype = \"otlp\"\nendpoint = \"http://127.0.0.1:4317\"\nkinds = [\"xid\"]\n\
         [sinks.cuda_filter]\nfailed = true\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("cuda_filter: set, but the sink does not take \"cuda\" events"),
        "{err}"
    );
}

#[test]
fn stats_mode_keys_are_checked() {
    let config = parse("").unwrap();
    assert_eq!(
        config.sources.cuda.stats,
        [
            "cuLaunchKernel*",
            "cuMemcpy*Async*",
            "cuGraphLaunch*",
            "cuKernelGetFunction"
        ]
    );
    assert_eq!(
        (
            config.sources.cuda.stats_interval_secs,
            config.sources.cuda.slow_call_ns,
            config.sources.cuda.stats_max_entries
        ),
        (10, 10_000_000, 8_192)
    );
    assert_eq!(config.sources.cuda.stats_entry_only, ["cuLaunchKernel*"]);
    let err = parse(
        "[sources.cuda]\nstats = [\"cu[Launch\"]\nstats_interval_secs = 0\nslow_call_ns = 86400000000001\nstats_max_entries = 0\nentry_only = [\"[\"]\nstats_entry_only = [\"cu]\\u001b[\"]\n",
    )
    .unwrap_err()
    .to_string();
    for needle in [
        "sources.cuda.stats: bad glob \"cu[Launch\"",
        "sources.cuda.entry_only: bad glob \"[\"",
        "sources.cuda.stats_entry_only: bad glob",
        "sources.cuda.stats_interval_secs: 0 is outside 1..=3600",
        "sources.cuda.slow_call_ns: 86400000000001 is outside 0..=86400000000000",
        "sources.cuda.stats_max_entries: 0 is outside 1..=1048576",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn metrics_otlp_takes_the_connection_keys_and_an_interval() {
    let text = "[metrics.otlp]\nendpoint = \"https://collector:4318\"\nprotocol = \"http/protobuf\"\n\
                interval_secs = 15\ncompression = \"gzip\"\n[metrics.otlp.headers]\nauthorization = { env = \"TOKEN\" }\n";
    let config = parse(text).unwrap();
    let otlp = config.metrics.otlp.expect("[metrics.otlp]");
    assert_eq!(otlp.interval_secs, 15);
    assert_eq!(otlp.timeout_secs, 10);
    let connection = otlp.connection();
    assert_eq!(
        connection.signal_url("/v1/metrics"),
        "https://collector:4318/v1/metrics"
    );
    assert_eq!(connection.headers.len(), 1);
    assert_eq!(parse("").unwrap().metrics.otlp, None);
}

#[test]
fn metrics_otlp_errors_name_their_keys() {
    let text =
        "[metrics.otlp]\nendpoint = \"collector:4317\"\ninterval_secs = 0\ntimeout_secs = 0\n\
                [metrics.otlp.headers]\n\"bad header\" = \"x\"\n";
    let err = parse(text).unwrap_err().to_string();
    for key in [
        "metrics.otlp.endpoint",
        "metrics.otlp.interval_secs",
        "metrics.otlp.timeout_secs",
        "metrics.otlp.headers.bad header",
    ] {
        assert!(err.contains(key), "{key} in {err}");
    }
    // Sink-only keys are not keys here.
    let err = parse("[metrics.otlp]\nendpoint = \"http://c:4317\"\nbatch_size = 5\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("batch_size"), "{err}");
}

#[test]
fn flight_recorder_slots_are_off_or_a_power_of_two_and_its_window_is_bounded() {
    let config = parse("").unwrap();
    assert_eq!(config.sources.cuda.flight_recorder_slots_per_cpu, 4096);
    assert_eq!(config.sources.cuda.flight_recorder_secs, 10);
    assert!(!config.sources.cuda.flight_recorder_launch_details);
    let detailed = parse("[sources.cuda]\nflight_recorder_launch_details = true\n").unwrap();
    assert!(detailed.sources.cuda.flight_recorder_launch_details);
    let off = parse("[sources.cuda]\nflight_recorder_slots_per_cpu = 0\n").unwrap();
    assert_eq!(off.sources.cuda.flight_recorder_slots_per_cpu, 0);
    for (text, expected) in [
        (
            "flight_recorder_slots_per_cpu = 100",
            "sources.cuda.flight_recorder_slots_per_cpu: 100 is neither 0 (off) nor a power of two in 64..=1048576",
        ),
        (
            "flight_recorder_slots_per_cpu = 32",
            "sources.cuda.flight_recorder_slots_per_cpu: 32 is neither",
        ),
        (
            "flight_recorder_slots_per_cpu = 2097152",
            "sources.cuda.flight_recorder_slots_per_cpu: 2097152 is neither",
        ),
        (
            "flight_recorder_secs = 0",
            "sources.cuda.flight_recorder_secs: 0 is outside 1..=3600",
        ),
    ] {
        let err = parse(&format!("[sources.cuda]\n{text}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn xid_suspects_default_to_eight_and_are_bounded() {
    assert_eq!(parse("").unwrap().sources.xid.suspects, 8);
    assert_eq!(
        parse("[sources.xid]\nsuspects = 0\n")
            .unwrap()
            .sources
            .xid
            .suspects,
        0
    );
    let err = parse("[sources.xid]\nsuspects = 33\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 2: sources.xid.suspects: 33 is outside 0..=32"),
        "{err}"
    );
    // Beyond usize: a parse error with its line, never a wrap.
    let err = parse("[sources.xid]\nsuspects = -1\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 2"), "{err}");
}

/// `[agent] stats_interval_secs` was renamed `progress_interval_secs` (`[sources.cuda]` has a
/// `stats_interval_secs` of its own): the old name still sets it, is found for the warning
/// and named in its problems; both at once is an error, not a silent pick.
#[test]
fn the_agents_old_interval_name_is_still_read_and_reported_as_written() {
    let old = parse("[agent]\nstats_interval_secs = 7\n").unwrap();
    let new = parse("[agent]\nprogress_interval_secs = 7\n").unwrap();
    assert_eq!(old.agent.progress_interval_secs, 7);
    assert_eq!(old, new);
    assert_eq!(
        renamed_keys_used("# c\n[agent]\nstats_interval_secs = 7\n"),
        [(
            3,
            "agent.stats_interval_secs",
            "agent.progress_interval_secs"
        )]
    );
    assert_eq!(
        renamed_keys_used(
            "[agent]\nprogress_interval_secs = 7\n[sources.cuda]\nstats_interval_secs = 2\n"
        ),
        []
    );
    let problems = |text: &str| match parse(text) {
        Err(ConfigError::Invalid { problems, .. }) => problems
            .iter()
            .map(|p| format!("{:?} {}: {}", p.line, p.key, p.message))
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        problems("[agent]\nstats_interval_secs = 86401\n"),
        ["Some(2) agent.stats_interval_secs: 86401 is outside 0..=86400"]
    );
    assert_eq!(
        problems("[agent]\nprogress_interval_secs = 86401\n"),
        ["Some(2) agent.progress_interval_secs: 86401 is outside 0..=86400"]
    );
    let both = problems("[agent]\nstats_interval_secs = 1\nprogress_interval_secs = 2\n");
    assert_eq!(both.len(), 1, "{both:?}");
    assert!(both[0].contains("duplicate field"), "{both:?}");
}
