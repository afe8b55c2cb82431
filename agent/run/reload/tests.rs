use gpuship_sinks::schema::HostIdentity;

use super::*;
use crate::accounting::Accounting;

/// A running sink set for `text` (written to `dir/gpuship.toml`), and what it was built from.
struct Fixture {
    dir: tempfile::TempDir,
    config: Config,
    sinks: SinkSet,
    runtime: tokio::runtime::Runtime,
}

impl Fixture {
    fn new(text: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let text = Self::with_state(&dir, text);
        let path = dir.path().join("gpuship.toml");
        std::fs::write(&path, &text).unwrap();
        let mut config = Config::load(&path).unwrap();
        config.apply_default_sink();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let identity = HostIdentity {
            host: "h".into(),
            boot_id: "b".into(),
        };
        let sinks = SinkSet::start(&config, &identity, &runtime, &Accounting::default());
        Fixture {
            dir,
            config,
            sinks,
            runtime,
        }
    }

    fn with_state(dir: &tempfile::TempDir, text: &str) -> String {
        format!(
            "[agent]\nstate_dir = \"{}\"\n{text}",
            dir.path().join("state").display()
        )
    }

    /// Writes `text` (with the same state directory) and prepares a reload from it.
    fn prepare(&self, text: &str, target: &Target) -> Result<Reload, Rejected> {
        let path = self.path();
        std::fs::write(&path, Self::with_state(&self.dir, text)).unwrap();
        Reload::prepare(Some(&path), &self.config, target, &self.sinks)
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("gpuship.toml")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.sinks.finish(&self.runtime);
    }
}

const BLACKHOLE: &str = "[[sinks]]\ntype = \"blackhole\"\nname = \"a\"\n";

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: `make test` runs it"
)]
fn the_same_file_changes_nothing_and_a_changed_one_says_what() {
    let fixture = Fixture::new(BLACKHOLE);
    let same = fixture.prepare(BLACKHOLE, &Target::AllProcesses).unwrap();
    assert!(same.changes_nothing());
    let more = format!("{BLACKHOLE}[[sinks]]\ntype = \"blackhole\"\nname = \"b\"\n");
    let added = fixture.prepare(&more, &Target::AllProcesses).unwrap();
    assert_eq!(added.sinks.added, ["b"]);
    assert!(!added.restarts_sources);
    let batch = format!("[batch]\nmax_events = 100\n{BLACKHOLE}");
    let restarts = fixture.prepare(&batch, &Target::AllProcesses).unwrap();
    assert!(restarts.restarts_sources && restarts.sinks.is_empty());
}

#[test]
fn bad_files_are_refused_with_their_line() {
    let fixture = Fixture::new(BLACKHOLE);
    let all = Target::AllProcesses;
    let Rejected(syntax) = fixture.prepare("[batch\n", &all).unwrap_err();
    assert!(syntax.contains("line 3"), "{syntax}");
    assert!(!syntax.contains('\n'), "{syntax}");
    let Rejected(value) = fixture
        .prepare(&format!("[batch]\nmax_events = 0\n{BLACKHOLE}"), &all)
        .unwrap_err();
    assert!(value.contains("line 4: batch.max_events"), "{value}");
    std::fs::remove_file(fixture.path()).unwrap();
    let Rejected(gone) =
        Reload::prepare(Some(&fixture.path()), &fixture.config, &all, &fixture.sinks).unwrap_err();
    assert!(gone.contains("cannot read config"), "{gone}");
}

#[test]
fn what_lives_for_the_run_cannot_change() {
    let fixture = Fixture::new(BLACKHOLE);
    let Rejected(metrics) = fixture
        .prepare(
            &format!("[metrics]\naddress = \"127.0.0.1:1\"\n{BLACKHOLE}"),
            &Target::AllProcesses,
        )
        .unwrap_err();
    assert!(metrics.starts_with("[metrics] cannot change"), "{metrics}");
    let sources = format!("[sources.cuda]\nenabled = false\n{BLACKHOLE}");
    let Rejected(traced) = fixture.prepare(&sources, &Target::Pid(1)).unwrap_err();
    assert!(traced.contains("one command or pid"), "{traced}");
    let state =
        Reload::prepare(None, &fixture.config, &Target::AllProcesses, &fixture.sinks).unwrap_err();
    assert!(state.0.starts_with("[agent] state_dir"), "{state:?}");
}
