//! The XID catalog: for every code NVIDIA documents (1 to 185 as of driver R620), a short name,
//! a category, a severity and the recommended immediate action, written in this project's words
//! from NVIDIA's public XID catalog and the open GPU kernel modules' error list. The data lives
//! in `catalog.tsv` beside this file (one line per code, reviewed like code); the version is
//! written into every XID row. Codes outside the table still ship, marked `unknown`.

use std::fmt;
use std::sync::LazyLock;

/// The catalog's version, recorded in every row as `catalog_version`.
pub const CATALOG_VERSION: &str = "2026.11-r620";

const DATA: &str = include_str!("catalog.tsv");

/// Kinds of XID.
pub const CATEGORIES: [&str; 8] = [
    "hardware",
    "memory",
    "nvlink",
    "driver",
    "application",
    "informational",
    "reserved",
    "unknown",
];
/// Severities, least to most severe.
pub const SEVERITIES: [&str; 4] = ["info", "warning", "error", "fatal"];
/// Recommended immediate actions.
pub const ACTIONS: [&str; 8] = [
    "none",
    "restart_application",
    "check_application",
    "reset_gpu",
    "reboot_node",
    "drain_and_check_hardware",
    "update_driver",
    "contact_support",
];

/// One catalog entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidInfo {
    /// The XID number.
    pub code: u32,
    /// Short name.
    pub name: String,
    /// One of [`CATEGORIES`].
    pub category: &'static str,
    /// One of [`SEVERITIES`].
    pub severity: &'static str,
    /// One of [`ACTIONS`].
    pub action: &'static str,
    /// One sentence: what it means.
    pub description: String,
}

impl fmt::Display for XidInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "XID {}: {}", self.code, self.name)?;
        writeln!(f, "  category:  {}", self.category)?;
        writeln!(f, "  severity:  {}", self.severity)?;
        writeln!(f, "  action:    {}", self.action)?;
        write!(f, "  meaning:   {}", self.description)
    }
}

fn known(value: &str, allowed: &'static [&'static str], what: &str, line: usize) -> &'static str {
    allowed
        .iter()
        .find(|a| **a == value)
        .copied()
        .unwrap_or_else(|| panic!("catalog.tsv line {line}: unknown {what} {value:?}"))
}

static ENTRIES: LazyLock<Vec<XidInfo>> = LazyLock::new(|| {
    DATA.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|(index, line)| {
            let line_no = index + 1;
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(
                fields.len(),
                6,
                "catalog.tsv line {line_no}: 6 fields expected"
            );
            XidInfo {
                code: fields[0]
                    .parse()
                    .unwrap_or_else(|_| panic!("catalog.tsv line {line_no}: bad code")),
                name: fields[1].to_string(),
                category: known(fields[2], &CATEGORIES, "category", line_no),
                severity: known(fields[3], &SEVERITIES, "severity", line_no),
                action: known(fields[4], &ACTIONS, "action", line_no),
                description: fields[5].to_string(),
            }
        })
        .collect()
});

/// Every entry, by code.
pub fn entries() -> &'static [XidInfo] {
    &ENTRIES
}

/// The entry for `code`, or an `unknown` one for codes the catalog does not know.
pub fn lookup(code: u32) -> XidInfo {
    ENTRIES
        .binary_search_by_key(&code, |e| e.code)
        .map(|i| ENTRIES[i].clone())
        .unwrap_or_else(|_| XidInfo {
            code,
            name: "Unknown XID".into(),
            category: "unknown",
            severity: "error",
            action: "contact_support",
            description: "Not in this catalog: a newer driver's code; check NVIDIA's XID catalog."
                .into(),
        })
}

/// The OTLP severity number of a catalog severity.
pub fn otlp_severity(severity: &str) -> i32 {
    match severity {
        "info" => 9,
        "warning" => 13,
        "fatal" => 21,
        _ => 17,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_code_is_there_once_in_order() {
        let codes: Vec<u32> = entries().iter().map(|e| e.code).collect();
        assert_eq!(codes, (1..=185).collect::<Vec<u32>>());
        for entry in entries() {
            assert!(
                !entry.name.is_empty() && !entry.description.is_empty(),
                "{entry:?}"
            );
        }
    }

    #[test]
    fn well_known_codes_say_what_to_do() {
        let fell_off = lookup(79);
        assert_eq!(
            (fell_off.category, fell_off.severity),
            ("hardware", "fatal")
        );
        let dbe = lookup(48);
        assert_eq!(dbe.category, "memory");
        assert_eq!(dbe.action, "reset_gpu");
        let fault = lookup(31);
        assert_eq!(fault.category, "application");
        assert_eq!(fault.action, "restart_application");
        let unknown = lookup(999);
        assert_eq!(
            (unknown.category, unknown.name.as_str()),
            ("unknown", "Unknown XID")
        );
        assert!(lookup(79).to_string().starts_with("XID 79: "));
    }
}
