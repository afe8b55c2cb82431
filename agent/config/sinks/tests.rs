//! Tests of `[[sinks]]` parsing: shared options, the registered types, names and defaults.

use super::*;

fn parse(text: &str) -> Result<SinkEntry, String> {
    // The tables of one sink: `[buffer]` here is `[sinks.buffer]` in a file.
    let text = format!("[[sinks]]\n{}", text.replace("\n[", "\n[sinks."));
    let document = super::super::parse::Document::parse(&text).unwrap();
    let value = document.root.get_ref().get("sinks").unwrap();
    let DeValue::Array(items) = value.get_ref() else {
        panic!()
    };
    let mut problems = Problems {
        text: &text,
        list: Vec::new(),
    };
    let entry = SinkEntry::parse(0, items[0].clone(), &mut problems);
    match entry {
        Some(entry) if problems.list.is_empty() => Ok(entry),
        _ => Err(problems
            .list
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")),
    }
}

#[test]
fn names_are_restricted_to_plain_folder_names() {
    for good in ["lake", "parquet-0", "kafka.prod_2", "a", &"x".repeat(64)] {
        assert_eq!(sink_name_problem(good), None, "{good}");
    }
    for bad in [
        "",
        ".",
        "..",
        "../../escape",
        "a/b",
        "lake\"",
        "two\nlines",
        "sp ace",
        "ünï",
        &"x".repeat(65),
    ] {
        assert!(sink_name_problem(bad).is_some(), "{bad:?}");
    }
}

#[test]
fn names_are_unique() {
    let mut configs = vec![
        SinkEntry::new(SinkConfig::Parquet(ParquetSinkConfig::with_path("/a"))),
        SinkEntry::new(SinkConfig::Parquet(ParquetSinkConfig::with_path("/b"))),
    ];
    assert_eq!(sink_names(&configs), vec!["parquet-0", "parquet-1"]);
    assert_eq!(sink_names(&configs[..1]), vec!["parquet"]);
    configs[1].options.name = Some("lake".into());
    assert_eq!(sink_names(&configs), vec!["parquet-0", "lake"]);
}

#[test]
fn options_and_destination_are_split() {
    let entry = parse(
        "type = \"parquet\"\npath = \"/d\"\nname = \"lake\"\nkinds = [\"xid\"]\n\
         [buffer]\nmax_events = 10\nwhen_full = \"drop_oldest\"\n[cuda_filter]\nfailed = true\n",
    )
    .unwrap();
    assert_eq!(entry.options.name.as_deref(), Some("lake"));
    assert_eq!(entry.options.kinds, vec![EventKind::Xid]);
    assert_eq!(entry.options.buffer.max_events, 10);
    assert_eq!(
        entry.options.buffer.when_full,
        gpuship_sinks::WhenFull::DropOldest
    );
    assert_eq!(
        entry.sink,
        SinkConfig::Parquet(ParquetSinkConfig::with_path("/d"))
    );
    assert!(entry.options.cuda_filter.unwrap().keeps(700, 1));
}

#[test]
fn bad_option_values_are_errors() {
    let err =
        parse("type = \"parquet\"\npath = \"/d\"\n[buffer]\nwhen_full = \"drop_everything\"\n")
            .unwrap_err();
    assert!(err.contains("drop_everything"), "{err}");
    let err = parse("type = \"parquet\"\npath = \"/d\"\nkinds = [\"gpu\"]\n").unwrap_err();
    assert!(err.contains("gpu"), "{err}");
}

#[test]
fn filter_keeps_failed_or_slow_calls() {
    let filter = CudaFilter {
        all: false,
        failed: true,
        slower_than_ns: Some(1_000),
    };
    assert!(filter.keeps(700, 5));
    assert!(filter.keeps(0, 1_000));
    assert!(!filter.keeps(0, 999));
    let none = CudaFilter {
        all: false,
        failed: false,
        slower_than_ns: None,
    };
    assert!(!none.keeps(700, u64::MAX));
    assert!(CudaFilter { all: true, ..none }.keeps(0, 0));
}

#[test]
fn otlp_takes_failed_cuda_calls_unless_told_otherwise() {
    let entry = parse("type = \"otlp\"\nendpoint = \"http://c:4317\"\n").unwrap();
    assert_eq!(entry.options.cuda_filter, Some(CudaFilter::FAILED_ONLY));
    assert_eq!(entry.options.kinds, EventKind::ALL.to_vec());
    let all =
        parse("type = \"otlp\"\nendpoint = \"http://c:4317\"\ncuda_filter = { all = true }\n")
            .unwrap();
    assert_eq!(all.options.cuda_filter, None);
    let parquet = parse("type = \"parquet\"\npath = \"/d\"\n").unwrap();
    assert_eq!(parquet.options.cuda_filter, None);
}

#[test]
fn every_registered_type_parses_under_its_name() {
    assert_eq!(
        SINK_TYPES,
        ["parquet", "kafka", "jsonl", "otlp", "blackhole"],
        "the order error messages list them in"
    );
    let keys = [
        "path = \"/d\"\n",
        "brokers = \"b:9092\"\n",
        "",
        "endpoint = \"http://c:4317\"\n",
        "",
    ];
    for (type_name, keys) in SINK_TYPES.iter().zip(keys) {
        let entry = parse(&format!("type = \"{type_name}\"\n{keys}")).unwrap();
        assert_eq!(entry.sink.type_name(), *type_name);
        assert!(entry.sink.sink_type().problems().is_empty(), "{type_name}");
    }
}

#[test]
fn an_empty_kinds_list_names_every_kind() {
    let text = "[[sinks]]\ntype = \"blackhole\"\nkinds = []\n";
    let err = super::super::Config::from_toml(text, std::path::Path::new("t.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(r#"line 3: sinks[0].kinds: needs at least one of "xid", "cuda", "driver""#),
        "{err}"
    );
}
