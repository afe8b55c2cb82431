//! Fuzzing of the spool's segment reader: a spool whose segments were damaged on disk
//! (truncated, bytes flipped, header fields set to their limits, payloads changed under a
//! valid checksum, replaced by garbage) and stray entries beside them (temporary files,
//! folders, FIFOs and symlinks named like segments) opens and drains without a panic or a
//! hang; every segment comes back intact, or is reported corrupt, or was set aside at open.
//!
//! A short budget runs with the unit tests; `PROPTEST_CASES=N` runs N cases per property
//! (docs/fuzzing.md). Failing seeds are kept in `proptest-regressions/spool_fuzz_tests.txt`.

use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::schema::schema_for;
use crate::test_support::{cuda_batch, xid_batch};
use segment::HEADER_LEN;

// The Arrow IPC panic this harness found (a payload changed under a valid checksum) replays
// from its seed in `sinks/proptest-regressions/spool_fuzz_tests.txt`.

/// Cases per property in the normal test run, unless `PROPTEST_CASES` says otherwise.
const SHORT_BUDGET: u32 = 128;

/// Longer than any open and drain of a few small segments takes: past it, it hangs.
const HANG_AFTER: Duration = Duration::from_secs(10);

fn budget() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = SHORT_BUDGET;
    }
    config
}

/// What happens to one segment file on disk.
#[derive(Debug, Clone)]
enum Damage {
    Keep,
    Truncate(prop::sample::Index),
    /// XOR these bytes anywhere in the file.
    Flip(Vec<(prop::sample::Index, u8)>),
    /// XOR payload bytes and write the matching checksum, so the Arrow reader sees them.
    FlipUnderChecksum(Vec<(prop::sample::Index, u8)>),
    /// Set a header field (0 kind, 1 event count, 2 payload length) to a value.
    Header(u8, u64),
    Replace(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    let flips = || prop::collection::vec((any::<prop::sample::Index>(), 1u8..), 1..8);
    let limit = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::from(u32::MAX)),
        Just(u64::MAX),
        Just(u64::MAX - 31),
        any::<u64>(),
    ];
    prop_oneof![
        3 => Just(Damage::Keep),
        1 => any::<prop::sample::Index>().prop_map(Damage::Truncate),
        1 => flips().prop_map(Damage::Flip),
        2 => flips().prop_map(Damage::FlipUnderChecksum),
        1 => (0u8..3, limit).prop_map(|(field, value)| Damage::Header(field, value)),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Damage::Replace),
    ]
}

fn apply(data: &mut Vec<u8>, damage: &Damage) {
    match damage {
        Damage::Keep => {}
        Damage::Truncate(at) => data.truncate(at.index(data.len())),
        Damage::Flip(flips) => {
            for (at, mask) in flips {
                let at = at.index(data.len());
                data[at] ^= mask;
            }
        }
        Damage::FlipUnderChecksum(flips) => {
            let payload = &mut data[HEADER_LEN..];
            if !payload.is_empty() {
                for (at, mask) in flips {
                    let at = at.index(payload.len());
                    payload[at] ^= mask;
                }
            }
            let crc = crc32fast::hash(&data[HEADER_LEN..]);
            data[24..28].copy_from_slice(&crc.to_le_bytes());
        }
        Damage::Header(0, value) => data[8] = *value as u8,
        Damage::Header(1, value) => data[12..16].copy_from_slice(&(*value as u32).to_le_bytes()),
        Damage::Header(_, value) => data[16..24].copy_from_slice(&value.to_le_bytes()),
        Damage::Replace(bytes) => *data = bytes.clone(),
    }
}

/// Entries a spool folder may hold besides segments.
#[derive(Debug, Clone, Copy)]
enum Stray {
    Temp,
    Folder,
    Fifo,
    Symlink,
    Unrelated,
}

fn stray() -> impl Strategy<Value = Stray> {
    prop_oneof![
        Just(Stray::Temp),
        Just(Stray::Folder),
        Just(Stray::Fifo),
        Just(Stray::Symlink),
        Just(Stray::Unrelated),
    ]
}

/// Makes `stray` under a segment name with sequence number `seq`.
fn plant(dir: &Path, seq: u64, stray: Stray) {
    let name = dir.join(format!("{seq:016x}.seg"));
    match stray {
        Stray::Temp => fs::write(dir.join(format!("{seq:016x}.seg.tmp")), b"partial").unwrap(),
        Stray::Folder => fs::create_dir(&name).unwrap(),
        Stray::Fifo => {
            let made = std::process::Command::new("mkfifo").arg(&name).status();
            assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", name.display());
        }
        Stray::Symlink => std::os::unix::fs::symlink("/etc/hostname", &name).unwrap(),
        Stray::Unrelated => fs::write(dir.join(format!("notes-{seq}.txt")), b"x").unwrap(),
    }
}

/// What an open and a drain of the spool gave.
#[derive(Debug)]
struct Drained {
    set_aside_at_open: usize,
    pending_at_open: u64,
    batches: Vec<EventBatch>,
    reported_corrupt: Vec<(EventKind, u64)>,
    set_aside_in_total: usize,
    left_on_disk: Vec<String>,
}

fn corrupt_files(dir: &Path) -> usize {
    names(dir)
        .iter()
        .filter(|n| n.ends_with(".corrupt"))
        .count()
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Opens the spool in `dir` and peeks and pops until it is empty, on a thread: a hang is a
/// failure after `HANG_AFTER`, not a stuck test run.
fn open_and_drain(dir: PathBuf) -> Result<Drained, TestCaseError> {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let outcome = (|| {
            let config = SpoolConfig {
                fsync: FsyncPolicy::Never,
                ..SpoolConfig::default()
            };
            let mut spool = Spool::open(&dir, config).map_err(|e| e.to_string())?;
            let set_aside_at_open = corrupt_files(&dir);
            let pending_at_open = EventKind::ALL
                .iter()
                .map(|&kind| spool.pending_events(kind))
                .sum();
            let (mut batches, mut reported_corrupt) = (Vec::new(), Vec::new());
            loop {
                let (batch, corrupt) = spool.peek();
                reported_corrupt.extend(corrupt);
                let Some(batch) = batch else { break };
                batches.push(batch);
                spool.pop();
            }
            if !spool.is_empty() || spool.bytes() != 0 {
                return Err(format!("drained spool holds {} bytes", spool.bytes()));
            }
            Ok(Drained {
                set_aside_at_open,
                pending_at_open,
                batches,
                reported_corrupt,
                set_aside_in_total: corrupt_files(&dir),
                left_on_disk: names(&dir),
            })
        })();
        let _ = done.send(outcome);
    });
    match result.recv_timeout(HANG_AFTER) {
        Ok(outcome) => outcome.map_err(TestCaseError::fail),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(TestCaseError::fail("the spool hung")),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(TestCaseError::fail("the spool panicked")),
    }
}

fn originals() -> impl Strategy<Value = Vec<EventBatch>> {
    let batch = prop_oneof![
        (1usize..40, any::<u32>()).prop_map(|(rows, tag)| cuda_batch(rows, tag)),
        Just(xid_batch()),
    ];
    prop::collection::vec(batch, 1..5)
}

proptest! {
    #![proptest_config(budget())]

    #[test]
    fn damaged_spools_open_and_drain_and_account_for_every_segment(
        originals in originals(),
        damages in prop::collection::vec(damage(), 5),
        strays in prop::collection::vec((0u64..8, stray()), 0..3),
    ) {
        let dir = tempfile::tempdir().unwrap();
        {
            let config = SpoolConfig { fsync: FsyncPolicy::Never, ..SpoolConfig::default() };
            let mut spool = Spool::open(dir.path(), config).unwrap();
            for batch in &originals {
                spool.store(batch).unwrap();
            }
        }
        let mut kept = Vec::new();
        for (seq, batch) in originals.iter().enumerate() {
            let path = dir.path().join(format!("{seq:016x}.seg"));
            let mut data = fs::read(&path).unwrap();
            let before = data.clone();
            apply(&mut data, &damages[seq]);
            fs::write(&path, &data).unwrap();
            if data == before {
                kept.push(batch);
            }
        }
        let mut planted = 0;
        for &(offset, stray) in &strays {
            let seq = originals.len() as u64 + offset;
            if !dir.path().join(format!("{seq:016x}.seg")).exists() {
                plant(dir.path(), seq, stray);
                planted += usize::from(matches!(stray, Stray::Folder | Stray::Fifo | Stray::Symlink));
            }
        }

        let drained = open_and_drain(dir.path().to_path_buf())?;

        // Every untouched segment comes back whole, in order.
        let returned: Vec<_> = drained.batches.iter().map(|b| (b.kind, &b.records)).collect();
        let untouched: Vec<_> = kept.iter().map(|b| (b.kind, &b.records)).collect();
        prop_assert!(
            untouched.iter().all(|u| returned.contains(u)),
            "an intact segment was lost: {drained:?}"
        );
        // What comes back is what its header said, with the schema of its kind.
        for batch in &drained.batches {
            let (schema, want) = (batch.records.schema(), schema_for(batch.kind));
            prop_assert_eq!(schema.fields(), want.fields());
        }
        let returned_events: u64 = drained.batches.iter().map(|b| b.len() as u64).sum();
        let reported_events: u64 = drained.reported_corrupt.iter().map(|c| c.1).sum();
        prop_assert_eq!(returned_events + reported_events, drained.pending_at_open);
        // Every segment (and everything named like one) is accounted for exactly once:
        // returned, reported corrupt by peek, or set aside at open.
        prop_assert_eq!(
            drained.set_aside_in_total - drained.set_aside_at_open,
            drained.reported_corrupt.len()
        );
        prop_assert_eq!(
            drained.batches.len() + drained.reported_corrupt.len() + drained.set_aside_at_open,
            originals.len() + planted
        );
        // Nothing named like a segment or a temporary file is left behind.
        for name in &drained.left_on_disk {
            prop_assert!(!name.ends_with(".seg") && !name.ends_with(".tmp"), "{name} left");
        }
    }
}

fn one_segment(batch: &EventBatch) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = SpoolConfig {
        fsync: FsyncPolicy::Never,
        ..SpoolConfig::default()
    };
    Spool::open(dir.path(), config)
        .unwrap()
        .store(batch)
        .unwrap();
    let path = dir.path().join(format!("{:016x}.seg", 0));
    (dir, path)
}

/// Found by the property: a FIFO named like a segment made `Spool::open` block forever.
#[test]
fn regression_a_fifo_named_like_a_segment_is_set_aside() {
    let (dir, _) = one_segment(&cuda_batch(3, 7));
    plant(dir.path(), 1, Stray::Fifo);
    let drained = open_and_drain(dir.path().to_path_buf()).expect("no hang");
    assert_eq!(drained.batches.len(), 1);
    assert_eq!(drained.set_aside_at_open, 1);
    assert!(drained
        .left_on_disk
        .contains(&"0000000000000001.seg.corrupt".to_string()));
}

/// Found by the property: a payload length near `u64::MAX` overflowed the size check.
#[test]
fn regression_a_payload_length_at_the_limit_is_corrupt() {
    for length in [u64::MAX, u64::MAX - 31, u64::MAX - 32] {
        let (dir, path) = one_segment(&cuda_batch(3, 7));
        let mut data = fs::read(&path).unwrap();
        apply(&mut data, &Damage::Header(2, length));
        fs::write(&path, &data).unwrap();
        let drained = open_and_drain(dir.path().to_path_buf()).expect("no panic");
        assert_eq!((drained.batches.len(), drained.set_aside_at_open), (0, 1));
    }
}
