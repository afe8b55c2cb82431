//! Text that other users and the kernel control (process names, XID messages, command lines)
//! never reaches the operator's terminal as control characters: everything `gpuship run --
//! CMD` prints (log lines, progress, the shutdown summary) keeps them escaped. `gpuship top`
//! is checked in tests/top.rs; `doctor` and the summary's other keys in their unit tests.

use std::process::Command;

use crate::support;
use crate::support::agent::{binary, data_dir};
use crate::support::Fixtures;

/// The control characters in `text` other than the line ends between lines.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect()
}

#[test]
fn run_with_a_command_prints_hostile_names_and_xid_messages_escaped() {
    let _shared = support::shared();
    let fixtures = Fixtures::build();
    let data = data_dir();
    let state = data_dir();
    let config_path = data.path().join("gpuship.toml");
    let config = format!(
        "{}\n[metrics]\nenabled = false\n",
        fixtures
            .cuda_config(data.path(), r#"["default"]"#)
            .replace("kmsg = false", "kmsg = true")
            .replace(
                "[agent]\n",
                &format!("[agent]\nstate_dir = \"{}\"\n", state.path().display())
            )
    );
    std::fs::write(&config_path, config).unwrap();
    // The traced command's process name: screen clear, CR, DEL and a C1 CSI.
    let link = fixtures.dir.path().join("\x1b[2J\r\x7f\u{9b}w");
    std::os::unix::fs::symlink(&fixtures.workload, &link).unwrap();
    // The shell writes an XID whose message holds an OSC 52 clipboard write and colour
    // codes, then becomes the workload (same pid).
    let message = "Graphics Exception \x1b]52;c;aGk=\x07 ESR \r\x1b[31m red \u{9b}1J\x7f end";
    let output = Command::new(binary())
        .args(["--log-level=info", "run", "--config"])
        .arg(&config_path)
        .args([
            "--",
            "sh",
            "-c",
            "printf '%s\\n' \"<3>NVRM: Xid (PCI:0000:7c:00): 13, pid=$$, name=x, $1\" \
             > /dev/kmsg && exec \"$0\" sequence 1",
        ])
        .arg(&link)
        .arg(message)
        .env("CUDA_LIB", &fixtures.libcuda)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("running gpuship run -- sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(raw_controls(&stdout), Vec::<char>::new(), "{stdout:?}");
    assert_eq!(raw_controls(&stderr), Vec::<char>::new(), "{stderr:?}");
    // What was hostile is still there to read, as visible escapes.
    assert!(
        stderr.contains(
            " Graphics Exception \\x1b]52;c;aGk=\\x07 ESR \\r\\x1b[31m red \\u{9b}1J\\x7f end"
        ),
        "{stderr}"
    );
    assert!(
        stdout.contains("workload: sequence iterations=1"),
        "{stdout}"
    );
    assert!(stderr.contains("CUDA calls: 28"), "{stderr}");
    assert!(stderr.contains("XID 13 (kmsg)"), "{stderr}");
}
