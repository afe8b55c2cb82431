use super::*;

#[test]
fn namespaces_are_dot_separated_levels_of_plain_names() {
    assert_eq!(parse_namespace("gpuship").unwrap(), ["gpuship"]);
    assert_eq!(
        parse_namespace("fleet.gpu-ship_1").unwrap(),
        ["fleet", "gpu-ship_1"]
    );
    for bad in [
        "",
        ".",
        "a..b",
        "a.",
        "../x",
        "a/b",
        "a b",
        "a\"b",
        "a\nb",
        "\u{1b}[2J",
    ] {
        let err = parse_namespace(bad).unwrap_err().to_string();
        assert!(err.contains("each dot-separated level"), "{bad:?}: {err}");
    }
}

#[test]
fn uris_are_http_without_credentials_or_query() {
    assert_eq!(
        parse_uri("http://127.0.0.1:8181/").unwrap(),
        "http://127.0.0.1:8181"
    );
    assert_eq!(
        parse_uri("https://glue.us-east-1.amazonaws.com/iceberg").unwrap(),
        "https://glue.us-east-1.amazonaws.com/iceberg"
    );
    for bad in ["ftp://x", "http://", "127.0.0.1:8181"] {
        let err = parse_uri(bad).unwrap_err().to_string();
        assert!(err.contains("must start with http://"), "{bad:?}: {err}");
    }
    for bad in [
        "http:///x",
        "http://user:secret@host",
        "http://host/?warehouse=x",
        "http://host/#x",
        "http://host\n/x",
    ] {
        let err = parse_uri(bad).unwrap_err().to_string();
        assert!(err.contains("without a query"), "{bad:?}: {err}");
        assert!(!err.contains("secret"), "{err}");
    }
}

#[test]
fn warehouse_names_are_encoded_as_query_values() {
    assert_eq!(
        percent_encode("s3://lake/a b&c"),
        "s3%3A%2F%2Flake%2Fa%20b%26c"
    );
    assert_eq!(percent_encode("plain-name_1.x~"), "plain-name_1.x~");
    assert_eq!(percent_encode(".."), "..");
    assert_eq!(percent_encode("a\nb"), "a%0Ab");
}

#[test]
fn catalog_messages_are_one_printable_line() {
    assert_eq!(
        printable("a\nb\u{1b}[2Jc\u{202e}d"),
        "a\\nb\\u{1b}[2Jc\\u{202e}d"
    );
    assert!(!printable("\u{9b}x\r").chars().any(char::is_control));
    assert_eq!(printable(&"x".repeat(400)).len(), 303);
}
