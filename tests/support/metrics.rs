//! Talking to the agent's metrics endpoint as Prometheus and a probe would.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;

/// Sends one raw HTTP request; returns the status and the body.
pub fn http(address: &str, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("connect to metrics");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// Every integer sample of `/metrics`: `name{labels}` -> value. Samples that are not
/// integers (timestamps in seconds, histogram sums) are in [`scrape_floats`].
pub fn scrape(address: &str) -> BTreeMap<String, u64> {
    scrape_floats(address)
        .into_iter()
        .filter_map(|(series, (text, _))| Some((series, text.parse().ok()?)))
        .collect()
}

/// Every sample of `/metrics`: `name{labels}` -> (value as written, value as a number).
pub fn scrape_floats(address: &str) -> BTreeMap<String, (String, f64)> {
    let (status, body) = http(address, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200);
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("sample line");
            let number = value.parse().unwrap_or_else(|_| panic!("bad value in {l}"));
            (series.to_string(), (value.to_string(), number))
        })
        .collect()
}

/// The value of one series of a scrape; panics naming it when absent.
pub fn get(samples: &BTreeMap<String, u64>, series: &str) -> u64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no series {series}"))
}
