//! Fitting the view to the terminal: how many rows each table gets ([`Rows`]), and each line
//! escaped and cut to the width ([`finish`]).
//!
//! Text from the agent (process names, XID messages, sink names, the agent's address or an
//! error) is escaped ([`crate::escape`]) here, before it is cut to the width: the only escapes
//! that reach a terminal are the backend's own.

use std::time::Duration;

use ratatui::text::{Line, Span};

use crate::frame::Frame;

/// How to lay the frame out.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Columns; None: lines are never cut.
    pub width: Option<usize>,
    /// Rows; None: every row of every table.
    pub height: Option<usize>,
    /// The refresh interval, shown in the header of the interactive view.
    pub interval: Option<Duration>,
}

/// How many rows of each table fit.
pub(crate) struct Rows {
    pub(crate) functions: usize,
    pub(crate) processes: usize,
    pub(crate) xids: usize,
}

impl Rows {
    /// Splits `available` rows (None: no limit) between the tables: XIDs get a quarter (at
    /// least two), processes at most half of the rest, functions what is left.
    pub(crate) fn fitted(frame: &Frame, available: Option<usize>) -> Rows {
        let Some(available) = available else {
            return Rows {
                functions: frame.functions.len(),
                processes: frame.processes.len(),
                xids: frame.xids.len(),
            };
        };
        let xids = frame.xids.len().min((available / 4).max(2));
        let rows = available.saturating_sub(xids.max(1));
        let processes = frame.processes.len().min(rows / 2);
        let functions = frame.functions.len().min(rows - processes);
        Rows {
            functions,
            processes: frame.processes.len().min(rows - functions),
            xids,
        }
    }
}

/// The lines cut to the layout's height, and each to its width.
pub(crate) fn finish(mut lines: Vec<Line<'static>>, layout: &Layout) -> Vec<Line<'static>> {
    if let Some(height) = layout.height {
        lines.truncate(height);
    }
    lines
        .into_iter()
        .map(|line| fit(line, layout.width))
        .collect()
}

/// The line with every piece escaped, cut to `width` (ending in `…` when cut).
fn fit(line: Line<'static>, width: Option<usize>) -> Line<'static> {
    let mut spans = Vec::with_capacity(line.spans.len());
    let mut left = width.unwrap_or(usize::MAX);
    for span in line.spans {
        if left == 0 {
            break;
        }
        let text = crate::escape::escape_controls(&span.content);
        let count = text.chars().count();
        let piece = if count > left {
            let mut piece: String = text.chars().take(left.saturating_sub(1)).collect();
            piece.push('…');
            piece
        } else {
            text.into_owned()
        };
        left = left.saturating_sub(count);
        spans.push(Span::styled(piece, span.style));
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use ratatui::style::Style;

    use super::*;

    #[test]
    fn pieces_are_escaped_then_cut_and_keep_their_style() {
        let line = Line::from(vec![
            Span::raw("comm "),
            Span::styled("\x1b[2Jevil", Style::new().red()),
        ]);
        let whole = fit(line.clone(), None);
        assert_eq!(whole.spans[1].content, "\\x1b[2Jevil");
        let cut = fit(line, Some(10));
        assert_eq!(cut.spans[0].content, "comm ");
        assert_eq!(cut.spans[1].content, "\\x1b…");
        assert_eq!(cut.spans[1].style, Style::new().red());
    }

    #[test]
    fn tables_share_the_rows_left() {
        let frame = crate::render::tests::sample();
        let rows = Rows::fitted(&frame, Some(2));
        assert_eq!((rows.functions, rows.processes, rows.xids), (1, 0, 1));
        let rows = Rows::fitted(&frame, None);
        assert_eq!((rows.functions, rows.processes, rows.xids), (1, 1, 1));
    }
}
