//! Reading the Markdown tables of the docs, for the tests that hold the docs to the code
//! (`wire_docs.rs`, `doc_facts.rs`).

/// The cells of a Markdown table row (`| a | b |`), trimmed; None for other lines and the
/// separator row.
pub fn cells(line: &str) -> Option<Vec<String>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    let cells: Vec<String> = inner.split('|').map(|c| c.trim().to_string()).collect();
    if cells
        .iter()
        .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
    {
        return None;
    }
    Some(cells)
}

/// Every `code span` of a cell, in order.
pub fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}
