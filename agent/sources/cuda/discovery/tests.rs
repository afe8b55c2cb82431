//! The discovery's decisions on a `/proc` tree of plain files: processes that map libraries
//! at their own paths, new processes, retries, exits, failures and the attach cap.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;

const RESCAN: Duration = Duration::from_secs(30);

/// A fake `/proc`: each process gets `maps` lines and a `root` with its library files.
struct FakeProc {
    dir: tempfile::TempDir,
}

impl FakeProc {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Process `pid` with a library file at `library` inside its root (created unless it
    /// exists), mapped twice; returns the file's key.
    fn process(&self, pid: u32, library: &str) -> FileKey {
        let root = self.path().join(format!("{pid}/root"));
        let file = root.join(library.trim_start_matches('/'));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        if !file.exists() {
            std::fs::write(&file, b"\x7fELF").unwrap();
        }
        let ino = std::fs::metadata(&file).unwrap().ino();
        std::fs::write(
            self.path().join(format!("{pid}/maps")),
            format!(
                "1000-2000 r--p 00000000 fd:01 {ino} {library}\n\
                 2000-3000 r-xp 00001000 fd:01 {ino} {library}\n"
            ),
        )
        .unwrap();
        FileKey {
            dev: libc::makedev(0xfd, 1),
            ino,
        }
    }

    /// Process `pid` mapping nothing of interest.
    fn plain_process(&self, pid: u32) {
        std::fs::create_dir_all(self.path().join(pid.to_string())).unwrap();
        std::fs::write(
            self.path().join(format!("{pid}/maps")),
            "1000-2000 r-xp 00000000 fd:01 5 /usr/lib/libc.so.6\n",
        )
        .unwrap();
    }

    fn exit(&self, pid: u32) {
        std::fs::remove_dir_all(self.path().join(pid.to_string())).unwrap();
    }
}

fn attach_of(action: &Action) -> (FileKey, PathBuf, Option<u64>, usize) {
    match action {
        Action::Attach {
            key,
            reach,
            opened_ns,
            mapped_before,
            ..
        } => (*key, reach.clone(), *opened_ns, *mapped_before),
        other => panic!("expected an attach, got {other:?}"),
    }
}

#[test]
fn one_attach_per_file_reached_through_a_process_root() {
    let proc_dir = FakeProc::new();
    let a = proc_dir.process(100, "/usr/lib/x86_64-linux-gnu/libcuda.so.580.1");
    let b = proc_dir.process(200, "/opt/job/lib/libcuda.so.1");
    // The same file mapped by a second process: still one attach.
    std::fs::create_dir_all(proc_dir.path().join("101")).unwrap();
    std::fs::copy(
        proc_dir.path().join("100/maps"),
        proc_dir.path().join("101/maps"),
    )
    .unwrap();
    proc_dir.plain_process(300);
    let now = Instant::now();
    let mut discovery = Discovery::new(proc_dir.path(), RESCAN, now);
    let mut attaches: Vec<_> = discovery.scan_all(now).iter().map(attach_of).collect();
    attaches.sort();
    let mut expected = vec![
        (
            a,
            proc_dir
                .path()
                .join("100/root/usr/lib/x86_64-linux-gnu/libcuda.so.580.1"),
            None,
            2,
        ),
        (
            b,
            proc_dir.path().join("200/root/opt/job/lib/libcuda.so.1"),
            None,
            1,
        ),
    ];
    expected.sort();
    assert_eq!(attaches, expected);
    discovery.attached(a, Ok(160));
    discovery.attached(b, Ok(150));
    // Nothing new: a rescan attaches nothing again.
    assert_eq!(discovery.scan_all(now), vec![]);
    let mut statuses = discovery.statuses();
    statuses.sort_by_key(|s| s.processes);
    assert_eq!(
        statuses
            .iter()
            .map(|s| (s.symbols, s.processes, s.origin))
            .collect::<Vec<_>>(),
        [
            (Some(150), 1, LibraryOrigin::Discovered),
            (Some(160), 2, LibraryOrigin::Discovered)
        ]
    );
}

#[test]
fn a_process_that_opened_a_library_is_read_until_it_maps_it() {
    let proc_dir = FakeProc::new();
    proc_dir.plain_process(400);
    let start = Instant::now();
    let mut discovery = Discovery::new(proc_dir.path(), RESCAN, start);
    assert_eq!(discovery.scan_all(start), vec![]);
    discovery.opened(400, 1_000, start);
    // Opened, not mapped yet: read again later, with growing gaps.
    assert_eq!(discovery.poll(start), vec![]);
    assert!(discovery.has_pending());
    assert_eq!(discovery.poll(start + Duration::from_millis(10)), vec![]);
    let key = proc_dir.process(400, "/ctr/libcuda.so.1");
    // Not due before the first retry.
    assert_eq!(discovery.poll(start + Duration::from_millis(10)), vec![]);
    let actions = discovery.poll(start + FIRST_RETRY);
    assert_eq!(
        actions.iter().map(attach_of).collect::<Vec<_>>(),
        vec![(
            key,
            proc_dir.path().join("400/root/ctr/libcuda.so.1"),
            Some(1_000),
            1
        )]
    );
    assert!(!discovery.has_pending());
    discovery.attached(key, Ok(3));
    // A second process mapping the same file needs no attach.
    std::fs::create_dir_all(proc_dir.path().join("401")).unwrap();
    std::fs::copy(
        proc_dir.path().join("400/maps"),
        proc_dir.path().join("401/maps"),
    )
    .unwrap();
    discovery.opened(401, 2_000, start + FIRST_RETRY);
    assert_eq!(discovery.poll(start + FIRST_RETRY), vec![]);
    assert_eq!(discovery.statuses()[0].processes, 2);
}

#[test]
fn a_process_that_never_maps_is_given_up_and_an_ended_one_dropped() {
    let proc_dir = FakeProc::new();
    proc_dir.plain_process(500);
    let start = Instant::now();
    let mut discovery = Discovery::new(proc_dir.path(), Duration::from_secs(3600), start);
    discovery.opened(500, 1, start);
    let mut reads = 0;
    let mut now = start;
    while discovery.has_pending() {
        assert_eq!(discovery.poll(now), vec![]);
        reads += 1;
        now += Duration::from_millis(5);
        assert!(reads < 10_000, "never given up");
    }
    assert!(now - start >= Duration::from_secs(3), "{:?}", now - start);
    assert!(now - start < Duration::from_secs(7), "{:?}", now - start);
    discovery.opened(999, 1, now);
    assert_eq!(discovery.poll(now), vec![]);
    assert!(
        !discovery.has_pending(),
        "a process without /proc entry is dropped"
    );
}

#[test]
fn an_unused_discovered_library_is_detached_and_a_configured_one_kept() {
    let proc_dir = FakeProc::new();
    let discovered = proc_dir.process(600, "/ctr/libcuda.so.1");
    let start = Instant::now();
    let mut discovery = Discovery::new(proc_dir.path(), RESCAN, start);
    let configured = FileKey { dev: 1, ino: 2 };
    discovery.configured(configured, Path::new("/usr/lib/libcuda.so.1"), 160);
    assert_eq!(discovery.scan_all(start).len(), 1);
    discovery.attached(discovered, Ok(10));
    proc_dir.exit(600);
    // Not before the rescan is due.
    assert_eq!(discovery.poll(start + RESCAN / 2), vec![]);
    assert_eq!(
        discovery.poll(start + RESCAN),
        vec![Action::Detach { key: discovered }]
    );
    let statuses = discovery.statuses();
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].origin, LibraryOrigin::Configured);
    assert_eq!(statuses[0].symbols, Some(160));
    // Mapped again later: attached again.
    let again = proc_dir.process(601, "/ctr/libcuda.so.1");
    assert_eq!(discovery.scan_all(start + RESCAN).len(), 1, "{again}");
}

#[test]
fn a_failed_attach_is_reported_and_tried_again_at_the_rescan() {
    let proc_dir = FakeProc::new();
    let key = proc_dir.process(700, "/ctr/libcuda.so.1");
    let start = Instant::now();
    let mut discovery = Discovery::new(proc_dir.path(), RESCAN, start);
    assert_eq!(discovery.scan_all(start).len(), 1);
    discovery.attached(key, Err("parsing as ELF: bad magic".into()));
    let statuses = discovery.statuses();
    assert_eq!(statuses[0].symbols, None);
    assert_eq!(
        statuses[0].error.as_deref(),
        Some("parsing as ELF: bad magic")
    );
    assert_eq!(statuses[0].processes, 1);
    // A new process of the same file waits for the rescan rather than retrying at once.
    discovery.opened(700, 5, start);
    assert_eq!(discovery.poll(start), vec![]);
    let retried = discovery.poll(start + RESCAN);
    assert_eq!(
        retried.iter().map(|a| attach_of(a).0).collect::<Vec<_>>(),
        [key]
    );
}

#[test]
fn a_library_no_path_reaches_is_a_failure_with_its_reason() {
    let proc_dir = FakeProc::new();
    let key = proc_dir.process(800, "/ctr/libcuda.so.1");
    // The file in the process's root was replaced: another inode, and no map_files.
    let file = proc_dir.path().join("800/root/ctr/libcuda.so.1");
    // (Written beside it and renamed over it: a new inode while the old one still exists.)
    std::fs::write(file.with_extension("new"), b"new").unwrap();
    std::fs::rename(file.with_extension("new"), &file).unwrap();
    let start = Instant::now();
    let mut discovery = Discovery::new(proc_dir.path(), RESCAN, start);
    assert_eq!(discovery.scan_all(start), vec![]);
    let statuses = discovery.statuses();
    assert_eq!(statuses[0].file, key.to_string());
    let error = statuses[0].error.as_deref().unwrap();
    assert!(error.starts_with("cannot reach it: "), "{error}");
    assert!(error.contains("is not the mapped"), "{error}");
}

#[test]
fn no_more_than_the_cap_of_files_is_attached() {
    let proc_dir = FakeProc::new();
    for pid in 1..=(MAX_LIBRARIES as u32 + 3) {
        proc_dir.process(pid, &format!("/copy{pid}/libcuda.so.1"));
    }
    let start = Instant::now();
    let mut discovery = Discovery::new(proc_dir.path(), RESCAN, start);
    let actions = discovery.scan_all(start);
    assert_eq!(actions.len(), MAX_LIBRARIES);
    for action in &actions {
        discovery.attached(attach_of(action).0, Ok(1));
    }
    assert_eq!(discovery.refused, 3);
    let statuses = discovery.statuses();
    assert_eq!(
        statuses.iter().filter(|s| s.symbols.is_some()).count(),
        MAX_LIBRARIES
    );
    assert_eq!(statuses.iter().filter(|s| s.error.is_some()).count(), 3);
}
