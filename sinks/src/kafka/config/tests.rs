//! Tests of the Kafka sink's configuration.

use super::*;

fn parse(text: &str) -> KafkaSinkConfig {
    toml::from_str(text).unwrap()
}

#[test]
fn defaults_are_acknowledged_zstd_and_keyed_by_gpu() {
    let config = parse("brokers = \"127.0.0.1:9092\"");
    assert_eq!(config, KafkaSinkConfig::with_brokers("127.0.0.1:9092"));
    assert!(config.problems().is_empty());
    let client = config.client_config().unwrap();
    for (key, value) in [
        ("bootstrap.servers", "127.0.0.1:9092"),
        ("enable.idempotence", "true"),
        ("acks", "all"),
        ("compression.type", "zstd"),
        ("linger.ms", "5"),
        ("message.timeout.ms", "30000"),
        ("security.protocol", "plaintext"),
    ] {
        assert_eq!(client.get(key), Some(value), "{key}");
    }
    assert_eq!(config.key, "{host}/{pci_bus_id}");
    assert_eq!(config.topic, "gpuship.{kind}");
}

#[test]
fn every_problem_is_reported_with_its_key() {
    let config = parse(
        "brokers = \"\"\ntopic = \"gpu.{gpu}\"\nkey = \"{host\"\n\
         [batch]\nmax_messages = 0\n\
         [librdkafka_options]\nacks = \"1\"\n\"ssl.key.password\" = \"x\"\n\"client.id\" = \"me\"\n",
    );
    let problems = config.problems();
    let keys: Vec<&str> = problems.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "brokers",
            "topic",
            "key",
            "batch.max_messages",
            "librdkafka_options.\"acks\"",
            "librdkafka_options.\"ssl.key.password\""
        ]
    );
    assert_eq!(
        problems[1].1,
        "unknown placeholder {gpu}; known: kind, host"
    );
    assert_eq!(
        problems[4].1,
        "conflicts with gpuship's own setting: acknowledged delivery (always acks=all)"
    );
}

#[test]
fn unknown_compression_is_a_parse_error() {
    let err = toml::from_str::<KafkaSinkConfig>("brokers = \"b:1\"\ncompression = \"brotli\"")
        .unwrap_err();
    assert!(err.message().contains("unknown variant `brotli`"), "{err}");
    assert!(err.message().contains("zstd"), "{err}");
}

#[test]
fn sasl_and_tls_become_librdkafka_settings_with_secrets_from_the_environment() {
    std::env::set_var("GPUSHIP_TEST_KAFKA_PW", "pa55");
    let config = parse(
        "brokers = \"b:9093\"\n[tls]\nca_file = \"/etc/ca.pem\"\n\
         [sasl]\nmechanism = \"SCRAM-SHA-512\"\nusername = \"gpu\"\npassword = { env = \"GPUSHIP_TEST_KAFKA_PW\" }\n",
    );
    assert!(config.problems().is_empty());
    assert!(!format!("{config:?}").contains("pa55"));
    let client = config.client_config().unwrap();
    assert_eq!(client.get("security.protocol"), Some("sasl_ssl"));
    assert_eq!(client.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
    assert_eq!(client.get("sasl.password"), Some("pa55"));
    assert_eq!(client.get("ssl.ca.location"), Some("/etc/ca.pem"));
    assert_eq!(
        client.get("ssl.endpoint.identification.algorithm"),
        Some("https")
    );
    let inline = toml::from_str::<KafkaSinkConfig>(
        "brokers = \"b:1\"\n[sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"inline\"",
    );
    assert!(inline.is_err(), "an inline password must not parse");
}

#[test]
fn every_size_and_duration_has_a_range_and_huge_values_do_not_overflow() {
    let config = parse(
        "brokers = \"b:9092\"\ndelivery_timeout_secs = 18446744073709551615\n\
         max_in_flight_messages = 0\nmax_in_flight_kbytes = 4294967296\n\
         [batch]\nlinger_ms = 900001\nmax_bytes = 2147483648\nmax_messages = 1000001\n\
         max_rows_per_message = 0\nmax_message_bytes = 1000000001\n",
    );
    let keys: Vec<(String, String)> = config.problems();
    assert_eq!(
        keys,
        [
            ("batch.linger_ms", "900001 is outside 0..=900000"),
            ("batch.max_bytes", "2147483648 is outside 1..=2147483647"),
            ("batch.max_messages", "1000001 is outside 1..=1000000"),
            ("batch.max_rows_per_message", "0 is outside 1..=1000000"),
            (
                "batch.max_message_bytes",
                "1000000001 is outside 1..=1000000000"
            ),
            (
                "delivery_timeout_secs",
                "18446744073709551615 is outside 1..=86400"
            ),
            ("max_in_flight_messages", "0 is outside 1..=10000000"),
            (
                "max_in_flight_kbytes",
                "4294967296 is outside 1..=2147483647"
            ),
        ]
        .map(|(k, m)| (k.to_string(), m.to_string()))
    );
    // Unvalidated, the millisecond conversion saturates instead of panicking.
    let client = config.client_config().unwrap();
    assert_eq!(
        client.get("message.timeout.ms"),
        Some("18446744073709551615")
    );
}
