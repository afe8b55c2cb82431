//! The `gpuship` binary: parses the command line, sets up logging, and hands over to the
//! library. Errors are printed with their full context chain.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use gpuship::cli::{Cli, CliCommand, DoctorArgs, RunArgs, XidArgs};
use gpuship::config::Config;
use gpuship::run::{run, RunOptions, Target};

fn main() -> ExitCode {
    let cli = Cli::parse();
    gpuship::logging::init(cli.log_level.as_deref().unwrap_or("info"), cli.log_format);
    // The views replace this process with gpuship-lake; they come back only when it cannot start.
    let log_level = cli.log_level.as_deref();
    let view = |name: &str, args: &[std::ffi::OsString]| {
        Err(gpuship::lake_views::exec_view(name, log_level, args))
    };
    let result = match cli.command {
        CliCommand::Validate(args) => validate(&args.config, args.syntax_only),
        CliCommand::Run(args) => run_command(args),
        CliCommand::Doctor(args) => doctor(args),
        CliCommand::Xid(args) => xid(args),
        CliCommand::ExportTrace(args) => view("export-trace", &args.args),
        CliCommand::Report(args) => view("report", &args.args),
        CliCommand::Query(args) => view("query", &args.args),
        CliCommand::Top(args) => gpuship_top::run(&gpuship_top::TopOptions {
            agent: args.agent,
            interval: args.interval,
            once: args.once,
        }),
        CliCommand::Completions(args) => {
            gpuship::cli_docs::completions(args.shell, &mut std::io::stdout().lock());
            Ok(ExitCode::SUCCESS)
        }
        CliCommand::Man(args) => man(args.dir.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if gpuship::logging::json() {
                tracing::error!(error = format!("{err:#}"), "gpuship failed");
            } else {
                eprintln!("gpuship: {err:#}");
            }
            ExitCode::from(1)
        }
    }
}

fn xid(args: XidArgs) -> anyhow::Result<ExitCode> {
    use gpuship::xid::catalog;
    use std::io::Write;
    // A reader that stops early (`gpuship xid --list | head`) is not an error.
    let mut out = std::io::stdout().lock();
    match args.code {
        Some(code) => {
            let info = catalog::lookup(code);
            let _ = writeln!(out, "{info}");
            let _ = writeln!(out, "  catalog:   {}", catalog::CATALOG_VERSION);
            Ok(if info.category == "unknown" {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
        None => {
            let _ = writeln!(
                out,
                "{:>4}  {:<13}  {:<8}  {:<24}  name",
                "code", "category", "severity", "action"
            );
            for e in catalog::entries() {
                let line = writeln!(
                    out,
                    "{:>4}  {:<13}  {:<8}  {:<24}  {}",
                    e.code, e.category, e.severity, e.action, e.name
                );
                if line.is_err() {
                    break;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn validate(path: &Path, syntax_only: bool) -> anyhow::Result<ExitCode> {
    let config = Config::load(path)?;
    // What `run` would refuse at start (an unset `${env:NAME}`, a missing secret or TLS file)
    // is refused here too, with the same words.
    let problems = if syntax_only {
        Vec::new()
    } else {
        gpuship::run::start_problems(&config)
    };
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("{}: {problem}", path.display());
        }
        eprintln!(
            "{}: the file is valid, but `gpuship run` would not start with it here \
             (--syntax-only checks the file alone)",
            path.display()
        );
        return Ok(ExitCode::from(1));
    }
    println!(
        "{}: valid ({} sink(s))",
        path.display(),
        config.sinks.len().max(1)
    );
    Ok(ExitCode::SUCCESS)
}

fn man(dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    match dir {
        Some(dir) => {
            for page in gpuship::cli_docs::man_pages(dir)? {
                println!("{}", dir.join(page).display());
            }
        }
        None => gpuship::cli_docs::man_page(&mut std::io::stdout().lock())?,
    }
    Ok(ExitCode::SUCCESS)
}

fn doctor(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default(),
    };
    let checks = gpuship::doctor::run_checks(&config);
    if args.json {
        println!(
            "{}",
            gpuship::doctor::render_json(&checks).context("encoding the checks")?
        );
    } else {
        print!("{}", gpuship::doctor::render(&checks));
    }
    Ok(if gpuship::doctor::all_required_ok(&checks) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Raises the soft open-file limit to the hard one and logs both. Probes, rings, spools, sink
/// connections, Parquet files and the metrics server share it; systemd's default soft limit
/// (1,024) is too small for a busy node and a hostile local client together.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let err = std::io::Error::last_os_error();
        tracing::warn!(%err, "cannot read the open file limit");
        return;
    }
    let previous = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads a struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        } else {
            let err = std::io::Error::last_os_error();
            tracing::warn!(%err, soft = previous, hard = limit.rlim_max, "cannot raise the open file limit");
        }
    }
    tracing::info!(
        soft = limit.rlim_cur,
        hard = limit.rlim_max,
        previous_soft = previous,
        "open file limit"
    );
}

fn run_command(args: RunArgs) -> anyhow::Result<ExitCode> {
    raise_open_file_limit();
    let heap = gpuship::heap::fix_large_block_thresholds();
    tracing::debug!(
        mmap_threshold_set = heap.mmap_threshold,
        mmap_threshold_bytes = gpuship::heap::MMAP_THRESHOLD_BYTES,
        trim_threshold_set = heap.trim_threshold,
        trim_threshold_bytes = gpuship::heap::TRIM_THRESHOLD_BYTES,
        "heap: large blocks reused from the heap (glibc's thresholds fixed at their end state)"
    );
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    config.apply_default_sink();
    let target = match (args.pid, args.command.is_empty()) {
        (Some(pid), _) => Target::Pid(pid),
        (None, false) => Target::Command(args.command),
        (None, true) => Target::AllProcesses,
    };
    let outcome = run(RunOptions {
        config,
        config_path: args.config,
        target,
        summary_json: args.summary_json,
    })
    .context("gpuship run")?;
    Ok(match outcome.command_exit_code {
        Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
        None => ExitCode::SUCCESS,
    })
}
