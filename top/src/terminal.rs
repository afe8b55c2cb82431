//! The full-screen terminal through crossterm and ratatui: raw input (so `q` and Ctrl-C arrive
//! as keys, without echo), the alternate screen, hidden cursor, and putting all of it back on
//! drop, including when a panic unwinds, SIGTERM/SIGHUP ask `top` to end, or the terminal
//! goes away (then stdin is no longer a terminal: `top` ends instead of waiting for keys that
//! cannot come).

use std::io::{self, IsTerminal, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use crossterm::{cursor, execute};
use ratatui::backend::{Backend, CrosstermBackend};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Terminal;

/// The longest wait for a key between two looks at the quit flag: a signal does not always
/// interrupt the wait.
const QUIT_CHECK: Duration = Duration::from_millis(100);

/// What the keyboard or the terminal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// `q`, `Q`, Ctrl-C, a quit signal, or the terminal hung up.
    Quit,
    /// The terminal changed size: draw again now.
    Resize,
    /// Anything else.
    Other,
}

/// The terminal in full-screen mode; dropping it restores the terminal.
pub struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
    /// Set by SIGTERM, SIGHUP and SIGINT.
    quit: Arc<AtomicBool>,
}

impl Screen {
    /// Switches the terminal to raw input and the alternate screen. Fails when stdin or stdout
    /// is not a terminal.
    pub fn enter() -> io::Result<Screen> {
        if !(io::stdin().is_terminal() && io::stdout().is_terminal()) {
            return Err(io::Error::other("stdin and stdout must be a terminal"));
        }
        let quit = Arc::new(AtomicBool::new(false));
        for signal in [
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
            signal_hook::consts::SIGINT,
        ] {
            signal_hook::flag::register(signal, Arc::clone(&quit))?;
        }
        enable_raw_mode()?;
        let started = execute!(io::stdout(), EnterAlternateScreen, cursor::Hide)
            .and_then(|()| Terminal::new(CrosstermBackend::new(io::stdout())))
            .and_then(|mut terminal| terminal.clear().map(|()| terminal));
        match started {
            Ok(terminal) => Ok(Screen { terminal, quit }),
            Err(err) => {
                restore();
                Err(err)
            }
        }
    }

    /// Columns and rows (80x24 when the terminal does not say).
    pub fn size(&self) -> (usize, usize) {
        match self.terminal.size() {
            Ok(size) if size.width > 0 && size.height > 0 => {
                (usize::from(size.width), usize::from(size.height))
            }
            _ => (80, 24),
        }
    }

    /// Replaces the screen's content with `lines` (already fitted to the size).
    pub fn draw(&mut self, lines: &[Line<'static>]) -> io::Result<()> {
        draw(&mut self.terminal, lines)
    }

    /// Waits at most `timeout` for a key, a resize or a quit signal.
    pub fn input(&self, timeout: Duration) -> io::Result<Option<Input>> {
        // A terminal that hung up answers every ioctl with EIO: no longer a terminal.
        if self.quit.load(Ordering::Relaxed) || !io::stdin().is_terminal() {
            return Ok(Some(Input::Quit));
        }
        if !event::poll(timeout.min(QUIT_CHECK))? {
            return Ok(None);
        }
        Ok(Some(match event::read()? {
            Event::Key(key) => input_of(key),
            Event::Resize(..) => Input::Resize,
            _ => Input::Other,
        }))
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Leaves the alternate screen, shows the cursor and gives back line input.
fn restore() {
    let _ = execute!(io::stdout(), cursor::Show, LeaveAlternateScreen);
    let _ = disable_raw_mode();
}

/// `lines` as the whole screen of `terminal` (only the cells that changed are written).
fn draw<B: Backend>(terminal: &mut Terminal<B>, lines: &[Line<'static>]) -> Result<(), B::Error> {
    terminal
        .draw(|frame| frame.render_widget(Paragraph::new(lines.to_vec()), frame.area()))
        .map(|_| ())
}

/// What a key press asks for.
fn input_of(key: KeyEvent) -> Input {
    let quit = key.kind == KeyEventKind::Press
        && match key.code {
            KeyCode::Char('q' | 'Q') => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        };
    if quit {
        Input::Quit
    } else {
        Input::Other
    }
}

#[cfg(test)]
mod tests {
    use ratatui::backend::TestBackend;
    use ratatui::style::{Color, Modifier};

    use super::*;
    use crate::layout::Layout;
    use crate::render::{render, tests::sample};

    #[test]
    fn q_and_ctrl_c_quit_other_keys_do_not() {
        let key = |code, modifiers| input_of(KeyEvent::new(code, modifiers));
        assert_eq!(key(KeyCode::Char('q'), KeyModifiers::NONE), Input::Quit);
        assert_eq!(key(KeyCode::Char('Q'), KeyModifiers::SHIFT), Input::Quit);
        assert_eq!(key(KeyCode::Char('c'), KeyModifiers::CONTROL), Input::Quit);
        assert_eq!(key(KeyCode::Char('c'), KeyModifiers::NONE), Input::Other);
        assert_eq!(key(KeyCode::Esc, KeyModifiers::NONE), Input::Other);
    }

    #[test]
    fn the_screen_shows_the_frame_with_loss_in_red() {
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("test terminal");
        let layout = Layout {
            width: Some(80),
            height: Some(24),
            interval: Some(Duration::from_secs(1)),
        };
        draw(&mut terminal, &render(&sample(), &layout)).expect("draws");
        let buffer = terminal.backend().buffer();
        let row = |y: u16| -> String { (0..80).map(|x| buffer[(x, y)].symbol()).collect() };
        assert!(row(0).starts_with("gpuship top  agent 127.0.0.1:9464  up 1:02:03  every 1s"));
        assert!(
            row(2).starts_with("lost: kernel 3 sink_dropped 0"),
            "{}",
            row(2)
        );
        let kernel = &buffer[(6, 2)];
        assert_eq!(kernel.symbol(), "k");
        assert_eq!(kernel.fg, Color::Red);
        assert!(kernel.modifier.contains(Modifier::BOLD));
        assert_eq!(buffer[(16, 2)].fg, Color::Reset, "sink_dropped 0 is plain");
    }
}
