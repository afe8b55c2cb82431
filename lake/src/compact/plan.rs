//! What a compaction does to one hour folder, decided from the listing and the markers before
//! anything is written or deleted: whether the hour is closed, which agents' files it rewrites,
//! grouped by host and split into files of about `--target-file-size`, which leftovers of a
//! killed run it removes, and which replaced files are due for deletion. Pure: no I/O here.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::marker::{is_compaction_debris, source_host, Marker};
use super::rule::{name_of, HourFolder};
use crate::partition;

/// True when no agent writes into `folder` (`<table>/dt=.../hour=HH`) any more: its hour ended
/// at least `grace` before `now`. An agent finalises each file within `max_file_age_secs`
/// (300 s by default) of opening it, and opens it when a row of that hour arrives, so `grace`
/// must cover that age plus how late rows can reach the sink. Files that arrive later are not
/// lost: no marker names them, so readers read them and the next run compacts them.
pub fn hour_closed(folder: &str, now: DateTime<Utc>, grace: Duration) -> bool {
    let grace = chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::MAX);
    partition::span_of(&format!("{folder}/"))
        .and_then(|(_, end)| end.checked_add_signed(grace))
        .is_some_and(|closed| closed <= now)
}

/// The agents' files of one host in one hour: written to the same compacted file, their rows
/// sorted by host and time together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGroup {
    /// The host the files' names give.
    pub host: String,
    /// Keys and sizes, in key order.
    pub files: Vec<(String, u64)>,
}

impl HostGroup {
    /// Bytes of the group's files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, size)| size).sum()
    }
}

/// The agents' files `sources` (key, size) by host, hosts in name order.
pub fn host_groups(sources: &[(String, u64)]) -> Vec<HostGroup> {
    let mut groups: BTreeMap<&str, Vec<(String, u64)>> = BTreeMap::new();
    for (key, size) in sources {
        groups
            .entry(source_host(name_of(key)))
            .or_default()
            .push((key.clone(), *size));
    }
    groups
        .into_iter()
        .map(|(host, mut files)| {
            files.sort();
            HostGroup {
                host: host.to_string(),
                files,
            }
        })
        .collect()
}

/// `groups` (in order) split into compacted files of at most `target` bytes of input each; a
/// host is never split, so a host larger than `target` gets a file of its own. Compacted
/// Parquet is smaller than the small files it replaces, so outputs come out at or below
/// `target`.
pub fn split(groups: Vec<HostGroup>, target: u64) -> Vec<Vec<HostGroup>> {
    let mut files: Vec<Vec<HostGroup>> = Vec::new();
    let mut bytes = 0;
    for group in groups {
        let size = group.bytes();
        match files.last_mut() {
            Some(file) if bytes + size <= target => file.push(group),
            _ => {
                files.push(vec![group]);
                bytes = 0;
            }
        }
        bytes += size;
    }
    files
}

/// What one run does to one hour folder.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HourPlan {
    /// Leftovers of a run that did not commit (compacted files no marker names, unfinished
    /// uploads): invisible to readers, deleted first.
    pub debris: Vec<String>,
    /// The compacted files to write, each a list of host groups; empty when the hour is open
    /// or has no new agents' file.
    pub outputs: Vec<Vec<HostGroup>>,
    /// Committed markers whose replaced files are due for deletion, with those files.
    pub retire: Vec<(Marker, Vec<String>)>,
    /// True when the hour is still open (nothing is compacted in it).
    pub open: bool,
}

impl HourPlan {
    /// True when the run has nothing to do in this hour.
    pub fn is_empty(&self) -> bool {
        self.debris.is_empty() && self.outputs.is_empty() && self.retire.is_empty()
    }

    /// The agents' files the outputs replace.
    pub fn sources(&self) -> impl Iterator<Item = &(String, u64)> {
        self.outputs.iter().flatten().flat_map(|g| &g.files)
    }
}

/// The settings a plan depends on.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Hours closed this long after their end are compacted.
    pub grace: Duration,
    /// Replaced files are deleted this long after their marker was committed.
    pub retire_after: Duration,
    /// Input bytes per compacted file.
    pub target_file_size: u64,
}

/// The plan for `hour`, whose committed markers are `markers` (all of them readable: an hour
/// with a damaged marker is not planned) and whose agents' files have the sizes `size_of`
/// gives.
pub fn plan_hour(
    hour: &HourFolder,
    markers: &[Marker],
    size_of: impl Fn(&str) -> u64,
    rules: &Rules,
    now: DateTime<Utc>,
) -> HourPlan {
    let visible = hour.visible(markers);
    let mut plan = HourPlan {
        open: !hour_closed(&hour.folder, now, rules.grace),
        ..HourPlan::default()
    };
    let committed: HashSet<&str> = markers
        .iter()
        .flat_map(|m| m.outputs.iter().map(|o| o.name.as_str()))
        .collect();
    plan.debris = hour
        .outputs
        .iter()
        .filter(|k| !committed.contains(name_of(k)))
        .chain(
            hour.rest
                .iter()
                .filter(|k| is_compaction_debris(name_of(k))),
        )
        .cloned()
        .collect();
    if !plan.open {
        // Sets, not lists: an hour of a large fleet holds over 10,000 agents' files.
        let unreplaced: HashSet<&str> = visible.read.iter().map(String::as_str).collect();
        let sources: Vec<(String, u64)> = hour
            .sources
            .iter()
            .filter(|k| unreplaced.contains(k.as_str()))
            .map(|k| (k.clone(), size_of(k)))
            .collect();
        plan.outputs = split(host_groups(&sources), rules.target_file_size);
    }
    let retire_after =
        chrono::Duration::from_std(rules.retire_after).unwrap_or(chrono::Duration::MAX);
    for marker in markers {
        let due = marker
            .committed_at
            .checked_add_signed(retire_after)
            .is_some_and(|due| due <= now);
        let replaced: HashSet<&str> = marker.sources.iter().map(String::as_str).collect();
        let present: Vec<String> = hour
            .sources
            .iter()
            .filter(|k| replaced.contains(name_of(k)))
            .cloned()
            .collect();
        if due && !present.is_empty() {
            plan.retire.push((marker.clone(), present));
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::marker::{Output, FORMAT};

    const FOLDER: &str = "cuda/dt=2026-11-22/hour=03";

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    fn part(host: &str, n: u32) -> String {
        format!("{FOLDER}/part-{host}-{n:032x}.parquet")
    }

    #[test]
    fn an_hour_closes_its_grace_after_its_end() {
        let grace = Duration::from_secs(900);
        assert!(!hour_closed(FOLDER, at("2026-11-22T03:59:59Z"), grace));
        assert!(
            !hour_closed(FOLDER, at("2026-11-22T04:14:59Z"), grace),
            "in the grace"
        );
        assert!(hour_closed(FOLDER, at("2026-11-22T04:15:00Z"), grace));
        assert!(!hour_closed(
            "cuda/dt=garbage/hour=03",
            at("2030-01-01T00:00:00Z"),
            grace
        ));
        assert!(!hour_closed(
            FOLDER,
            at("2030-01-01T00:00:00Z"),
            Duration::MAX
        ));
    }

    #[test]
    fn files_are_grouped_by_host_in_host_order() {
        let sources = vec![
            (part("node-b", 2), 10),
            (part("node-a", 1), 20),
            (part("node-b", 1), 30),
            (format!("{FOLDER}/part-odd.parquet"), 5),
        ];
        let groups = host_groups(&sources);
        let hosts: Vec<&str> = groups.iter().map(|g| g.host.as_str()).collect();
        assert_eq!(hosts, ["node-a", "node-b", "odd"]);
        assert_eq!(
            groups[1].files,
            [(part("node-b", 1), 30), (part("node-b", 2), 10)]
        );
        assert_eq!(groups[1].bytes(), 40);
    }

    #[test]
    fn outputs_are_split_at_the_target_size_between_hosts() {
        let group = |host: &str, size| HostGroup {
            host: host.into(),
            files: vec![(part(host, 1), size)],
        };
        let groups = vec![
            group("a", 40),
            group("b", 60),
            group("c", 10),
            group("d", 250),
            group("e", 1),
        ];
        let files = split(groups, 100);
        let hosts: Vec<Vec<&str>> = files
            .iter()
            .map(|f| f.iter().map(|g| g.host.as_str()).collect())
            .collect();
        assert_eq!(hosts, [vec!["a", "b"], vec!["c"], vec!["d"], vec!["e"]]);
        assert!(split(Vec::new(), 100).is_empty());
    }

    fn rules() -> Rules {
        Rules {
            grace: Duration::from_secs(900),
            retire_after: Duration::from_secs(3_600),
            target_file_size: 1 << 30,
        }
    }

    #[test]
    fn a_plan_compacts_new_files_clears_debris_and_retires_when_due() {
        let marker = Marker {
            format: FORMAT,
            run: "r0".into(),
            committed_at: at("2026-11-22T05:00:00Z"),
            rows: 1,
            outputs: vec![Output {
                name: "compact-r0-0000.parquet".into(),
                size: 1,
                rows: 1,
            }],
            sources: vec![name_of(&part("a", 1)).to_string()],
            rollups: Vec::new(),
        };
        let hour = HourFolder::classify(
            FOLDER,
            [
                part("a", 1),
                part("a", 2),
                format!("{FOLDER}/compact-r0-0000.parquet"),
                format!("{FOLDER}/compact-dead-0000.parquet"),
                format!("{FOLDER}/compact-dead-0001.parquet#7"),
                format!("{FOLDER}/_compaction-r0.json"),
                format!("{FOLDER}/.part-x.parquet.inprogress"),
            ],
        );
        let plan = plan_hour(
            &hour,
            std::slice::from_ref(&marker),
            |_| 7,
            &rules(),
            at("2026-11-22T05:30:00Z"),
        );
        assert!(!plan.open);
        assert_eq!(
            plan.debris,
            [
                format!("{FOLDER}/compact-dead-0000.parquet"),
                format!("{FOLDER}/compact-dead-0001.parquet#7")
            ]
        );
        let sources: Vec<_> = plan.sources().cloned().collect();
        assert_eq!(sources, [(part("a", 2), 7)], "the late file only");
        assert!(plan.retire.is_empty(), "not due before an hour");
        let later = plan_hour(
            &hour,
            std::slice::from_ref(&marker),
            |_| 7,
            &rules(),
            at("2026-11-22T06:00:00Z"),
        );
        assert_eq!(later.retire, [(marker, vec![part("a", 1)])]);

        let open = plan_hour(&hour, &[], |_| 7, &rules(), at("2026-11-22T04:10:00Z"));
        assert!(open.open && open.outputs.is_empty());
        assert_eq!(
            open.debris.len(),
            3,
            "an unnamed output of an open hour is debris too"
        );
    }
}
