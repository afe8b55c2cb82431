//! `make install` as a packager runs it: `make install-files` (install without the build) puts
//! the test's own build into a DESTDIR, and what lands there works: the bash completion
//! completes subcommands in a real bash, the man pages render with groff, the unit starts the
//! binary from PREFIX, and a second install keeps an edited config.

use std::path::Path;
use std::process::Command;

use crate::support::agent::binary;

fn make_install(destdir: &Path) -> String {
    let bin = Path::new(binary()).parent().expect("target dir");
    let output = Command::new("make")
        .arg("install-files")
        .arg(format!("BIN={}", bin.display()))
        .arg(format!("DESTDIR={}", destdir.display()))
        .arg("PREFIX=/usr")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("MAKEFLAGS")
        .output()
        .expect("make");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "make install-files: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn install_puts_working_completions_man_pages_unit_and_config_in_place() {
    let root = tempfile::tempdir().unwrap();
    make_install(root.path());
    let at = |path: &str| root.path().join(path.trim_start_matches('/'));
    assert!(at("/usr/bin/gpuship").is_file());

    // bash completes `gpuship re` to the commands that start so.
    let bash = at("/usr/share/bash-completion/completions/gpuship");
    let script = format!(
        "source {}; COMP_WORDS=(gpuship re); COMP_CWORD=1; _gpuship gpuship re gpuship; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        bash.display()
    );
    let output = Command::new("bash").args(["-c", &script]).output().unwrap();
    let mut replies: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    replies.sort();
    assert_eq!(
        replies,
        ["report"],
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(at("/usr/share/zsh/site-functions/_gpuship").is_file());
    let fish =
        std::fs::read_to_string(at("/usr/share/fish/vendor_completions.d/gpuship.fish")).unwrap();
    assert!(fish.contains("complete -c gpuship"), "{fish}");

    // The run page renders, naming its options.
    let page = at("/usr/share/man/man1/gpuship-run.1");
    let output = Command::new("groff")
        .args(["-man", "-Tutf8", "-P", "-c"])
        .arg(&page)
        .output()
        .expect("groff");
    let text = String::from_utf8_lossy(&output.stdout).replace("\u{2010}", "-");
    assert!(output.status.success());
    assert!(text.contains("gpuship-run"), "{text}");
    assert!(text.contains("--config"), "{text}");
    let pages = std::fs::read_dir(at("/usr/share/man/man1"))
        .unwrap()
        .count();
    assert_eq!(pages, 11, "gpuship.1 and one page per command (10)");

    let unit = std::fs::read_to_string(at("/etc/systemd/system/gpuship.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/bin/gpuship run --config /etc/gpuship/gpuship.toml"),
        "{unit}"
    );
    let config = at("/etc/gpuship/gpuship.toml");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/gpuship.toml"))
            .unwrap()
    );
    std::fs::write(&config, "# edited\n").unwrap();
    let again = make_install(root.path());
    assert!(again.contains("kept "), "{again}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "# edited\n");
}
