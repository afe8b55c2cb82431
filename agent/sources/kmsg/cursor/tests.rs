//! Tests of `cursor` (beside it, so the module file holds only the code).

use super::*;

fn cursor(boot: &str, seq: u64) -> Cursor {
    Cursor {
        boot_id: boot.into(),
        seq,
    }
}

/// The cursor `file` holds, with no bound from the kernel log; panics if it was set aside.
fn loaded(file: &mut CursorFile) -> Option<Cursor> {
    match file.load(None).unwrap() {
        Loaded::Absent => None,
        Loaded::Cursor(cursor) => Some(cursor),
        other => panic!("{other:?}"),
    }
}

#[test]
fn resumes_within_a_boot_reads_a_new_boot_whole_and_starts_as_configured_first() {
    let same = cursor("b1", 41);
    assert_eq!(plan(Some(&same), "b1", KmsgStart::End), Resume::After(41));
    assert_eq!(
        plan(Some(&same), "b1", KmsgStart::Beginning),
        Resume::After(41)
    );
    assert_eq!(
        plan(Some(&same), "b2", KmsgStart::End),
        Resume::FromBeginning
    );
    assert_eq!(plan(None, "b1", KmsgStart::End), Resume::FromEnd);
    assert_eq!(
        plan(None, "b1", KmsgStart::Beginning),
        Resume::FromBeginning
    );
}

#[test]
fn saves_at_once_after_an_xid_and_otherwise_lazily() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = CursorFile::new(dir.path(), "boot-a");
    assert_eq!(loaded(&mut file), None);
    file.advance(10, false).unwrap();
    assert_eq!(loaded(&mut file), None, "no XID: not saved yet");
    file.xid_seen(11);
    file.advance(11, false).unwrap();
    assert_eq!(loaded(&mut file), Some(cursor("boot-a", 11)));
    file.advance(12, true).unwrap();
    assert_eq!(loaded(&mut file), Some(cursor("boot-a", 12)));
    file.advance(5, true).unwrap();
    assert_eq!(loaded(&mut file), Some(cursor("boot-a", 12)), "never back");
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(file.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn a_cursor_of_another_boot_is_read_but_not_taken_as_saved() {
    let dir = tempfile::tempdir().unwrap();
    let mut old = CursorFile::new(dir.path(), "boot-a");
    old.advance(99, true).unwrap();
    let mut new = CursorFile::new(dir.path(), "boot-b");
    assert_eq!(loaded(&mut new), Some(cursor("boot-a", 99)));
    assert_eq!(new.saved(), None);
    new.advance(3, true).unwrap();
    assert_eq!(loaded(&mut new), Some(cursor("boot-b", 3)));
}

#[test]
fn a_planted_link_at_the_temporary_name_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = CursorFile::new(dir.path(), "b");
    let victim = dir.path().join("victim");
    fs::write(&victim, "keep").unwrap();
    let mut temp = file.path().as_os_str().to_owned();
    temp.push(".tmp");
    std::os::unix::fs::symlink(&victim, PathBuf::from(temp)).unwrap();
    file.advance(7, true).unwrap();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(loaded(&mut file), Some(cursor("b", 7)));
}

/// What `load` does with `content` at the cursor's name, the log's last record being 5000.
fn set_aside(content: &str) -> (SetAsideReason, String, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let mut file = CursorFile::new(dir.path(), "b");
    fs::write(file.path(), content).unwrap();
    let Loaded::SetAside {
        reason,
        detail,
        aside,
    } = file.load(Some(5000)).unwrap()
    else {
        panic!("{content:?} was taken as a cursor");
    };
    let aside = aside.unwrap();
    assert_eq!(fs::read_to_string(&aside).unwrap(), content);
    assert!(!file.path().exists());
    assert_eq!(file.saved(), None);
    let names = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    (reason, detail, names)
}

#[test]
fn a_cursor_that_is_not_one_or_is_ahead_of_the_log_is_set_aside() {
    for garbage in [
        "",
        "garbage",
        "{\"boot_id\": 1}",
        "{\"boot_id\": \"b\", \"seq\": -3}",
        "{\"boot_id\": \"b\", \"seq\": 1.5}",
        "[\"b\", 3]",
        "null",
        "17",
    ] {
        let (reason, detail, names) = set_aside(garbage);
        assert_eq!(reason, SetAsideReason::Unreadable, "{garbage:?}: {detail}");
        assert!(detail.starts_with("not a cursor: "), "{detail}");
        assert_eq!(names.len(), 1);
        assert!(names[0].starts_with("kmsg-cursor.json.bad-"), "{names:?}");
    }
    for ahead in [u64::MAX, 1_000_000, 5001] {
        let (reason, detail, _) = set_aside(&format!("{{\"boot_id\":\"b\",\"seq\":{ahead}}}"));
        assert_eq!(reason, SetAsideReason::AheadOfLog);
        assert_eq!(
            detail,
            format!(
                "sequence number {ahead} of this boot, but the kernel log's last record is 5000"
            )
        );
    }
    // The last record itself, and a number of another boot, are fine.
    let dir = tempfile::tempdir().unwrap();
    let mut file = CursorFile::new(dir.path(), "b");
    fs::write(file.path(), "{\"boot_id\":\"b\",\"seq\":5000}").unwrap();
    assert!(matches!(file.load(Some(5000)).unwrap(), Loaded::Cursor(c) if c.seq == 5000));
    assert_eq!(file.saved(), Some(5000));
    let mut other = CursorFile::new(dir.path(), "new-boot");
    assert!(matches!(other.load(Some(10)).unwrap(), Loaded::Cursor(c) if c.boot_id == "b"));
    assert_eq!(other.saved(), None);
}
