//! A call's stderr, and which of it kern wrote. kern's own `note:`/`warning:` lines are
//! interleaved with the workload's output in `text`, as the spec asks; `notes` and `code` say
//! which are which from what kern knows it wrote, so a workload that prints `warning: ...`
//! keeps its line in `codeStderr` and never shows up among `runtimeNotes`.

use std::ops::Range;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stderr {
    /// Everything, in the order written.
    pub text: String,
    /// kern's own lines, in order (without their newline).
    pub notes: Vec<String>,
    /// The bytes of `text` the workload wrote: kern writes its notes only before the box
    /// starts, after it ended, or (the session) after its output was collected, so they are one
    /// contiguous run.
    pub code: Range<usize>,
}

impl Stderr {
    /// Output that is all the workload's (a kernel cell's, a Jupyter cell's).
    pub fn of_code(text: String) -> Stderr {
        Stderr {
            code: 0..text.len(),
            text,
            notes: Vec::new(),
        }
    }

    /// A box's stderr: it opens with the notes kern wrote while preparing (`prepared`, before
    /// anything of the box existed) and closes with those it wrote after the box ended (the
    /// rest of `all`, the report's list). A cap that cut into kern's lines cuts the code to
    /// nothing rather than counting kern's bytes as the workload's.
    pub fn of_box(bytes: Vec<u8>, prepared: &[String], all: &[String]) -> Stderr {
        let text = crate::lang::output_text(bytes);
        let start = opening_len(&text, prepared).unwrap_or(0);
        let later = all.strip_prefix(prepared).unwrap_or_default();
        let closing = lines(later);
        let end = if text[start..].ends_with(&closing) {
            text.len() - closing.len()
        } else {
            text.len()
        };
        let notes = if all.is_empty() { prepared } else { all };
        Stderr {
            notes: notes.to_vec(),
            code: start..end,
            text,
        }
    }

    /// Appends one of the session's notes on a line of its own.
    pub fn push_note(&mut self, line: &str) {
        push_line(&mut self.text, line);
        self.notes.push(line.to_string());
    }

    /// A kernel's first cell: the notes its kern wrote while preparing stand before the
    /// cell's output, so they come off the front of the code and lead the notes.
    pub fn open_with(&mut self, prepared: &[String]) {
        let Some(skip) = opening_len(self.code(), prepared) else {
            return;
        };
        self.code.start += skip;
        let mut notes = prepared.to_vec();
        notes.append(&mut self.notes);
        self.notes = notes;
    }

    /// What the workload wrote: `text` without kern's lines.
    pub fn code(&self) -> &str {
        &self.text[self.code.clone()]
    }
}

/// Appends `line` to `text` on a line of its own.
pub fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
}

/// How many bytes at the start of `text` are kern's `prepared` lines: all of them, or all of
/// `text` when a cap cut it inside them; None when `text` does not open with them.
fn opening_len(text: &str, prepared: &[String]) -> Option<usize> {
    let opening = lines(prepared);
    if text.starts_with(&opening) {
        Some(opening.len())
    } else if opening.starts_with(text) {
        Some(text.len())
    } else {
        None
    }
}

/// Lines as kern writes them to stderr, each with its newline.
fn lines(notes: &[String]) -> String {
    notes.iter().map(|n| format!("{n}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn kerns_lines_are_told_apart_by_position_not_by_text() {
        let prepared = s(&["warning: memory cap is best-effort"]);
        let all = s(&["warning: memory cap is best-effort", "warning: fault"]);
        let out =
            "warning: memory cap is best-effort\nwarning: mine\nnote: mine too\nwarning: fault\n";
        let mut e = Stderr::of_box(out.as_bytes().to_vec(), &prepared, &all);
        assert_eq!(e.code(), "warning: mine\nnote: mine too\n");
        e.push_note("note: the session's");
        assert_eq!(
            e.notes,
            s(&[
                "warning: memory cap is best-effort",
                "warning: fault",
                "note: the session's"
            ])
        );
        assert_eq!(e.code(), "warning: mine\nnote: mine too\n");
        assert!(e.text.ends_with("warning: fault\nnote: the session's\n"));
    }

    #[test]
    fn a_cap_inside_kerns_opening_leaves_no_code() {
        let prepared = s(&["warning: memory cap is best-effort"]);
        let e = Stderr::of_box(b"warning: mem".to_vec(), &prepared, &prepared);
        assert_eq!(e.code(), "");
    }

    #[test]
    fn a_workload_line_without_newline_stays_code() {
        let mut e = Stderr::of_code("partial".into());
        e.push_note("note: n");
        assert_eq!(e.text, "partial\nnote: n\n");
        assert_eq!(e.code(), "partial");
        assert_eq!(e.notes, s(&["note: n"]));
    }

    #[test]
    fn a_kernels_first_cell_opens_with_the_prepared_notes() {
        let mut e = Stderr::of_code("warning: cap\nwarning: mine\n".into());
        e.push_note("note: results");
        e.open_with(&s(&["warning: cap"]));
        assert_eq!(e.code(), "warning: mine\n");
        assert_eq!(e.notes, s(&["warning: cap", "note: results"]));
    }
}
