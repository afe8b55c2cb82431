//! Shell completions and man pages generated from the command-line definition
//! ([`crate::cli::Cli`]), so they never drift from `--help`: `gpuship completions SHELL` prints
//! a completion script, `gpuship man` the `gpuship(1)` page or, with `--dir`, one page per
//! command (`gpuship-run(1)`, ...). `make install` puts both where shells and `man` find them.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// The completion script for `shell`, written to `out`.
pub fn completions(shell: Shell, out: &mut dyn Write) {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "gpuship", out);
}

/// The `gpuship(1)` page as roff, written to `out`.
pub fn man_page(out: &mut dyn Write) -> anyhow::Result<()> {
    clap_mangen::Man::new(Cli::command())
        .render(out)
        .context("rendering the man page")
}

/// `gpuship.1` and `gpuship-<command>.1` for every command into `dir` (created if missing);
/// returns the file names written.
pub fn man_pages(dir: &Path) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let command = Cli::command();
    let mut pages = vec![("gpuship".to_string(), command.clone())];
    for sub in command.get_subcommands() {
        let name = format!("gpuship-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    let mut written = Vec::new();
    for (name, page) in pages {
        let file = format!("{name}.1");
        let mut roff = Vec::new();
        clap_mangen::Man::new(page)
            .render(&mut roff)
            .with_context(|| format!("rendering {file}"))?;
        let path = dir.join(&file);
        std::fs::write(&path, roff).with_context(|| format!("writing {}", path.display()))?;
        written.push(file);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_name_every_command_for_every_shell() {
        let commands: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        assert!(
            commands.contains(&"completions".to_string()),
            "{commands:?}"
        );
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            completions(shell, &mut out);
            let script = String::from_utf8(out).unwrap();
            for command in &commands {
                assert!(script.contains(command.as_str()), "{shell}: {command}");
            }
        }
    }

    #[test]
    fn man_pages_cover_every_command() {
        let dir = tempfile::tempdir().unwrap();
        let written = man_pages(dir.path()).unwrap();
        let expected = 1 + Cli::command().get_subcommands().count();
        assert_eq!(written.len(), expected);
        let run = std::fs::read_to_string(dir.path().join("gpuship-run.1")).unwrap();
        assert!(run.starts_with(".ie \\n(.g .ds Aq"), "{}", &run[..80]);
        assert!(run.contains(".TH gpuship-run 1"), "{run}");
        assert!(run.contains("\\-\\-config"), "{run}");
        let mut page = Vec::new();
        man_page(&mut page).unwrap();
        let page = String::from_utf8(page).unwrap();
        assert!(page.contains(".TH gpuship 1"), "{page}");
    }
}
