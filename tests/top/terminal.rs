//! `gpuship top`'s live view in a real terminal (tmux): the workload's functions with their
//! exact totals, its process, an XID as it arrives, zero loss; `q` quits and gives the terminal
//! back; an unreachable agent is said and retried; SIGTERM and a vanished terminal end it.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{
    agent_with_kmsg, expected_as_strings, function_totals, process_row, run_sequence, FUNCTIONS,
    NO_LOSS,
};
use crate::support;
use crate::support::agent::{binary, data_dir, Agent};
use crate::support::{kmsg, Fixtures};

/// A tmux session of our own (own server socket, no user config), killed by name on drop.
struct Tmux {
    name: String,
}

impl Tmux {
    /// Runs `command` in a detached 200x50 session. When the command ends, the session says
    /// so and stays, so its screen can be read.
    fn start(command: &str) -> Tmux {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "gpuship-top-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let tmux = Tmux { name };
        let script = format!("{command}; echo \"top exited with $?\"; sleep 120");
        let status = tmux
            .command()
            .args([
                "new-session",
                "-d",
                "-s",
                &tmux.name,
                "-x",
                "200",
                "-y",
                "50",
            ])
            .arg(script)
            .status()
            .expect("tmux (make testenv installs it)");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.args(["-L", &self.name, "-f", "/dev/null"]);
        command
    }

    fn screen(&self) -> String {
        let output = self
            .command()
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits until `done` holds for the screen; panics with the last screen.
    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("the screen never showed {what}:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn send_keys(&self, keys: &str) {
        let status = self
            .command()
            .args(["send-keys", "-t", &self.name, keys])
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .command()
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

fn top(agent: &str, interval: &str) -> String {
    format!("{} top --agent {agent} --interval {interval}", binary())
}

#[test]
fn the_live_view_shows_calls_processes_xids_and_no_loss_and_q_quits() {
    let _shared = support::shared();
    let (fixtures, _data, agent) = agent_with_kmsg();
    let address = agent.metrics_address();
    let tmux = Tmux::start(&top(&address, "200ms"));
    tmux.wait_for("an empty view", |s| {
        s.contains(&format!("gpuship top  agent {address}  up "))
            && s.contains("(no CUDA calls yet)")
            && s.contains("(no XIDs since the agent started)")
    });

    let pid = run_sequence(&fixtures);
    kmsg(&format!(
        "<3>NVRM: Xid (PCI:0000:7e:00): 79, pid={pid}, name=cuda_workload, GPU has fallen off the bus."
    ));
    let expected = expected_as_strings();
    // The kernel log is the host's: other XIDs may show too; this bus id is only ours.
    let screen = tmux.wait_for("the workload's totals and its XID", |s| {
        function_totals(s) == expected && s.contains("0000:7e:00.0")
    });
    assert_eq!(
        process_row(&screen, pid).map(|cells| [
            cells[1].clone(),
            cells[3].clone(),
            cells[4].clone()
        ]),
        Some(["cuda_workload".to_string(), "60".into(), "4".into()]),
        "{screen}"
    );
    assert!(screen.lines().any(|l| l == NO_LOSS), "{screen}");
    let xids: u64 = screen
        .lines()
        .find_map(|l| l.split("  XIDs ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .expect("XID count in the header");
    assert!(xids >= 1, "the header counts the XID:\n{screen}");
    let xid = screen
        .lines()
        .find(|l| l.contains("0000:7e:00.0"))
        .expect("XID row");
    assert!(
        xid.ends_with(
            "   79 GPU fell off the PCIe bus  fatal   0000:7e:00.0 GPU has fallen off the bus."
        ),
        "{xid}"
    );
    assert!(screen.contains("every 200ms  q quits"), "{screen}");

    tmux.send_keys("q");
    let screen = tmux.wait_for("top exiting", |s| s.contains("top exited with 0"));
    // The alternate screen is gone: what remains is the shell's normal screen.
    assert!(!screen.contains("FUNCTION"), "{screen}");
    let stopped = agent.stop();
    assert!(stopped.status.success(), "{}", stopped.log);
    assert_eq!(stopped.assert_nothing_lost("cuda", "cuda"), 60);
}

#[test]
fn the_live_view_says_when_the_agent_is_unreachable_and_retries_until_it_comes() {
    let _shared = support::shared();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().unwrap().port()
    };
    let address = format!("127.0.0.1:{port}");
    let tmux = Tmux::start(&top(&address, "200ms"));
    tmux.wait_for("the agent being unreachable", |s| {
        s.contains(&format!(
            "agent unreachable: cannot reach the agent at {address}"
        ))
    });

    let fixtures = Fixtures::build();
    let data = data_dir();
    let config = format!(
        "{}\n[metrics]\naddress = \"{address}\"\n",
        fixtures.cuda_config(data.path(), FUNCTIONS)
    );
    let agent = Agent::start(&config, &[]);
    let pid = run_sequence(&fixtures);
    let screen = tmux.wait_for("the agent's view", |s| {
        process_row(s, pid).is_some_and(|cells| cells[3] == "60")
    });
    assert!(!screen.contains("unreachable"), "{screen}");
    tmux.send_keys("C-c");
    tmux.wait_for("top exiting on Ctrl-C", |s| s.contains("top exited with 0"));
    agent.stop();
}

#[test]
fn closing_the_terminal_ends_top_and_a_quit_signal_restores_it() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().unwrap().port()
    };
    let address = format!("127.0.0.1:{port}");
    // The pid of `top`: the only child of the pane's shell.
    let top_pid = |tmux: &Tmux| -> u32 {
        let output = tmux
            .command()
            .args(["list-panes", "-t", &tmux.name, "-F", "#{pane_pid}"])
            .output()
            .expect("tmux list-panes");
        let shell = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .expect("the pane's shell");
        children.trim().parse().expect("one child: top")
    };
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let waiting = |what: &str| format!("agent unreachable: cannot reach the agent at {what}");

    // SIGTERM: top ends with status 0 and the shell's screen is back.
    let tmux = Tmux::start(&top(&address, "200ms"));
    tmux.wait_for("the agent being unreachable", |s| {
        s.contains(&waiting(&address))
    });
    let pid = top_pid(&tmux);
    let status = Command::new("kill").arg(pid.to_string()).status().unwrap();
    assert!(status.success());
    let screen = tmux.wait_for("top exiting on SIGTERM", |s| {
        s.contains("top exited with 0")
    });
    assert!(!screen.contains("unreachable"), "{screen}");

    // The terminal goes away (the tmux server dies): top notices and ends, it does not spin.
    let tmux = Tmux::start(&top(&address, "200ms"));
    tmux.wait_for("the agent being unreachable", |s| {
        s.contains(&waiting(&address))
    });
    let pid = top_pid(&tmux);
    let _ = tmux.command().arg("kill-server").status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "top {pid} outlived its terminal");
        std::thread::sleep(Duration::from_millis(100));
    }
}
