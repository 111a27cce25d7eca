'use strict';
// Paths and users as envd reads them: a relative path is under the user's home (`/home/user`,
// the sandbox's workspace); the user a request names (HTTP Basic, `user:`) is the account its
// box runs as.

const path = require('path');
const { ConnectError, Code } = require('../errors.js');

/** `p` as an absolute, normalised path in the box. */
function resolvePath(s, p) {
  if (typeof p !== 'string' || p === '') throw new ConnectError('path is required', Code.InvalidArgument);
  if (p.includes('\0')) throw new ConnectError('a path holds no NUL byte', Code.InvalidArgument);
  const abs = path.posix.normalize(p.startsWith('/') ? p : path.posix.join(s.home, p));
  return abs.length > 1 ? abs.replace(/\/+$/, '') : abs;
}

/** Where `abs` lives on the host when it is in one of the sandbox's kept trees: `home` (the
 * workspace, as a workspace-relative path) or `tmp`; null elsewhere in the box. */
function keptTree(s, abs) {
  if (abs === s.home || abs.startsWith(s.home + '/')) return { tree: 'home', rel: abs.slice(s.home.length + 1) };
  if (abs === '/tmp' || abs.startsWith('/tmp/')) return { tree: 'tmp', rel: abs.slice(5) };
  return null;
}

/** The user a request names in `Authorization: Basic`, or null. */
function namedUser(value) {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)$/.exec(value || '');
  if (!m) return null;
  const text = Buffer.from(m[1], 'base64').toString('utf8');
  return text.slice(0, text.indexOf(':') < 0 ? undefined : text.indexOf(':')) || null;
}

/** The account a request names (`user` in the SDKs, sent as `Authorization: Basic`), for the
 * library's per-call `user`: the box of that command or file operation runs as it (an account
 * of the image; the library refuses one it does not have). Undefined: the sandbox's own. */
function requestUser(headers) {
  return namedUser(headers.get ? headers.get('authorization') : headers.authorization) ?? undefined;
}

module.exports = { resolvePath, keptTree, requestUser, namedUser };
