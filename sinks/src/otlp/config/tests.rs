//! Tests of the OTLP sink's configuration: defaults, validation and environment expansion.

use super::*;

#[test]
fn defaults_and_urls() {
    let config: OtlpSinkConfig = toml::from_str("endpoint = \"http://127.0.0.1:4317\"").unwrap();
    assert_eq!(
        config,
        OtlpSinkConfig::with_endpoint("http://127.0.0.1:4317")
    );
    assert!(config.problems().is_empty());
    assert_eq!(config.request_url(), "http://127.0.0.1:4317");
    let http: OtlpSinkConfig =
        toml::from_str("endpoint = \"http://c:4318\"\nprotocol = \"http/protobuf\"").unwrap();
    assert_eq!(http.request_url(), "http://c:4318/v1/logs");
    let custom: OtlpSinkConfig =
        toml::from_str("endpoint = \"https://c/otlp/v1/logs\"\nprotocol = \"http/protobuf\"")
            .unwrap();
    assert_eq!(custom.request_url(), "https://c/otlp/v1/logs");
}

#[test]
fn problems_name_their_keys() {
    let config: OtlpSinkConfig = toml::from_str(
        "endpoint = \"ftp://x\"\nbatch_size = 0\n[headers]\n\"bad name\" = \"v\"\n\
         token = { env = \"A\", file = \"/b\" }\n[resource_attributes]\n\"k8s.node.name\" = \"${env:}\"\n\
         \"k8s.pod.name\" = \"${env:GPUSHIP_TEST_UNSET_POD}\"\n",
    )
    .unwrap();
    let keys: Vec<String> = config.problems().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "endpoint",
            "batch_size",
            "headers.bad name",
            "headers.token",
            "resource_attributes.k8s.node.name"
        ]
    );
    let err = toml::from_str::<OtlpSinkConfig>("endpoint = \"http://c\"\nprotocol = \"thrift\"")
        .unwrap_err();
    assert!(err.message().contains("http/protobuf"), "{err}");
}

#[test]
fn header_values_that_cannot_be_sent_are_refused_without_showing_them() {
    let config: OtlpSinkConfig = toml::from_str(
        "endpoint = \"http://c:4317\"\ntimeout_secs = 18446744073709551615\n[headers]\n\
         a = \"Bearer x\\r\\nX-Injected: 1\"\nb = \"bell\\u0007\"\nc = \"caf\u{e9}\"\nd = \"ok\\tvalue\"\n",
    )
    .unwrap();
    let problems = config.problems();
    assert_eq!(
        problems,
        [
            (
                "timeout_secs".to_string(),
                "18446744073709551615 is outside 1..=3600".to_string()
            ),
            (
                "headers.a".to_string(),
                "the value contains a line break (CR/LF); not a valid header value".to_string()
            ),
            (
                "headers.b".to_string(),
                "the value contains the control character U+0007; not a valid header value"
                    .to_string()
            ),
            (
                "headers.c".to_string(),
                "the value is not ASCII; not a valid header value".to_string()
            ),
        ]
    );
    // A secret is only read at start: the same check applies then, naming the header.
    std::env::set_var("GPUSHIP_TEST_OTLP_CRLF", "Bearer secret\r\nX-Injected: 1");
    let secret: OtlpSinkConfig = toml::from_str(
        "endpoint = \"http://c:4317\"\n[headers]\nAuthorization = { env = \"GPUSHIP_TEST_OTLP_CRLF\" }\n",
    )
    .unwrap();
    assert!(secret.problems().is_empty());
    let err = secret.check_start().unwrap_err();
    assert_eq!(
        err,
        "header Authorization: the value contains a line break (CR/LF); not a valid header value"
    );
    assert!(!err.contains("secret"));
}

#[test]
fn headers_and_resource_attributes_resolve_from_the_environment() {
    std::env::set_var("GPUSHIP_TEST_OTLP_TOKEN", "Bearer abc");
    std::env::set_var("GPUSHIP_TEST_NODE", "node-9");
    let config: OtlpSinkConfig = toml::from_str(
        "endpoint = \"http://c:4317\"\n[headers]\nAuthorization = { env = \"GPUSHIP_TEST_OTLP_TOKEN\" }\n\
         x-scope-orgid = \"tenant-1\"\n[resource_attributes]\n\"k8s.node.name\" = \"${env:GPUSHIP_TEST_NODE}\"\n",
    )
    .unwrap();
    let headers = config.resolved_headers().unwrap();
    assert_eq!(headers[0].0, "authorization");
    assert_eq!(headers[0].1.expose(), "Bearer abc");
    assert_eq!(headers[1].1.expose(), "tenant-1");
    assert!(!format!("{config:?} {headers:?}").contains("Bearer abc"));
    assert_eq!(
        config.resolved_resource_attributes().unwrap()["k8s.node.name"],
        "node-9"
    );
}
