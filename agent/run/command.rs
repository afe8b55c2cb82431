//! Starting the traced command of `gpuship run -- COMMAND`.
//!
//! The child is held between fork and exec until its pid is in the traced-process map, so not
//! even its first CUDA call escapes the trace. Its descendants join through the BPF fork hook.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use anyhow::Context;
use libbpf_rs::MapHandle;

use crate::sources::cuda::probes::trace_process;

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts `argv`; with `traced`, the child runs only after its pid was added to the map.
pub fn spawn_traced(argv: &[String], traced: Option<&MapHandle>) -> anyhow::Result<Child> {
    let (program, args) = argv.split_first().context("no command given after --")?;
    let mut command = Command::new(program);
    command.args(args);
    let Some(traced) = traced else {
        return command
            .spawn()
            .with_context(|| format!("starting {program}"));
    };
    let (gate_read, gate_write) = pipe().context("creating the start gate")?;
    let gate_fd = gate_read.as_raw_fd();
    // SAFETY: the closure only calls read(2), which is async-signal-safe, and touches no
    // memory other than a stack buffer.
    unsafe {
        command.pre_exec(move || {
            let mut byte = 0u8;
            loop {
                let n = libc::read(gate_fd, (&mut byte as *mut u8).cast(), 1);
                if n >= 0 {
                    return Ok(());
                }
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        });
    }
    let child = command
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    drop(gate_read);
    trace_process(traced, child.id())?;
    // SAFETY: writing one byte from a valid buffer to a descriptor we own.
    let written = unsafe { libc::write(gate_write.as_raw_fd(), b"go".as_ptr().cast(), 1) };
    if written != 1 {
        return Err(io::Error::last_os_error()).context("releasing the traced command");
    }
    Ok(child)
}
