//! The running sinks: each `[[sinks]]` entry's queue, spool and task, the fan-out every
//! producer sends through, and what a configuration reload does to them.
//!
//! A reload compares the new entries with the running ones by name. A sink whose entry is
//! the same keeps running untouched (same queue, same counters). A sink that is gone has its
//! route removed; it drains what it holds, as at shutdown, while the others go on. A sink
//! whose entry changed must hand its spool and XID journal to its successor, which may not
//! open them while it runs: the fan-out is paused (producers wait, as Vector's fan-out does
//! for a sink it replaces), the old instance drains to acknowledgement, the new one starts on
//! the same spool, and the fan-out resumes with every batch from then on going to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuship_sinks::schema::HostIdentity;
use gpuship_sinks::{queue_with, QueueOptions, QueueSender, SinkInput, SinkStats, Spool};

use super::sinks::{self, build_sink, sink_names};
use crate::accounting::Accounting;
use crate::config::{Config, SinkEntry};
use crate::enrich::machine_id;
use crate::fanout::FanOut;

/// A sink's task on the runtime.
type SinkTask = tokio::task::JoinHandle<Result<(), gpuship_sinks::SinkError>>;

/// One running `[[sinks]]` entry.
struct RunningSink {
    name: String,
    /// Its configuration, compared at a reload.
    entry: SinkEntry,
    /// Held here so that a reload can route to the same queue again; the queue closes once
    /// this and every route set holding it are gone.
    sender: Arc<QueueSender>,
    stats: Arc<SinkStats>,
    task: SinkTask,
}

/// What every sink's queue and spool are built with besides its own entry.
#[derive(Debug, Clone, PartialEq)]
struct Shared {
    state_dir: PathBuf,
    shutdown_timeout: Duration,
}

impl Shared {
    fn of(config: &Config) -> Self {
        Self {
            state_dir: config.agent.state_dir.clone(),
            shutdown_timeout: Duration::from_secs(config.agent.shutdown_timeout_secs),
        }
    }
}

/// The sinks and the fan-out to them.
pub(super) struct SinkSet {
    fanout: FanOut,
    running: Vec<RunningSink>,
    shared: Shared,
    identity: HostIdentity,
    host_id: Option<String>,
    /// Sinks a reload retired whose run had ended with an error, as messages.
    failed: Vec<String>,
}

/// What a new configuration changes in the sinks, by name.
#[derive(Debug, Default, PartialEq)]
pub(super) struct SinkChanges {
    /// New names.
    pub added: Vec<String>,
    /// Names no longer configured.
    pub removed: Vec<String>,
    /// Names whose entry changed.
    pub replaced: Vec<String>,
}

impl SinkChanges {
    /// True when every sink stays as it is.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.replaced.is_empty()
    }
}

impl SinkSet {
    /// Builds every sink of `config` with its queue and spool, and starts it on `runtime`.
    pub fn start(
        config: &Config,
        identity: &HostIdentity,
        runtime: &tokio::runtime::Runtime,
        accounting: &Accounting,
    ) -> SinkSet {
        let mut set = SinkSet {
            fanout: FanOut::default(),
            running: Vec::new(),
            shared: Shared::of(config),
            identity: identity.clone(),
            host_id: machine_id(),
            failed: Vec::new(),
        };
        let mut routes = FanOut::default();
        for (name, entry) in sink_names(&config.sinks).into_iter().zip(&config.sinks) {
            let sink = set.start_one(name, entry, runtime, accounting);
            routes.add_shared(
                &sink.name,
                sink.sender.clone(),
                sink.stats.clone(),
                &entry.options,
            );
            set.running.push(sink);
        }
        set.fanout.pause().resume(&routes);
        set
    }

    /// The fan-out every producer sends through (all clones share the routes).
    pub fn fanout(&self) -> FanOut {
        self.fanout.clone()
    }

    /// What switching to `config` would change.
    pub fn changes(&self, config: &Config) -> SinkChanges {
        let names = sink_names(&config.sinks);
        let rebuild_all = Shared::of(config) != self.shared;
        let mut changes = SinkChanges::default();
        for (name, entry) in names.iter().zip(&config.sinks) {
            match self.running.iter().find(|sink| &sink.name == name) {
                None => changes.added.push(name.clone()),
                Some(sink) if rebuild_all || sink.entry != *entry => {
                    changes.replaced.push(name.clone())
                }
                Some(_) => {}
            }
        }
        for sink in &self.running {
            if !names.contains(&sink.name) {
                changes.removed.push(sink.name.clone());
            }
        }
        changes
    }

    /// Switches to the sinks of `config` (see the module doc); returns how long producers
    /// were held off.
    pub fn apply(
        &mut self,
        config: &Config,
        changes: &SinkChanges,
        runtime: &tokio::runtime::Runtime,
        accounting: &Accounting,
    ) -> Duration {
        let mut retiring = Vec::new();
        let mut kept = Vec::new();
        for sink in std::mem::take(&mut self.running) {
            if changes.removed.contains(&sink.name) || changes.replaced.contains(&sink.name) {
                retiring.push(sink);
            } else {
                kept.push(sink);
            }
        }
        let (replaced, removed): (Vec<_>, Vec<_>) = retiring
            .into_iter()
            .partition(|sink| changes.replaced.contains(&sink.name));
        self.shared = Shared::of(config);
        let paused_at = Instant::now();
        let fanout = self.fanout.clone();
        let paused = fanout.pause();
        // The old instances must be done with their spools before their successors open them.
        for sink in replaced {
            self.retire(sink, runtime, accounting);
        }
        let mut routes = FanOut::default();
        for (name, entry) in sink_names(&config.sinks).into_iter().zip(&config.sinks) {
            let sink = match kept.iter().position(|sink| sink.name == name) {
                Some(index) => kept.swap_remove(index),
                None => self.start_one(name, entry, runtime, accounting),
            };
            routes.add_shared(
                &sink.name,
                sink.sender.clone(),
                sink.stats.clone(),
                &entry.options,
            );
            self.running.push(sink);
        }
        paused.resume(&routes);
        let held = paused_at.elapsed();
        // Removed sinks drain while capture goes on.
        for sink in removed {
            self.retire(sink, runtime, accounting);
        }
        held
    }

    /// Closes every queue and waits for every sink to finish what it holds; the failed ones
    /// (here or retired by a reload) as messages.
    pub fn finish(&mut self, runtime: &tokio::runtime::Runtime) -> Vec<String> {
        self.fanout.close();
        let mut failed = std::mem::take(&mut self.failed);
        for sink in std::mem::take(&mut self.running) {
            drop(sink.sender);
            failed.extend(wait(&sink.name, sink.task, runtime));
        }
        failed
    }

    /// Lets go of `sink`'s queue, waits for it to deliver what it holds, freezes its counters.
    fn retire(
        &mut self,
        sink: RunningSink,
        runtime: &tokio::runtime::Runtime,
        accounting: &Accounting,
    ) {
        let RunningSink {
            name, sender, task, ..
        } = sink;
        drop(sender);
        let started = Instant::now();
        self.failed.extend(wait(&name, task, runtime));
        accounting.retire_sink(&name);
        tracing::info!(sink = %name, drained_ms = started.elapsed().as_millis() as u64, "sink of the previous configuration drained");
    }

    /// Builds one sink with its queue and spool and starts it.
    fn start_one(
        &self,
        name: String,
        entry: &SinkEntry,
        runtime: &tokio::runtime::Runtime,
        accounting: &Accounting,
    ) -> RunningSink {
        let sink = build_sink(&name, &entry.sink, &self.identity, self.host_id.as_deref());
        let stats = Arc::new(SinkStats::default());
        let spool = open_spool(&self.shared.state_dir, &name, &entry.options.spool);
        let opens_spool = spool.is_some();
        let options = QueueOptions {
            name: name.clone(),
            buffer: entry.options.buffer.clone(),
            spool,
            shutdown_timeout: self.shared.shutdown_timeout,
        };
        let (sender, batches) = queue_with(options, stats.clone());
        accounting.add_sink(&name, stats.clone(), opens_spool);
        let run = sink.run(SinkInput {
            batches,
            stats: stats.clone(),
        });
        let task = runtime.spawn(sinks::watched(name.clone(), stats.clone(), run));
        RunningSink {
            name,
            entry: entry.clone(),
            sender: Arc::new(sender),
            stats,
            task,
        }
    }
}

/// Waits for a sink's task; its failure as a message.
fn wait(name: &str, task: SinkTask, runtime: &tokio::runtime::Runtime) -> Option<String> {
    match runtime.block_on(task) {
        Ok(Ok(())) => None,
        // Already logged when it happened (sinks::watched).
        Ok(Err(err)) => Some(err.to_string()),
        Err(err) => {
            tracing::error!(sink = %name, %err, "sink task failed");
            Some(format!("{name}: {err}"))
        }
    }
}

/// `xid=N cuda=N driver=N`: the events a spool holds, for every kind.
fn pending_by_kind(spool: &Spool) -> String {
    gpuship_sinks::EventKind::all()
        .map(|kind| format!("{kind}={}", spool.pending_events(kind)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The sink's spool under `<state_dir>/spool/<sink>`, with what a previous run (or a previous
/// instance, before a reload) left in it.
fn open_spool(state_dir: &Path, sink: &str, config: &gpuship_sinks::SpoolConfig) -> Option<Spool> {
    if !config.enabled {
        return None;
    }
    let dir = state_dir.join("spool").join(sink);
    match Spool::open(&dir, config.clone()) {
        Ok(spool) => {
            if !spool.is_empty() {
                tracing::info!(
                    sink,
                    dir = %dir.display(),
                    pending = %pending_by_kind(&spool),
                    "spooled events from a previous run will be delivered first"
                );
            }
            Some(spool)
        }
        Err(err) => {
            tracing::error!(sink, %err, "cannot open the spool; this sink runs without one");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml: &str) -> Config {
        let mut config = Config::from_toml(toml, Path::new("test.toml")).expect("config");
        config.apply_default_sink();
        config
    }

    #[test]
    fn changes_are_found_by_name_and_entry() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let state = format!("[agent]\nstate_dir = \"{}\"\n", dir.path().display());
        let old = config(&format!(
            "{state}[[sinks]]\ntype = \"blackhole\"\nname = \"a\"\n\
             [[sinks]]\ntype = \"blackhole\"\nname = \"b\"\n\
             [[sinks]]\ntype = \"blackhole\"\nname = \"c\"\n"
        ));
        let accounting = Accounting::default();
        let identity = HostIdentity {
            host: "h".into(),
            boot_id: "b".into(),
        };
        let mut set = SinkSet::start(&old, &identity, &runtime, &accounting);
        assert_eq!(set.fanout().len(), 3);
        let new = config(&format!(
            "{state}[[sinks]]\ntype = \"blackhole\"\nname = \"a\"\n\
             [[sinks]]\ntype = \"blackhole\"\nname = \"b\"\nkinds = [\"xid\"]\n\
             [[sinks]]\ntype = \"blackhole\"\nname = \"d\"\n"
        ));
        let changes = set.changes(&new);
        assert_eq!(
            changes,
            SinkChanges {
                added: vec!["d".into()],
                removed: vec!["c".into()],
                replaced: vec!["b".into()],
            }
        );
        assert!(set.changes(&old).is_empty());
        set.apply(&new, &changes, &runtime, &accounting);
        assert!(set.changes(&new).is_empty());
        assert_eq!(set.fanout().len(), 3);
        let running: Vec<String> = accounting.sinks().into_iter().map(|(n, _)| n).collect();
        assert_eq!(running, ["a", "b", "d"]);
        assert!(set.finish(&runtime).is_empty());
    }
}
