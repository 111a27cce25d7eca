'use strict';
// `Volume` (an addition): named volumes that outlive any Sandbox, mounted with the `volumes`
// option. The store is native (src/volume/); these statics check their arguments and hand
// back plain, frozen `VolumeInfo` objects.

const native = require('./addon.js');
const { SandboxError, callNative } = require('./errors.js');
const { checkOptions } = require('./calls.js');
const OPTIONS = require('./options.js');

function checkName(name, how) {
  if (typeof name !== 'string' || name === '') {
    throw new SandboxError(`${how} takes the volume's name as a non-empty string, got ${name === '' ? '""' : typeof name}`);
  }
}

function info(json) {
  const v = JSON.parse(json);
  return Object.freeze(v);
}

class Volume {
  constructor() {
    throw new TypeError('Volume has only statics: Volume.create(name), Volume.list(), Volume.inspect(name), Volume.remove(name)');
  }

  /** Makes an empty volume, or with `from` a copy of another (taken while nobody writes it);
   * `sizeMb` caps what it may hold (checked before each call that writes it, as
   * `workspaceMaxBytes` is). Rejects when the name is taken. */
  static async create(name, opts) {
    checkName(name, 'Volume.create(name, opts)');
    opts = checkOptions(opts, OPTIONS.volumeCreate, 'Volume.create(name, opts): opts must be an object such as { sizeMb: 1024 }',
      (k) => `unknown Volume.create() option \`${k}\`; it takes ${OPTIONS.volumeCreate.join(', ')}`);
    const size = opts.sizeMb;
    if (size !== undefined && size !== null && typeof size !== 'number') {
      throw new SandboxError(`Volume.create({ sizeMb }) takes a whole number of MiB, got ${JSON.stringify(size)}`);
    }
    if (opts.from !== undefined && opts.from !== null && (typeof opts.from !== 'string' || opts.from === '')) {
      throw new SandboxError(`Volume.create({ from }) takes the name of the volume to copy, got ${JSON.stringify(opts.from)}`);
    }
    return info(await callNative(() => native.volumeCreate(name, size ?? null, opts.from ?? null)));
  }

  /** The volume `name`: where it is, its cap, what it holds, whether a Sandbox has it now. */
  static async inspect(name) {
    checkName(name, 'Volume.inspect(name)');
    return info(await callNative(() => native.volumeInspect(name)));
  }

  /** Every volume of this user, by name. */
  static async list() {
    return JSON.parse(await callNative(() => native.volumeList())).map((v) => Object.freeze(v));
  }

  /** Removes the volume and what it holds; rejects while a Sandbox has it mounted. */
  static async remove(name) {
    checkName(name, 'Volume.remove(name)');
    await callNative(() => native.volumeRemove(name));
  }
}

module.exports = { Volume };
