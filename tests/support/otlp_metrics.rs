//! Reading the metric data points a rotel collector printed (`--debug-log metrics
//! --debug-log-verbosity detailed`).

use std::collections::BTreeMap;

/// One data point as printed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PrintedPoint {
    /// The metric's name.
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// `Sum`, `Gauge` or `Histogram`.
    pub data_type: String,
    /// The point's attributes as printed (`Str(x)`, `Int(3)`).
    pub attributes: BTreeMap<String, String>,
    /// `Value:` of a number point, `Count:` of a histogram point.
    pub value: String,
    /// `Sum:` of a histogram point.
    pub sum: String,
    /// The point's start, nanoseconds.
    pub start_unix_nano: u64,
}

/// Every data point in `text`, in order.
pub fn parse_points(text: &str) -> Vec<PrintedPoint> {
    let mut points = Vec::new();
    let (mut metric, mut unit, mut data_type) = (String::new(), String::new(), String::new());
    let mut current: Option<PrintedPoint> = None;
    let mut in_attributes = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if line.starts_with("Metric #") || line.starts_with("ResourceMetrics #") {
            points.extend(current.take());
            in_attributes = false;
        } else if line.starts_with("NumberDataPoints #")
            || line.starts_with("HistogramDataPoints #")
        {
            points.extend(current.take());
            current = Some(PrintedPoint {
                metric: metric.clone(),
                unit: unit.clone(),
                data_type: data_type.clone(),
                ..Default::default()
            });
            in_attributes = false;
        } else if trimmed == "Data point attributes:" {
            in_attributes = true;
        } else if let Some(pair) = trimmed.strip_prefix("-> ") {
            let (key, value) = pair.split_once(": ").unwrap_or((pair, ""));
            match (in_attributes, current.as_mut()) {
                (true, Some(point)) => {
                    point.attributes.insert(key.to_string(), value.to_string());
                }
                _ => match key {
                    "Name" => metric = value.to_string(),
                    "Unit" => unit = value.to_string(),
                    "DataType" => data_type = value.to_string(),
                    _ => {}
                },
            }
        } else if let Some(point) = current.as_mut() {
            in_attributes = false;
            let field = |name: &str| trimmed.strip_prefix(name).map(|v| v.trim().to_string());
            if let Some(v) = field("StartTimestamp:") {
                point.start_unix_nano = v.parse().unwrap_or(0);
            } else if let Some(v) = field("Value:").or_else(|| field("Count:")) {
                point.value = v;
            } else if let Some(v) = field("Sum:") {
                point.sum = v;
            }
        }
    }
    points.extend(current);
    points
}

/// The latest printed value of the point of `metric` whose attributes include `attributes`.
pub fn latest<'a>(
    points: &'a [PrintedPoint],
    metric: &str,
    attributes: &[(&str, &str)],
) -> Option<&'a PrintedPoint> {
    points.iter().rev().find(|p| {
        p.metric == metric
            && attributes
                .iter()
                .all(|(k, v)| p.attributes.get(*k).map(String::as_str) == Some(*v))
    })
}
