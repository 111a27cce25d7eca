'use strict';
// API keys and sandbox access tokens. Keys are compared in constant time (on their SHA-256, so
// the length leaks nothing either) and never logged: logs and metrics name a key by `keyId`.

const crypto = require('crypto');

const digest = (s) => crypto.createHash('sha256').update(String(s)).digest();

class Keys {
  #digests;

  /** `keys`: the accepted API keys; empty with `open` (`--insecure-no-auth`). */
  constructor(keys, open) {
    this.open = open;
    this.#digests = keys.map(digest);
  }

  /** The caller's key id (a short hash, safe to log), or null when `presented` is not a key. */
  check(presented) {
    if (this.open) return 'anonymous';
    if (typeof presented !== 'string' || presented === '') return null;
    const d = digest(presented);
    let found = null;
    // Every key is compared, so the time taken says nothing about which one matched.
    for (const k of this.#digests) if (crypto.timingSafeEqual(k, d) && found === null) found = keyId(presented);
    return found;
  }
}

/** A key's name in logs and metrics: not the key, not enough of its hash to test guesses against. */
function keyId(key) {
  return 'key-' + digest(key).toString('hex').slice(0, 8);
}

/** True when `presented` is the sandbox's access token. */
function tokenMatches(expected, presented) {
  return typeof presented === 'string' && crypto.timingSafeEqual(digest(expected), digest(presented));
}

function newToken() {
  return crypto.randomBytes(24).toString('hex');
}

module.exports = { Keys, keyId, tokenMatches, newToken };
