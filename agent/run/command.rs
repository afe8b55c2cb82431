//! Starting the traced command of `gpuship run -- COMMAND`.
//!
//! The child is held between fork and exec until its pid is in the traced-process map, so not
//! even its first CUDA call escapes the trace; its descendants join through the BPF fork hook.
//! `std::process::Command` cannot do this (its spawn waits for the exec), so the fork and exec
//! are done here, with only async-signal-safe calls in the child.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::Context;
use libbpf_rs::MapHandle;

use crate::sources::trace_process;

/// A started command; [`TracedChild::wait`] reaps it.
#[derive(Debug)]
pub struct TracedChild {
    pid: libc::pid_t,
}

impl TracedChild {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Waits for it to exit: its exit code, or 128 + signal number when a signal ended it.
    pub fn wait(&self) -> io::Result<i32> {
        let mut status = 0;
        loop {
            // SAFETY: waitpid on our own child with a valid status pointer.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if rc == self.pid {
                break;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
        Ok(if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        })
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts `argv` (searched in PATH); with `traced`, it runs only after its pid was added.
pub fn spawn_traced(argv: &[String], traced: Option<&MapHandle>) -> anyhow::Result<TracedChild> {
    anyhow::ensure!(!argv.is_empty(), "no command given after --");
    let args: Vec<CString> = argv
        .iter()
        .map(|a| {
            CString::new(a.as_bytes())
                .with_context(|| format!("argument {a:?} contains a NUL byte"))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut arg_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    arg_ptrs.push(std::ptr::null());
    let failure =
        CString::new(format!("gpuship: cannot execute {}\n", argv[0])).context("command name")?;
    let (gate_read, gate_write) = pipe().context("creating the start gate")?;
    let gate_fd = gate_read.as_raw_fd();

    // SAFETY: fork(2) in a multi-threaded process: the child only calls async-signal-safe
    // functions (read, execvp, write, _exit) on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        // SAFETY: child side; see above. Every path ends in exec or _exit.
        unsafe {
            let mut byte = 0u8;
            loop {
                let n = libc::read(gate_fd, (&mut byte as *mut u8).cast(), 1);
                if n >= 0 || *libc::__errno_location() != libc::EINTR {
                    break;
                }
            }
            libc::execvp(arg_ptrs[0], arg_ptrs.as_ptr());
            libc::write(2, failure.as_ptr().cast(), failure.as_bytes().len());
            libc::_exit(127);
        }
    }
    drop(gate_read);
    let child = TracedChild { pid };
    if let Some(traced) = traced {
        trace_process(traced, child.pid())?;
    }
    // SAFETY: writing one byte from a valid buffer to a descriptor we own.
    let written = unsafe { libc::write(gate_write.as_raw_fd(), b"g".as_ptr().cast(), 1) };
    if written != 1 {
        return Err(io::Error::last_os_error()).context("releasing the traced command");
    }
    tracing::info!(pid = child.pid(), command = ?argv, "traced command started");
    Ok(child)
}
