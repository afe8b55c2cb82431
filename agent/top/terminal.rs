//! The full-screen terminal: raw input (so `q` and Ctrl-C arrive as keys, without echo), the
//! alternate screen, hidden cursor, and putting all of it back on drop, including when a panic
//! unwinds or SIGTERM/SIGHUP ask `top` to end.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set by SIGTERM, SIGHUP and SIGINT.
static QUIT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_quit_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    QUIT.store(true, Ordering::Relaxed);
}

/// True once a quit signal arrived.
pub fn quit_requested() -> bool {
    QUIT.load(Ordering::Relaxed)
}

/// What a key press asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `q`, `Q`, Ctrl-C or end of input.
    Quit,
    /// Anything else.
    Other,
}

/// The terminal in full-screen mode; dropping it restores the terminal.
pub struct Screen {
    original: libc::termios,
}

impl Screen {
    /// Switches the terminal to raw input and the alternate screen. Fails when stdin or stdout
    /// is not a terminal.
    pub fn enter() -> io::Result<Screen> {
        // SAFETY: isatty only inspects the descriptors.
        let ttys = unsafe {
            libc::isatty(libc::STDIN_FILENO) == 1 && libc::isatty(libc::STDOUT_FILENO) == 1
        };
        if !ttys {
            return Err(io::Error::other("stdin and stdout must be a terminal"));
        }
        install_quit_handlers();
        // SAFETY: termios is plain data; tcgetattr fills it from the terminal on stdin.
        let mut original: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and a valid pointer to a termios.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut original) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut raw = original;
        // No line buffering, no echo, Ctrl-C as a byte; output processing stays on.
        raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
        raw.c_iflag &= !(libc::IXON | libc::ICRNL);
        raw.c_cc[libc::VMIN] = 0;
        raw.c_cc[libc::VTIME] = 0;
        // SAFETY: a valid descriptor and a termios derived from the terminal's own.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let screen = Screen { original };
        let mut out = io::stdout().lock();
        out.write_all(b"\x1b[?1049h\x1b[?25l\x1b[2J")?;
        out.flush()?;
        Ok(screen)
    }

    /// Columns and rows (80x24 when the terminal does not say).
    pub fn size(&self) -> (usize, usize) {
        // SAFETY: winsize is plain data; TIOCGWINSZ fills it.
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and a valid pointer to a winsize.
        let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
        if ok && size.ws_col > 0 && size.ws_row > 0 {
            (usize::from(size.ws_col), usize::from(size.ws_row))
        } else {
            (80, 24)
        }
    }

    /// Replaces the screen's content with `lines` (already fitted to the size).
    pub fn draw(&mut self, lines: &[String]) -> io::Result<()> {
        let mut frame = String::from("\x1b[H");
        for (i, line) in lines.iter().enumerate() {
            if i > 0 {
                frame.push_str("\r\n");
            }
            frame.push_str(line);
            frame.push_str("\x1b[K");
        }
        frame.push_str("\x1b[J");
        let mut out = io::stdout().lock();
        out.write_all(frame.as_bytes())?;
        out.flush()
    }

    /// Waits at most `timeout` for a key.
    pub fn key(&self, timeout: Duration) -> io::Result<Option<Key>> {
        let mut poll = libc::pollfd {
            fd: libc::STDIN_FILENO,
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        if ready < 0 {
            let err = io::Error::last_os_error();
            // A signal: the caller looks at the quit flag.
            return if err.kind() == io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(err)
            };
        }
        if ready == 0 {
            return Ok(None);
        }
        let mut buf = [0u8; 64];
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 {
            return Ok(Some(Key::Quit));
        }
        if n < 0 {
            return Ok(None);
        }
        let quit = buf[..n as usize]
            .iter()
            .any(|&b| b == b'q' || b == b'Q' || b == 0x03);
        Ok(Some(if quit { Key::Quit } else { Key::Other }))
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let mut out = io::stdout().lock();
        let _ = out.write_all(b"\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
        // SAFETY: restores the settings read in `enter` on the same descriptor.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &self.original) };
    }
}

fn install_quit_handlers() {
    for signal in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        // SAFETY: sigaction is plain data; the handler only stores to an atomic. No SA_RESTART,
        // so a blocked poll returns and the loop sees the flag.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_quit_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}
