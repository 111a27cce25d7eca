'use strict';
// Reads the documentation's markdown for __tests__/packaging/readme.test.js: its fenced code blocks (with the
// `<!-- readme-test: ... -->` marker before each), the output each example claims, and its links
// and headings (GitHub's anchors). Plain string work on the files as they are: no copies of them.

const fs = require('fs');
const path = require('path');

const REPO = path.join(__dirname, '..', '..');

/** The markdown files whose examples run: README.md and docs/*.md. */
function exampleFiles() {
  const docs = path.join(REPO, 'docs');
  const inDocs = fs.existsSync(docs)
    ? fs.readdirSync(docs).filter((n) => n.endsWith('.md')).sort().map((n) => path.join('docs', n))
    : [];
  return ['README.md', ...inDocs];
}

/** The markdown files whose links are checked: the example files and CONTRIBUTING.md. */
function linkedFiles() {
  return [...exampleFiles(), 'CONTRIBUTING.md'].filter((f) => fs.existsSync(path.join(REPO, f)));
}

const MARKER = /^<!--\s*readme-test:\s*(.*?)\s*-->\s*$/;
// norun=why: not meant to run (an install line, a call to a real service); skip=why: meant to run,
// but not here; run=jest: a Jest test file, run under Jest rather than node.
const KEYS = new Set(['norun', 'skip', 'run']);

/** Parses a marker's body, `key=reason` pairs separated by ` ; `… in practice one key: the reason
 * runs to the end. Throws on an unknown key or an empty reason. */
function parseMarker(body, where) {
  const m = body.match(/^(\w+)=(.*)$/);
  if (!m) throw new Error(`${where}: readme-test marker "${body}" is not key=reason`);
  const [, key, reason] = m;
  if (!KEYS.has(key)) throw new Error(`${where}: readme-test marker key "${key}" is not one of ${[...KEYS].join(', ')}`);
  if (!reason.trim()) throw new Error(`${where}: readme-test marker ${key}= needs a reason`);
  if (key === 'run' && reason.trim() !== 'jest') throw new Error(`${where}: readme-test marker run= takes only "jest"`);
  return { [key]: reason.trim() };
}

/**
 * The fenced blocks of `rel` (a path under the repo): { file, line (1-based, the fence's), lang,
 * code, marker: { norun?, skip? } | null }. Fences open at the start of a line with ``` and an
 * optional language, and close with a bare ```.
 */
function blocks(rel) {
  const lines = fs.readFileSync(path.join(REPO, rel), 'utf8').split('\n');
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    const open = lines[i].match(/^```(\S*)\s*$/);
    if (!open) continue;
    const start = i;
    const body = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) body.push(lines[i]);
    if (i >= lines.length) throw new Error(`${rel}:${start + 1}: a code fence that never closes`);
    let j = start - 1;
    while (j >= 0 && lines[j].trim() === '') j--;
    const m = j >= 0 ? lines[j].match(MARKER) : null;
    const where = `${rel}:${start + 1}`;
    out.push({ file: rel, line: start + 1, lang: open[1], code: body.join('\n') + '\n', marker: m ? parseMarker(m[1], where) : null });
  }
  return out;
}

/** The outputs a block claims, in order: the text after `// -> ` (js, ts) or `# -> ` (bash) at
 * the end of a line. */
function claims(block) {
  const re = block.lang === 'bash' ? /\s#\s*->\s*(.+?)\s*$/ : /\s\/\/\s*->\s*(.+?)\s*$/;
  return block.code
    .split('\n')
    .map((l) => l.match(re))
    .filter(Boolean)
    .map((m) => m[1]);
}

/** Whether `claimed` appears, in order, among the lines of `stdout` (each a whole line, trailing
 * blanks ignored). Returns the first claim not found, or null. */
function missingClaim(claimed, stdout) {
  const lines = stdout.split('\n').map((l) => l.replace(/\s+$/, ''));
  let at = 0;
  for (const c of claimed) {
    const k = lines.indexOf(c, at);
    if (k < 0) return c;
    at = k + 1;
  }
  return null;
}

/** GitHub's anchor for a heading's text: lower case, inline code marks and punctuation other
 * than `-` and `_` dropped, spaces to `-`. */
function slug(text) {
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors of a markdown file's headings (outside code fences), with GitHub's -1, -2 for
 * repeats. */
function anchors(rel) {
  const seen = new Map();
  const out = new Set();
  let inFence = false;
  for (const l of fs.readFileSync(path.join(REPO, rel), 'utf8').split('\n')) {
    if (l.startsWith('```')) inFence = !inFence;
    if (inFence) continue;
    const h = l.match(/^#{1,6}\s+(.*?)\s*#*\s*$/);
    if (!h) continue;
    const base = slug(h[1]);
    const n = seen.get(base) || 0;
    seen.set(base, n + 1);
    out.add(n ? `${base}-${n}` : base);
  }
  return out;
}

/** The relative links of a markdown file (outside code fences and inline code): { line, target }. */
function links(rel) {
  const out = [];
  let inFence = false;
  fs.readFileSync(path.join(REPO, rel), 'utf8')
    .split('\n')
    .forEach((l, i) => {
      if (l.startsWith('```')) inFence = !inFence;
      if (inFence) return;
      const text = l.replace(/`[^`]*`/g, '');
      for (const m of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(m[1])) continue; // https:, mailto:
        out.push({ line: i + 1, target: m[1] });
      }
    });
  return out;
}

/** Why the link `target` in `rel` does not resolve, or null when it does. */
function brokenLink(rel, target) {
  const [p, anchor] = target.split('#');
  const file = p ? path.normalize(path.join(path.dirname(rel), p)) : rel;
  if (file.startsWith('..')) return `${target} leaves the repository`;
  if (!fs.existsSync(path.join(REPO, file))) return `${target}: no file ${file}`;
  if (anchor !== undefined && file.endsWith('.md') && !anchors(file).has(anchor)) {
    return `${target}: ${file} has no heading whose anchor is #${anchor}`;
  }
  return null;
}

module.exports = { REPO, exampleFiles, linkedFiles, blocks, claims, missingClaim, slug, anchors, links, brokenLink };
