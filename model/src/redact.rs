//! Redaction of text that is printed: URLs (endpoints, broker lists, object-store requests)
//! lose their credentials, query values and fragments before they reach a log or an error.
//! Pure string functions, shared by the sinks (which print endpoints) and the lake (which
//! prints the object store's errors).

/// What a redacted secret is printed as.
pub const REDACTED: &str = "***";

/// `text` (one URL, or a comma-separated list such as Kafka brokers) with its secrets replaced
/// by `***`: the userinfo before `@` (user and password), every query value, and the fragment.
/// Scheme, host, port and path are kept, so the line still says where the agent connects.
///
/// `http://user:pw@collector:4318/v1/logs?token=t` -> `http://***@collector:4318/v1/logs?token=***`
pub fn redact_url(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        // Commas separate list items, except inside a query or fragment (which run to the end).
        let (item, next) = match rest.find([',', '?', '#']) {
            Some(at) if rest.as_bytes()[at] == b',' => (&rest[..at], Some(&rest[at + 1..])),
            _ => (rest, None),
        };
        redact_one(item, &mut out);
        match next {
            Some(next) => {
                out.push(',');
                rest = next;
            }
            None => return out,
        }
    }
}

fn redact_one(item: &str, out: &mut String) {
    let (head, fragment) = match item.split_once('#') {
        Some((head, fragment)) => (head, Some(fragment)),
        None => (item, None),
    };
    let (head, query) = match head.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (head, None),
    };
    let (scheme, after) = match head.find("://") {
        Some(at) => head.split_at(at + 3),
        None => ("", head),
    };
    let (authority, path) = after.split_at(after.find('/').unwrap_or(after.len()));
    out.push_str(scheme);
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(REDACTED);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    out.push_str(path);
    if let Some(query) = query {
        out.push('?');
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((key, _)) => {
                    out.push_str(key);
                    out.push('=');
                    out.push_str(REDACTED);
                }
                // A bare item may be the token itself.
                None if !pair.is_empty() => out.push_str(REDACTED),
                None => {}
            }
        }
    }
    if let Some(fragment) = fragment {
        out.push('#');
        if !fragment.is_empty() {
            out.push_str(REDACTED);
        }
    }
}

/// `text` (a log line or an error message from a client library) with every URL in it redacted
/// as [`redact_url`] does, and each of `secrets` (values the agent handed to that library)
/// replaced by `***` wherever it appears. A URL starts at its scheme (`s3://`, `https://`,
/// `sasl_ssl://`) and ends at whitespace, a quote or a closing bracket.
///
/// `PUT https://u:pw@minio:9000/b/k?X-Amz-Signature=ab failed` ->
/// `PUT https://***@minio:9000/b/k?X-Amz-Signature=*** failed`
pub fn redact_text(text: &str, secrets: &[&str]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme_len = rest[..at]
            .bytes()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.' | b'_'))
            .count();
        let start = at - scheme_len;
        let end = rest[at..]
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | '`' | ')' | ']' | '>' | '<')
            })
            .map_or(rest.len(), |len| at + len);
        out.push_str(&rest[..start]);
        // A URL in a list (`a://x, b://y`) keeps its trailing comma outside the URL.
        let url = &rest[start..end];
        let (url, trailing) = match url.strip_suffix([',', ';', '.']) {
            Some(url) => (url, &rest[start + url.len()..end]),
            None => (url, ""),
        };
        redact_one(url, &mut out);
        out.push_str(trailing);
        rest = &rest[end..];
    }
    out.push_str(rest);
    for secret in secrets.iter().filter(|s| s.len() >= 3) {
        if out.contains(*secret) {
            out = out.replace(*secret, REDACTED);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_userinfo_query_values_and_fragment() {
        for (url, expected) in [
            ("http://user:pw@host", "http://***@host"),
            (
                "https://user:p%40ss@collector:4318/v1/logs",
                "https://***@collector:4318/v1/logs",
            ),
            ("https://token@host/x@y", "https://***@host/x@y"),
            ("http://a:b@c@host:1/", "http://***@host:1/"),
            (
                "https://c/otlp?token=s3cret&x=1&bare&",
                "https://c/otlp?token=***&x=***&***&",
            ),
            ("https://c/#access_token=s3cret", "https://c/#***"),
            ("http://h?sig=a,b,c", "http://h?sig=***"),
            ("user:pw@broker:9092", "***@broker:9092"),
            (
                "b1:9092,SASL_SSL://u:pw@b2:9093,b3",
                "b1:9092,SASL_SSL://***@b2:9093,b3",
            ),
            // Nothing secret: unchanged.
            ("http://127.0.0.1:4317", "http://127.0.0.1:4317"),
            ("https://c/v1/logs", "https://c/v1/logs"),
            ("b1:9092,b2:9092", "b1:9092,b2:9092"),
            ("", ""),
            ("s3://bucket/prefix", "s3://bucket/prefix"),
        ] {
            assert_eq!(redact_url(url), expected, "{url}");
        }
    }

    #[test]
    fn text_loses_the_secrets_of_every_url_in_it_and_the_values_handed_over() {
        for (text, expected) in [
            (
                "Error performing PUT https://u:pw@minio:9000/b/k?X-Amz-Signature=ab in 3s",
                "Error performing PUT https://***@minio:9000/b/k?X-Amz-Signature=*** in 3s",
            ),
            (
                "sasl_ssl://alice:hunter22@b1:9093/1: Connect failed, next sasl_ssl://b2:9093/2.",
                "sasl_ssl://***@b1:9093/1: Connect failed, next sasl_ssl://b2:9093/2.",
            ),
            (
                "(\"s3://lake/p?token=abc\"), [http://x@y]",
                "(\"s3://lake/p?token=***\"), [http://***@y]",
            ),
            ("no url: ://, ends with ://", "no url: ://, ends with ://"),
            ("plain", "plain"),
            ("", ""),
            // Multi-byte text around a URL is kept whole.
            ("é https://a:b@h/ ü", "é https://***@h/ ü"),
        ] {
            assert_eq!(redact_text(text, &[]), expected, "{text}");
        }
        assert_eq!(
            redact_text(
                "SASL authentication failed for user alice (password hunter22): hunter22",
                &["hunter22", "", "ab"]
            ),
            "SASL authentication failed for user alice (password ***): ***"
        );
    }
}
