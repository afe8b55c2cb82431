//! The scheduling priority of the threads that carry events from the rings to the sinks.
//!
//! The CUDA ring is drained by one thread, which hands batches to sinks running on the async
//! runtime's threads. When the traced processes keep every CPU busy (64 threads calling flat
//! out on 2 CPUs), each of those threads at the default priority gets about a 1/33 share of a
//! CPU: the consumer drains too slowly, or a sink falls behind, its queue fills and `block`
//! stops the consumer, and either way the ring overflows and calls are lost in the kernel. So
//! the consumer and the runtime's threads raise their nice value to [`CONSUMER_NICE`] when the
//! process may (root, or `CAP_SYS_NICE`); otherwise the consumer says so once and runs on.
//! The main thread, which starts a traced command (`gpuship run -- CMD`), and the kernel-log
//! reader keep the default priority, so a traced command never inherits a raised one.
//!
//! Nice rather than a real-time class (`SCHED_FIFO`/`SCHED_RR`): a negative nice is a larger
//! weight in the fair scheduler, so the consumer wins the CPU whenever it has records to take
//! but can never starve the traced processes, whatever the event rate or a bug in the agent;
//! a real-time consumer that could not keep up would hold its CPU up to the kernel's RT limit
//! (95%), and real-time classes are refused inside most container cgroups. The cost is that,
//! when events come faster than the agent can take them at equal priority, the agent's CPU
//! comes out of the traced processes' share (they slow down) instead of calls being lost; the
//! agent's CPU stays bounded by the event rate.

/// The nice value the consumer and sink threads take: the largest fair-scheduler weight (88,761 against
/// 1,024 at nice 0), so that it keeps up with as many busy traced threads as possible.
pub const CONSUMER_NICE: i32 = -20;

/// Sets the calling thread's nice value to [`CONSUMER_NICE`].
pub fn raise_current_thread() -> std::io::Result<()> {
    set_current_thread_nice(CONSUMER_NICE)
}

/// Sets the calling thread's nice value. On Linux `PRIO_PROCESS` with a thread id applies to
/// that thread only.
pub fn set_current_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid(2) has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority(2) takes plain integers; `tid` is this thread's own id.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
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
