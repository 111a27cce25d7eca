'use strict';
// What a tool hands back, as an MCP CallToolResult: text content for what ran and what it said,
// image content for png/jpeg/svg results (matplotlib figures), rich results summarised as text,
// and `structuredContent` with the exit code, the fault and the exception. A tool's failure is a
// result with `isError: true` and a message, never a protocol error.

const crypto = require('crypto');

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

/** Where a stream longer than a result shows went: a workspace file to page through with
 * read_file, or nowhere. */
function spillLine(name, spill) {
  if (!spill) return `[${name} went past the capture limit; the rest was dropped]`;
  const part = spill.complete ? `all of it (${spill.bytes} bytes)` : `its first ${spill.bytes} bytes`;
  return `[${name} is longer than shown here: ${part} is in ${spill.path}; read_file it with offset/length or start_line/end_line]`;
}

/** For each stream of `r` longer than a result shows the model: the file that holds it whole,
 * `{ path, bytes, complete }`. The Sandbox's spill when the stream passed `maxOutputBytes`; else
 * the text kept in memory, written to the workspace now (it is whole). */
async function keepWhole(session, r) {
  const kept = {};
  for (const [name, textOf, spill, truncated] of [
    ['stdout', () => r.stdout, r.stdoutSpill, r.stdoutTruncated],
    ['stderr', () => r.codeStderr, r.stderrSpill, r.stderrTruncated],
  ]) {
    if (spill) kept[name] = spill;
    else if (!truncated && textOf().length > MAX_TEXT) {
      const sb = await session.sandbox();
      const path = `.kern-output/mcp-${crypto.randomUUID()}.${name}`;
      const data = Buffer.from(textOf());
      try {
        await sb.writeFile(path, data);
        kept[name] = { path, bytes: data.length, complete: true };
      } catch {
        // Refused (code made .kern-output a symlink, the disk is full): the cut stands alone.
      }
    }
  }
  return kept;
}

/** An ExecutionResult (a call, a cell, a process) as a CallToolResult; `kept`: `keepWhole`'s. */
function executionResult(r, kept = {}) {
  const lines = [];
  const stderr = r.codeStderr;
  if (r.stdout) lines.push(`stdout:\n${cut(r.stdout)}`);
  if (kept.stdout || r.stdoutTruncated) lines.push(spillLine('stdout', kept.stdout));
  if (stderr) lines.push(`stderr:\n${cut(stderr)}`);
  if (kept.stderr || r.stderrTruncated) lines.push(spillLine('stderr', kept.stderr));
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
  if (kept.stdout) structuredContent.stdoutSpill = { ...kept.stdout };
  if (kept.stderr) structuredContent.stderrSpill = { ...kept.stderr };
  if (r.files && r.files.length) structuredContent.files = r.files.map((f) => ({ path: f.path, size: f.size, change: f.change }));
  // The sandbox stopping the call, an exception or a failing exit: the model should see it failed.
  return { content, structuredContent, isError: !r.success || r.error !== null };
}

module.exports = { ToolError, errorResult, executionResult, keepWhole, text, cut, MAX_TEXT };
