'use strict';
// What a tool hands back, as an MCP CallToolResult: text content for what ran and what it said,
// image content for png/jpeg/svg results (matplotlib figures), rich results summarised as text,
// and `structuredContent` with the exit code, the fault and the exception. A tool's failure is a
// result with `isError: true` and a message, never a protocol error.

/** The most text of one stream a result carries back to the model; the rest is cut with a note. */
const MAX_TEXT = 100_000;

class ToolError extends Error {}

function cut(s) {
  if (s.length <= MAX_TEXT) return s;
  return `${s.slice(0, MAX_TEXT)}\n[... ${s.length - MAX_TEXT} more characters cut]`;
}

const text = (t) => ({ type: 'text', text: t });

/** A tool's error as the model sees it. */
function errorResult(message, structured) {
  const r = { content: [text(message)], isError: true };
  if (structured) r.structuredContent = structured;
  return r;
}

/** The images and summaries of a call's rich results. */
function richContent(results) {
  const out = [];
  for (const r of results) {
    if (r.png) out.push({ type: 'image', data: r.png.toString('base64'), mimeType: 'image/png' });
    else if (r.jpeg) out.push({ type: 'image', data: r.jpeg.toString('base64'), mimeType: 'image/jpeg' });
    else if (r.svg) out.push({ type: 'image', data: Buffer.from(r.svg).toString('base64'), mimeType: 'image/svg+xml' });
    if (r.chart) out.push(text(`chart: ${cut(JSON.stringify(r.chart))}`));
    if (r.isMainResult && r.text !== undefined) out.push(text(`result: ${cut(r.text)}`));
    else if (!r.png && !r.jpeg && !r.svg) {
      // Other display data (html, json, latex...): its plain text if any, else what it was.
      if (r.text !== undefined) out.push(text(`display: ${cut(r.text)}`));
      else out.push(text(`display: ${r.formats().join(', ')} (not shown)`));
    }
  }
  return out;
}

/** Where a stream that passed the capture limit went: its spill file, to page through with
 * read_file, or nowhere. */
function spillLine(name, spill) {
  if (!spill) return `[${name} went past the capture limit; the rest was dropped]`;
  const part = spill.complete ? `all of it (${spill.bytes} bytes)` : `its first ${spill.bytes} bytes`;
  return `[${name} went past the capture limit: ${part} is in ${spill.path}; read_file it with offset/length or start_line/end_line]`;
}

/** An ExecutionResult (a call, a cell, a process) as a CallToolResult. */
function executionResult(r) {
  const lines = [];
  const stderr = r.codeStderr;
  if (r.stdout) lines.push(`stdout:\n${cut(r.stdout)}`);
  if (r.stdoutTruncated) lines.push(spillLine('stdout', r.stdoutSpill));
  if (stderr) lines.push(`stderr:\n${cut(stderr)}`);
  if (r.stderrTruncated) lines.push(spillLine('stderr', r.stderrSpill));
  if (r.error) lines.push(`error: ${r.error.name}: ${r.error.value}`);
  if (r.fault) lines.push(`fault: ${r.fault.type}: ${r.fault.message}`);
  lines.push(`exit code: ${r.exitCode}${r.signal ? ` (${r.signal})` : ''}`);
  const content = [text(lines.join('\n'))];
  content.push(...richContent(r.results || []));
  const structuredContent = {
    exitCode: r.exitCode,
    success: r.success,
    fault: r.fault ? { type: r.fault.type, message: r.fault.message } : null,
    error: r.error ? { name: r.error.name, value: r.error.value } : null,
  };
  for (const k of ['stdoutSpill', 'stderrSpill']) if (r[k]) structuredContent[k] = { ...r[k] };
  if (r.files && r.files.length) structuredContent.files = r.files.map((f) => ({ path: f.path, size: f.size, change: f.change }));
  // The sandbox stopping the call, an exception or a failing exit: the model should see it failed.
  return { content, structuredContent, isError: !r.success || r.error !== null };
}

module.exports = { ToolError, errorResult, executionResult, text, cut, MAX_TEXT };
