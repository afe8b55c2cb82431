//! Names of the trace's processes, threads and GPU tracks (metadata events, `ph: M`), from the
//! rows that mention them: a process is named by its main thread's `comm` when a row of it is
//! seen, else by the first `comm` seen; each GPU (host and bus) that reported an XID is a
//! thread of the GPUs' pseudo-process, numbered in the order seen.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::views::rows::Xid;

/// Names of processes and threads, from the rows that mention them.
#[derive(Default)]
pub struct Names {
    /// pid -> (comm of its main thread if seen, else the first comm seen).
    processes: BTreeMap<i64, (bool, String)>,
    threads: BTreeMap<(i64, i64), String>,
    /// (host, bus) -> (thread id, model when known).
    gpus: BTreeMap<(String, String), (i64, Option<String>)>,
}

impl Names {
    /// A row of thread `tid` of `pid`, named `comm`, drawn on track `(pid, track)`.
    pub fn saw(
        &mut self,
        pid: i64,
        tid: i64,
        comm: &str,
        track: i64,
        name: impl FnOnce() -> String,
    ) {
        let main = pid == tid;
        let entry = self
            .processes
            .entry(pid)
            .or_insert_with(|| (main, comm.to_string()));
        if main && !entry.0 {
            *entry = (true, comm.to_string());
        }
        self.threads.entry((pid, track)).or_insert_with(name);
    }

    /// Process `pid`, named `comm` unless a row of its main thread names it.
    pub fn process(&mut self, pid: i64, comm: &str) {
        self.processes
            .entry(pid)
            .or_insert_with(|| (false, comm.to_string()));
    }

    /// The thread id of the GPU that reported `xid`.
    pub fn gpu(&mut self, xid: &Xid) -> i64 {
        let next = self.gpus.len() as i64 + 1;
        let gpu = self
            .gpus
            .entry((xid.host.clone(), xid.pci_bus_id.clone()))
            .or_insert((next, None));
        if gpu.1.is_none() {
            gpu.1 = xid.gpu_model.clone();
        }
        gpu.0
    }

    /// The metadata events: GPUs (as threads of `gpu_pid`), processes, threads.
    pub fn metadata(&self, gpu_pid: i64) -> Vec<Value> {
        let meta = |name: &str, pid: i64, tid: i64, value: &str| json!({"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": value}});
        let mut trace =
            Vec::with_capacity(1 + self.gpus.len() + self.processes.len() + self.threads.len());
        if !self.gpus.is_empty() {
            trace.push(meta("process_name", gpu_pid, 0, "GPUs (XIDs)"));
        }
        for ((host, bus), (tid, model)) in &self.gpus {
            let model = model
                .as_deref()
                .map(|m| format!(" {m}"))
                .unwrap_or_default();
            trace.push(meta(
                "thread_name",
                gpu_pid,
                *tid,
                &format!("GPU {bus}{model} on {host}"),
            ));
        }
        for (pid, (_, comm)) in &self.processes {
            trace.push(meta(
                "process_name",
                *pid,
                *pid,
                &format!("{comm} (pid {pid})"),
            ));
        }
        for ((pid, tid), name) in &self.threads {
            trace.push(meta("thread_name", *pid, *tid, name));
        }
        trace
    }
}
