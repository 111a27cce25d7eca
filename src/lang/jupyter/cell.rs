//! One cell of a Jupyter kernel: the messages that answer an `execute_request`, mapped onto an
//! `ExecutionResult`'s parts. `stream` is stdout/stderr, `display_data` and `execute_result`
//! are results in arrival order, `error` is a traceback on stderr and a non-zero exit code. The
//! cell is done when both the shell's `execute_reply` and IOPub's `status: idle` for it have
//! arrived (they travel on different sockets, so either may come first).

use super::wire::Message;
use crate::engine::addon::launch::Stream;
use crate::lang::driver::{CellError, Item, Results};
use crate::lang::sources::CHART_MIME;
use serde_json::{json, Value};

/// What a cell produced so far.
#[derive(Debug)]
pub struct Cell {
    msg_id: String,
    results: Results,
    /// The `transient.display_id` of each kept result, for `update_display_data`.
    display_ids: Vec<Option<String>>,
    failed: bool,
    reply: Option<Value>,
    idle: bool,
    /// The kernel said it runs the code (`execute_input`, or output of it).
    executing: bool,
}

/// The cell's output, as it arrives: the caller keeps it (`capture::Capture`) and shows it.
pub type Shown = Vec<(Stream, Vec<u8>)>;

impl Cell {
    pub fn new(msg_id: String) -> Cell {
        Cell {
            msg_id,
            results: Results::default(),
            display_ids: Vec::new(),
            failed: false,
            reply: None,
            idle: false,
            executing: false,
        }
    }

    /// The execute_request's content for `code`: no stdin (so `input()` fails at once instead
    /// of waiting for a reply nobody sends), history kept as a notebook would. `stop_on_error`
    /// is off: it exists to abort cells queued behind a failing one, and ours are never queued
    /// (one at a time), while ipykernel 6 also aborts whatever arrives in a short window after
    /// an error, which a loaded machine stretched over our next cell.
    pub fn request(code: &str) -> Value {
        json!({
            "code": code,
            "silent": false,
            "store_history": true,
            "user_expressions": {},
            "allow_stdin": false,
            "stop_on_error": false,
        })
    }

    /// Sends each result to `sink` as it is kept (`onResult`); an update of a display is not
    /// sent again.
    pub fn live(&mut self, sink: Option<crate::lang::driver::ResultSink>) {
        self.results.live(sink);
    }

    fn ours(&self, m: &Message) -> bool {
        m.parent_id() == Some(self.msg_id.as_str())
    }

    fn text(&mut self, stream: Stream, text: &[u8], shown: &mut Shown) {
        if !text.is_empty() {
            shown.push((stream, text.to_vec()));
        }
    }

    /// `main`: an `execute_result` (the value of the cell's last expression), not a display.
    fn result(&mut self, content: &Value, update: bool, main: bool) {
        let Some(data) = content.get("data").and_then(Value::as_object) else {
            return;
        };
        // A figure's chart data (a python kernel's formatter: `sources::JUPYTER_CHARTS`) is the
        // result's `chart`, not one of its formats.
        let chart = data.get(CHART_MIME).filter(|c| c.is_object()).cloned();
        let own;
        let data = if data.contains_key(CHART_MIME) {
            own = data
                .iter()
                .filter(|(k, _)| k.as_str() != CHART_MIME)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<serde_json::Map<_, _>>();
            &own
        } else {
            data
        };
        let id = content
            .pointer("/transient/display_id")
            .and_then(Value::as_str)
            .map(str::to_string);
        if update {
            // An update replaces the display it names, if this cell made it; one made by an
            // earlier cell can't be changed in its result any more, so it is added here.
            if let Some(at) = id
                .as_ref()
                .and_then(|id| self.display_ids.iter().position(|d| d.as_ref() == Some(id)))
            {
                self.results.replace(at, data);
                return;
            }
        }
        if self.results.push(data, main, chart.as_ref()).is_some() {
            self.display_ids.push(id);
        }
    }

    /// Takes an IOPub message; returns the output to show now. Messages for other requests
    /// are ignored.
    pub fn on_iopub(&mut self, m: &Message) -> Shown {
        let mut shown = Vec::new();
        if !self.ours(m) {
            return shown;
        }
        let c = &m.content;
        if m.msg_type() != "status" {
            self.executing = true;
        }
        match m.msg_type() {
            "stream" => {
                let stream = match c.get("name").and_then(Value::as_str) {
                    Some("stderr") => Stream::Stderr,
                    _ => Stream::Stdout,
                };
                let text = c.get("text").and_then(Value::as_str).unwrap_or("");
                self.text(stream, text.as_bytes(), &mut shown);
            }
            "display_data" => self.result(c, false, false),
            "execute_result" => self.result(c, false, true),
            "update_display_data" => self.result(c, true, false),
            "error" => {
                self.failed = true;
                self.results.error(CellError::of(c));
                let text = traceback(c);
                self.text(Stream::Stderr, text.as_bytes(), &mut shown);
            }
            "status" if c.get("execution_state").and_then(Value::as_str) == Some("idle") => {
                self.idle = true;
            }
            // execute_input echoes the code; clear_output asks a notebook to blank its output
            // area, which a result keeps (documented); anything else is for other frontends.
            _ => {}
        }
        shown
    }

    /// Takes output the kernel's process wrote to its own stdout/stderr during the cell.
    pub fn on_output(&mut self, stream: Stream, data: &[u8]) -> Shown {
        let mut shown = Vec::new();
        self.text(stream, data, &mut shown);
        shown
    }

    /// Takes a shell message; returns output to show (a failure the kernel reported only in
    /// its reply).
    pub fn on_reply(&mut self, m: &Message) -> Shown {
        let mut shown = Vec::new();
        if !self.ours(m) || m.msg_type() != "execute_reply" {
            return shown;
        }
        let status = m.content.get("status").and_then(Value::as_str);
        if status != Some("ok") && !self.failed {
            self.failed = true;
            if status == Some("error") {
                self.results.error(CellError::of(&m.content));
            }
            let text = match status {
                Some("aborted") => "the kernel aborted this cell (an earlier one failed)\n".into(),
                _ => traceback(&m.content),
            };
            self.text(Stream::Stderr, text.as_bytes(), &mut shown);
        }
        self.reply = Some(m.content.clone());
        shown
    }

    /// The kernel's reply and its idle status have both arrived.
    pub fn done(&self) -> bool {
        self.reply.is_some() && self.idle
    }

    /// Whether the kernel has started running the code: ipykernel installs its SIGINT handler
    /// only then (before, an interrupt is ignored), and says so with `execute_input`.
    pub fn executing(&self) -> bool {
        self.executing
    }

    /// Whether the kernel said the cell failed.
    pub fn failed(&self) -> bool {
        self.failed
    }

    pub fn into_parts(mut self) -> Parts {
        let error = self.results.take_error();
        let (results, notes) = self.results.finish();
        Parts {
            exit_code: i32::from(self.failed),
            results,
            error,
            notes,
            execution_count: self
                .reply
                .as_ref()
                .and_then(|r| r.get("execution_count"))
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        }
    }
}

/// A finished (or abandoned) cell's output.
#[derive(Debug)]
pub struct Parts {
    pub exit_code: i32,
    pub results: Vec<Item>,
    /// The exception the cell raised, as the kernel named it.
    pub error: Option<CellError>,
    pub notes: Vec<String>,
    /// The reply's `execution_count` (an addition: `ExecutionResult.executionCount`).
    pub execution_count: Option<u32>,
}

/// An `error` (or a failed `execute_reply`) as text: the traceback without its colour codes,
/// or `ename: evalue` when the kernel sent none.
fn traceback(c: &Value) -> String {
    let lines: Vec<String> = c
        .get("traceback")
        .and_then(Value::as_array)
        .map(|t| t.iter().filter_map(Value::as_str).map(strip_ansi).collect())
        .unwrap_or_default();
    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut text = if lines.is_empty() {
        match (s("ename"), s("evalue")) {
            (n, v) if n.is_empty() && v.is_empty() => {
                "the kernel reported an error without a name or message (an interrupted R cell does)".into()
            }
            (n, v) => format!("{n}: {v}"),
        }
    } else {
        lines.join("\n")
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// Removes ANSI escape sequences (IPython colours its tracebacks).
pub fn strip_ansi(s: &str) -> String {
    strip_ansi_escapes::strip_str(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message as a kernel sends it (what `wire::decode` returns).
    /// One stream's text of what a cell showed.
    fn text(shown: &Shown, stream: Stream) -> String {
        let bytes: Vec<u8> = shown
            .iter()
            .filter(|(s, _)| *s == stream)
            .flat_map(|(_, d)| d.iter().copied())
            .collect();
        String::from_utf8(bytes).unwrap()
    }

    fn msg(kind: &str, parent: &str, content: Value) -> Message {
        Message {
            header: json!({"msg_type": kind, "msg_id": format!("{kind}-reply")}),
            parent_header: json!({"msg_id": parent}),
            content,
        }
    }

    const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

    /// The messages ipykernel 6.17 sends for `print("hi"); display(HTML(...)); plt.plot(); 1+1`,
    /// shaped as seen from a real kernel here (the fields we read; a tiny PNG for the figure).
    #[test]
    fn an_ipython_cell_maps_onto_a_result() {
        let mut cell = Cell::new("req-1".into());
        let mut shown = Vec::new();
        cell.on_iopub(&msg("status", "req-1", json!({"execution_state": "busy"})));
        assert!(
            !cell.executing(),
            "busy comes before ipykernel can be interrupted"
        );
        for m in [
            msg("status", "req-1", json!({"execution_state": "busy"})),
            msg(
                "execute_input",
                "req-1",
                json!({"code": "...", "execution_count": 3}),
            ),
            msg("stream", "req-1", json!({"name": "stdout", "text": "hi\n"})),
            msg(
                "stream",
                "other",
                json!({"name": "stdout", "text": "not ours\n"}),
            ),
            msg(
                "display_data",
                "req-1",
                json!({"data": {"text/plain": "<IPython.core.display.HTML object>", "text/html": "<b>x</b>"}, "metadata": {}, "transient": {}}),
            ),
            msg(
                "display_data",
                "req-1",
                json!({"data": {"text/plain": "<Figure size 640x480 with 1 Axes>", "image/png": PNG_1X1}, "metadata": {"image/png": {"width": 1, "height": 1}}, "transient": {}}),
            ),
            msg(
                "stream",
                "req-1",
                json!({"name": "stderr", "text": "warn\n"}),
            ),
            msg(
                "execute_result",
                "req-1",
                json!({"data": {"text/plain": "2"}, "metadata": {}, "execution_count": 3}),
            ),
        ] {
            shown.extend(cell.on_iopub(&m));
        }
        assert!(!cell.done() && cell.executing());
        shown.extend(cell.on_reply(&msg(
            "execute_reply",
            "req-1",
            json!({"status": "ok", "execution_count": 3}),
        )));
        assert!(!cell.done(), "idle has not arrived yet");
        cell.on_iopub(&msg("status", "req-1", json!({"execution_state": "idle"})));
        assert!(cell.done());
        assert_eq!(
            shown,
            vec![
                (Stream::Stdout, b"hi\n".to_vec()),
                (Stream::Stderr, b"warn\n".to_vec())
            ]
        );
        let p = cell.into_parts();
        assert_eq!(p.exit_code, 0);
        assert_eq!(p.results.len(), 3);
        assert_eq!(p.results[0].data["text/html"], "<b>x</b>");
        assert_eq!(p.results[1].data["image/png"], PNG_1X1);
        assert_eq!(p.results[2].data["text/plain"], "2");
        assert!(p.notes.is_empty());
        assert_eq!(
            p.results.iter().map(|r| r.main).collect::<Vec<_>>(),
            [false, false, true]
        );
        assert_eq!(p.error, None);
    }

    #[test]
    fn an_error_gives_a_clean_traceback_and_a_failure() {
        let mut cell = Cell::new("r".into());
        let shown = cell.on_iopub(&msg(
            "error",
            "r",
            json!({"ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": [
                "\u{1b}[0;31m---------------------------------------------------------------------------\u{1b}[0m",
                "\u{1b}[0;31mZeroDivisionError\u{1b}[0m                         Traceback (most recent call last)",
                "\u{1b}[0;31mZeroDivisionError\u{1b}[0m: division by zero"
            ]}),
        ));
        let reply = cell.on_reply(&msg("execute_reply", "r", json!({"status": "error", "ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": []})));
        cell.on_iopub(&msg("status", "r", json!({"execution_state": "idle"})));
        assert!(cell.done() && cell.failed());
        let p = cell.into_parts();
        assert_eq!(p.exit_code, 1);
        let stderr = text(&shown, Stream::Stderr);
        assert!(
            stderr.ends_with("ZeroDivisionError: division by zero\n"),
            "{stderr}"
        );
        assert!(!stderr.contains('\u{1b}'));
        let e = p.error.as_ref().unwrap();
        assert_eq!(
            (e.name.as_str(), e.value.as_str()),
            ("ZeroDivisionError", "division by zero")
        );
        assert!(
            e.traceback.ends_with("ZeroDivisionError: division by zero")
                && !e.traceback.contains('\u{1b}'),
            "{}",
            e.traceback
        );
        // Shown once, not again for the reply.
        assert_eq!((shown.len(), reply.len()), (1, 0));
        assert_eq!(stderr.matches("division by zero").count(), 1);
    }

    /// IRkernel reports an R error with an `error` message whose traceback is empty.
    #[test]
    fn an_r_error_without_traceback_says_what_failed() {
        let mut cell = Cell::new("r".into());
        let mut shown = cell.on_iopub(&msg(
            "error",
            "r",
            json!({"ename": "ERROR", "evalue": "object 'y' not found", "traceback": []}),
        ));
        shown.extend(cell.on_reply(&msg("execute_reply", "r", json!({"status": "error"}))));
        let p = cell.into_parts();
        assert_eq!(
            text(&shown, Stream::Stderr),
            "ERROR: object 'y' not found\n"
        );
        assert_eq!(p.exit_code, 1);
    }

    #[test]
    fn a_failure_only_in_the_reply_is_reported() {
        let mut cell = Cell::new("r".into());
        let shown = cell.on_reply(&msg("execute_reply", "r", json!({"status": "aborted"})));
        assert_eq!(shown.len(), 1);
        assert!(cell.failed());
    }

    #[test]
    fn updates_replace_their_display_and_bad_payloads_are_noted() {
        let mut cell = Cell::new("r".into());
        cell.on_iopub(&msg(
            "display_data",
            "r",
            json!({"data": {"text/plain": "0%"}, "transient": {"display_id": "p"}}),
        ));
        cell.on_iopub(&msg(
            "update_display_data",
            "r",
            json!({"data": {"text/plain": "100%"}, "transient": {"display_id": "p"}}),
        ));
        cell.on_iopub(&msg(
            "update_display_data",
            "r",
            json!({"data": {"text/plain": "elsewhere"}, "transient": {"display_id": "q"}}),
        ));
        cell.on_iopub(&msg(
            "display_data",
            "r",
            json!({"data": {"image/png": "bm90IGEgcG5n", "text/plain": "fig"}}),
        ));
        let p = cell.into_parts();
        let plain: Vec<_> = p
            .results
            .iter()
            .map(|b| b.data["text/plain"].as_str().unwrap())
            .collect();
        assert_eq!(plain, ["100%", "elsewhere", "fig"]);
        assert!(p.results[2].data.get("image/png").is_none());
        assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
    }

    #[test]
    fn ansi_codes_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[0;31mError\u{1b}[0m: x\u{1b}(B\u{1b}]0;title\u{7}"),
            "Error: x"
        );
        assert_eq!(strip_ansi("plain é"), "plain é");
    }
}
