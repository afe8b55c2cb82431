//! Tests of `engine` (beside it, so the module file holds only the code).

use super::*;
use crate::range::range_of;

#[test]
fn every_kinds_schema_crosses_from_the_sinks_arrow_unchanged() {
    use std::collections::BTreeMap;
    let sorted = |pairs: Vec<(&String, &String)>| -> BTreeMap<String, String> {
        pairs
            .into_iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    // Each side's fields as text: the two arrows' types cannot be compared directly.
    macro_rules! describe {
        ($schema:expr) => {
            $schema
                .fields()
                .iter()
                .map(|f| {
                    let meta = sorted(f.metadata().iter().collect());
                    format!(
                        "{} {:?} {} {meta:?}",
                        f.name(),
                        f.data_type(),
                        f.is_nullable()
                    )
                })
                .collect::<Vec<String>>()
        };
    }
    for &kind in EventKind::ALL {
        let ours = kind_schema(kind);
        let theirs = gpuship_sinks::schema::schema_for(kind);
        assert_eq!(describe!(ours), describe!(theirs), "{kind}");
        assert_eq!(
            sorted(ours.metadata().iter().collect()),
            sorted(theirs.metadata().iter().collect()),
            "{kind}"
        );
        assert_eq!(ours.fields().len(), theirs.fields().len(), "{kind}");
    }
}

#[test]
fn sql_that_would_write_or_change_the_session_is_refused() {
    let folder = tempfile::tempdir().unwrap();
    let target = folder.path().join("copied.csv");
    let engine = Engine::new().unwrap();
    for sql in [
        format!("COPY (SELECT 1 AS one) TO '{}'", target.display()),
        format!(
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '{}'",
            folder.path().display()
        ),
        "CREATE TABLE t AS SELECT 1".to_string(),
        "SET datafusion.execution.batch_size = 1".to_string(),
    ] {
        assert!(
            matches!(engine.sql(&sql), Err(QueryError::Sql(_))),
            "{sql} must be refused as SQL"
        );
    }
    assert!(!target.exists());
    let answer = engine.sql("SELECT 40 + 2 AS answer").unwrap();
    assert_eq!(answer[0].num_rows(), 1);
}

#[test]
fn an_answer_larger_than_the_memory_limit_is_a_limit_error() {
    let limits = Limits {
        memory: 4 << 20,
        timeout: std::time::Duration::from_secs(60),
    };
    let engine = Engine::with_limits(limits).unwrap();
    let sql = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 200000) \
               SELECT n, repeat('y', 100) AS s FROM r";
    match engine.sql(sql) {
        Err(QueryError::Limit(message)) => {
            assert!(message.starts_with("memory limit reached"), "{message}");
            assert!(message.contains("--memory-limit 4.0 MiB"), "{message}");
        }
        other => panic!("{:?}", other.map(|b| b.len())),
    }
    let small = engine.sql("SELECT repeat('y', 100) AS s").unwrap();
    assert_eq!(small[0].num_rows(), 1);
}

#[test]
fn the_range_names_its_first_and_last_partition() {
    let filter = range_filter(&range_of("2026-11-22T03:30:00Z", "2026-11-22T05:00:00Z"));
    let text = filter.to_string();
    assert!(text.contains("Utf8(\"2026-11-22\")"), "{text}");
    assert!(text.contains("Utf8(\"03\")"), "{text}");
    assert!(
        text.contains("Utf8(\"04\")"),
        "the end is exclusive: {text}"
    );
    assert!(!text.contains("Utf8(\"05\")"), "{text}");
}
