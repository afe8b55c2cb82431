//! The scheduling priority of the threads that carry events from the rings to the sinks.
//!
//! The CUDA ring is drained by one thread, which hands batches to sinks running on the async
//! runtime's threads. When the traced processes keep every CPU busy (64 threads calling flat
//! out on 2 CPUs), each of those threads at the default priority gets about a 1/33 share of a
//! CPU: the consumer drains too slowly, or a sink falls behind, its queue fills and `block`
//! stops the consumer, and either way the ring overflows and calls are lost in the kernel. So
//! the threads on that path run at nice [`CONSUMER_NICE`] when the process may (root, or
//! `CAP_SYS_NICE`); otherwise the consumer says so once and runs on: the consumer itself, the
//! async runtime's threads (they raise themselves as they start, see `agent/run`), and the
//! threads the sinks' libraries started (librdkafka's), raised when the consumer is spawned,
//! after the sinks; the threads those start later inherit the value. The main thread, which
//! starts a traced command (`gpuship run -- CMD`), and the threads it starts after the consumer
//! (kernel-log reader, stats) keep the default priority, so a traced command never inherits a
//! raised one.
//!
//! Nice rather than a real-time class (`SCHED_FIFO`/`SCHED_RR`): a negative nice is a larger
//! weight in the fair scheduler, so the consumer wins the CPU whenever it has records to take
//! but can never starve the traced processes, whatever the event rate or a bug in the agent;
//! a real-time consumer that could not keep up would hold its CPU up to the kernel's RT limit
//! (95%), and real-time classes are refused inside most container cgroups. The cost is that,
//! when events come faster than the agent can take them at equal priority, the agent's CPU
//! comes out of the traced processes' share (they slow down) instead of calls being lost; the
//! agent's CPU stays bounded by the event rate.

/// The nice value of the consumer and sink threads: the largest fair-scheduler weight (88,761
/// against 1,024 at nice 0), so that they keep up with as many busy traced threads as possible.
pub const CONSUMER_NICE: i32 = -20;

/// Sets the calling thread's nice value to [`CONSUMER_NICE`].
pub fn raise_current_thread() -> std::io::Result<()> {
    set_current_thread_nice(CONSUMER_NICE)
}

/// Raises every thread of this process that exists now, except the calling thread and the
/// main thread (the one that starts traced commands). Returns how many were raised.
pub fn raise_other_threads() -> std::io::Result<usize> {
    let mut raised = 0;
    for other in other_threads()? {
        match set_thread_nice(other, CONSUMER_NICE) {
            Ok(()) => raised += 1,
            // Ended since the listing.
            Err(err) if err.raw_os_error() == Some(libc::ESRCH) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(raised)
}

/// The ids of this process's threads but the calling and the main thread.
fn other_threads() -> std::io::Result<Vec<libc::pid_t>> {
    // SAFETY: getpid(2) and gettid(2) have no preconditions and cannot fail.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    Ok(std::fs::read_dir("/proc/self/task")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&other| other != pid && other != tid)
        .collect())
}

/// Sets the nice value of thread `tid` of this process. On Linux `PRIO_PROCESS` with a thread
/// id applies to that thread only.
fn set_thread_nice(tid: libc::pid_t, nice: i32) -> std::io::Result<()> {
    // SAFETY: setpriority(2) takes plain integers; `tid` is a thread of this process.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets the calling thread's nice value. On Linux `PRIO_PROCESS` with a thread id applies to
/// that thread only.
pub fn set_current_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid(2) has no preconditions and cannot fail.
    set_thread_nice(unsafe { libc::gettid() }, nice)
}

/// The calling thread's nice value.
pub fn current_thread_nice() -> std::io::Result<i32> {
    // SAFETY: gettid(2) has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    // getpriority(2) may return -1 as a value: errno tells.
    // SAFETY: __errno_location() is this thread's errno; writing 0 to it is how getpriority
    // errors are told from a nice value of -1.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: getpriority(2) takes plain integers; `tid` is this thread's own id.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    let error = std::io::Error::last_os_error();
    if nice == -1 && error.raw_os_error() != Some(0) {
        return Err(error);
    }
    Ok(nice)
}

/// Raises a thread of the async runtime (its `on_thread_start`); the consumer logs the
/// outcome, which is the same for every thread of the process.
pub fn raise_sink_thread() {
    let _ = raise_current_thread();
}

/// Raises the threads the sinks' libraries started, before the consumer is spawned (on the
/// main thread, so that which threads exist does not depend on timing).
pub(super) fn raise_sink_library_threads() {
    if let Err(err) = raise_other_threads() {
        tracing::debug!(%err, "sink threads keep the default priority");
    }
}

/// Raises the consumer thread, logging the outcome once.
pub(super) fn raise_consumer() {
    match raise_current_thread() {
        Ok(()) => tracing::info!(
            nice = CONSUMER_NICE,
            "consumer and sink threads run at a raised priority"
        ),
        Err(err) => tracing::warn!(
            %err,
            "consumer thread keeps the default priority (raising it needs root or CAP_SYS_NICE); \
             with every CPU busy, calls may be lost in the kernel"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Raising one thread leaves the thread that started it as it was. Root (as the tests run)
    /// may raise; without the right the error comes back and nothing changes.
    #[test]
    fn raises_only_the_calling_thread() {
        let before = current_thread_nice().expect("own nice value");
        let raised = std::thread::spawn(|| {
            let outcome = raise_current_thread();
            (
                outcome.is_ok(),
                current_thread_nice().expect("own nice value"),
            )
        })
        .join()
        .expect("thread");
        match raised {
            (true, nice) => assert_eq!(nice, CONSUMER_NICE),
            (false, nice) => assert_eq!(nice, before),
        }
        assert_eq!(current_thread_nice().expect("own nice value"), before);
    }

    /// The threads raised are every other thread but the main one, and each is raised on its
    /// own. (Only threads of this test are touched: the others belong to concurrent tests.)
    #[test]
    fn other_threads_are_listed_and_raised_one_by_one() {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            // SAFETY: gettid(2) has no preconditions and cannot fail.
            tid_tx.send(unsafe { libc::gettid() }).expect("send");
            let _ = done_rx.recv();
            current_thread_nice().expect("own nice value")
        });
        let other_tid = tid_rx.recv().expect("tid");
        let listed = other_threads().expect("listing threads");
        // SAFETY: getpid(2) and gettid(2) have no preconditions and cannot fail.
        let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
        assert!(listed.contains(&other_tid), "{listed:?}");
        assert!(
            !listed.contains(&pid) && !listed.contains(&tid),
            "{listed:?}"
        );
        let before = current_thread_nice().expect("own nice value");
        let outcome = set_thread_nice(other_tid, CONSUMER_NICE);
        done_tx.send(()).expect("send");
        let other_nice = other.join().expect("thread");
        match outcome {
            Ok(()) => assert_eq!(other_nice, CONSUMER_NICE),
            Err(_) => assert_eq!(other_nice, before),
        }
        assert_eq!(current_thread_nice().expect("own nice value"), before);
    }

    #[test]
    fn a_nice_value_reads_back() {
        let (target, value) = std::thread::spawn(|| {
            let target = (current_thread_nice().expect("own nice value") + 1).min(19);
            set_current_thread_nice(target).expect("lowering the own priority is always allowed");
            (target, current_thread_nice().expect("own nice value"))
        })
        .join()
        .expect("thread");
        assert_eq!(value, target);
    }
}
