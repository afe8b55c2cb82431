//! `gpuship top`: a live terminal view of a running agent. It attaches no probes and needs no
//! privileges: it polls the agent's `GET /live`, computes rates from the difference of two
//! polls, and redraws the screen every interval.
//!
//! - [`wire`]: the `/live` document's types, shared with the daemon that serves it.
//! - [`client`]: the HTTP read of `/live`.
//! - [`frame`]: rates, totals and loss counters of one screen.
//! - [`render`]: a frame as styled lines (also the `--once` text); `format` writes its cells,
//!   [`layout`] fits the lines to the terminal and escapes text from outside ([`escape`]).
//! - [`terminal`]: raw input, alternate screen, resize, restoring the terminal (crossterm
//!   and ratatui).
//!
//! This crate depends on neither the daemon nor libbpf: the daemon depends on it for
//! [`wire`], and the `gpuship` binary calls [`run`] for `gpuship top`. Linux-only, as the
//! agent is.

pub mod client;
pub mod escape;
mod format;
pub mod frame;
pub mod layout;
pub mod render;
pub mod terminal;
pub mod wire;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;

use client::Client;
use frame::Frame;
use layout::Layout;
use terminal::{Input, Screen};
use wire::LiveReport;

/// The shortest refresh interval.
const MIN_INTERVAL: Duration = Duration::from_millis(50);
/// The longest: a view that refreshes less often than this is not live.
const MAX_INTERVAL: Duration = Duration::from_secs(600);

/// What `gpuship top` was asked.
#[derive(Debug, Clone)]
pub struct TopOptions {
    /// `host:port` of the agent's metrics server.
    pub agent: String,
    /// Time between polls.
    pub interval: Duration,
    /// Print one plain-text frame (after two polls) and exit.
    pub once: bool,
}

/// A refresh interval: `200ms`, `1s`, `1.5s`, `2m`, or plain seconds (`2`). The grammar is
/// humantime's, as for the lake's `--since` (`1m30s`, `500ms`, `2min`).
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let plain_seconds = !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.');
    let parsed = if plain_seconds {
        humantime::parse_duration(&format!("{text}s"))
    } else {
        humantime::parse_duration(text)
    };
    let interval = parsed.map_err(|e| match e {
        humantime::DurationError::UnknownUnit { unit, .. } if !unit.is_empty() => {
            format!("unknown unit {unit:?} in {text:?} (ms, s or m)")
        }
        humantime::DurationError::NumberOverflow => format!("{text:?} is too long"),
        _ => format!("{text:?} is not a duration such as 200ms, 1s or 2m"),
    })?;
    if interval < MIN_INTERVAL {
        return Err(format!(
            "{text:?} is shorter than {}ms",
            MIN_INTERVAL.as_millis()
        ));
    }
    if interval > MAX_INTERVAL {
        return Err(format!(
            "{text:?} is longer than {}m",
            MAX_INTERVAL.as_secs() / 60
        ));
    }
    Ok(interval)
}

/// Runs `gpuship top`.
pub fn run(options: &TopOptions) -> anyhow::Result<ExitCode> {
    // A poll that takes longer than the interval is a poll that failed.
    let timeout = options
        .interval
        .clamp(Duration::from_millis(500), Duration::from_secs(5));
    let client = Client::new(&options.agent, timeout);
    if options.once {
        once(&client, options.interval)
    } else {
        interactive(&client, options.interval)
    }
}

fn once(client: &Client, interval: Duration) -> anyhow::Result<ExitCode> {
    let hint = "is `gpuship run` running with [metrics] enabled on this address (--agent)?";
    let first = client.fetch().context(hint)?;
    std::thread::sleep(interval);
    let second = client.fetch().context(hint)?;
    let frame = frame::frame(client.address(), Some(&first), &second);
    let text = render::plain(&render::render(&frame, &Layout::default())).join("\n");
    use std::io::Write;
    // A reader that stops early (`gpuship top --once | head`) is not an error.
    let _ = writeln!(std::io::stdout().lock(), "{text}");
    Ok(ExitCode::SUCCESS)
}

fn interactive(client: &Client, interval: Duration) -> anyhow::Result<ExitCode> {
    let mut screen =
        Screen::enter().context("gpuship top needs a terminal (use --once for plain text)")?;
    let mut previous: Option<LiveReport> = None;
    loop {
        let tick = Instant::now();
        // What the screen shows until the next poll, drawn again when the terminal resizes.
        let shown: Result<Frame, String> = match client.fetch() {
            Ok(report) => {
                let frame = frame::frame(client.address(), previous.as_ref(), &report);
                previous = Some(report);
                Ok(frame)
            }
            Err(err) => Err(err.to_string()),
        };
        let mut redraw = true;
        loop {
            if redraw {
                draw(&mut screen, client.address(), &shown, interval)?;
                redraw = false;
            }
            let left = interval.saturating_sub(tick.elapsed());
            if left.is_zero() {
                break;
            }
            match screen.input(left).context("reading the keyboard")? {
                Some(Input::Quit) => return Ok(ExitCode::SUCCESS),
                Some(Input::Resize) => redraw = true,
                Some(Input::Other) | None => {}
            }
        }
    }
}

/// Draws a frame, or the unreachable screen, at the terminal's current size.
fn draw(
    screen: &mut Screen,
    agent: &str,
    shown: &Result<Frame, String>,
    interval: Duration,
) -> anyhow::Result<()> {
    let (width, height) = screen.size();
    let layout = Layout {
        width: Some(width),
        height: Some(height),
        interval: Some(interval),
    };
    let lines = match shown {
        Ok(frame) => render::render(frame, &layout),
        Err(error) => render::unreachable(agent, error, &layout),
    };
    screen.draw(&lines).context("drawing the screen")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse_in_the_usual_units() {
        assert_eq!(parse_interval("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_interval("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_interval("10ms")
            .unwrap_err()
            .contains("shorter than 50ms"));
        assert_eq!(parse_interval("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_interval("1h")
            .unwrap_err()
            .contains("longer than 10m"));
        assert!(parse_interval("2x").unwrap_err().contains("unknown unit"));
        assert!(parse_interval("fast")
            .unwrap_err()
            .contains("not a duration"));
        assert!(parse_interval("").is_err());
        assert!(parse_interval("-1s").is_err());
    }
}
