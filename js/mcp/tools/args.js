'use strict';
// A tool's arguments checked against its own JSON schema (the small subset the tools use:
// string, integer, number, boolean, string arrays, enums, oneOf string|array, required, no
// extra keys), so a model's mistake comes back as a tool error that says what to send.

const { ToolError } = require('../results.js');

function typeOk(schema, v) {
  if (schema.oneOf) return schema.oneOf.some((s) => typeOk(s, v));
  switch (schema.type) {
    case 'string': return typeof v === 'string' && (!schema.enum || schema.enum.includes(v));
    case 'integer': return Number.isSafeInteger(v) && v >= (schema.minimum ?? -Infinity) && v <= (schema.maximum ?? Infinity);
    case 'number': return typeof v === 'number' && Number.isFinite(v) && v >= (schema.minimum ?? -Infinity) && v <= (schema.maximum ?? Infinity)
      && (schema.exclusiveMinimum === undefined || v > schema.exclusiveMinimum);
    case 'boolean': return typeof v === 'boolean';
    case 'array': return Array.isArray(v) && v.length >= (schema.minItems ?? 0) && v.every((x) => typeOk(schema.items, x));
    default: return false;
  }
}

function describe(schema) {
  if (schema.oneOf) return schema.oneOf.map(describe).join(' or ');
  if (schema.enum) return `one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}`;
  if (schema.type === 'array') return `an array${schema.minItems ? ' (not empty)' : ''} of ${describe(schema.items)}s`;
  const range = schema.minimum !== undefined || schema.exclusiveMinimum !== undefined || schema.maximum !== undefined
    ? ` (${schema.exclusiveMinimum !== undefined ? `> ${schema.exclusiveMinimum}` : `>= ${schema.minimum ?? '-inf'}`}, <= ${schema.maximum ?? 'inf'})`
    : '';
  return `a${schema.type === 'integer' ? 'n' : ''} ${schema.type}${range}`;
}

/** `args` checked against `tool.inputSchema`; returns them (an empty object when absent). */
function checkArgs(tool, args) {
  const schema = tool.inputSchema;
  const a = args ?? {};
  if (typeof a !== 'object' || Array.isArray(a)) throw new ToolError(`${tool.name}: arguments must be an object`);
  for (const k of Object.keys(a)) {
    if (!Object.hasOwn(schema.properties, k)) {
      throw new ToolError(`${tool.name}: unknown argument "${k}"; it takes ${Object.keys(schema.properties).join(', ')}`);
    }
  }
  for (const k of schema.required || []) {
    if (a[k] === undefined || a[k] === null) throw new ToolError(`${tool.name}: "${k}" is required (${describe(schema.properties[k])})`);
  }
  for (const [k, v] of Object.entries(a)) {
    if (v === undefined || v === null) continue;
    if (!typeOk(schema.properties[k], v)) throw new ToolError(`${tool.name}: "${k}" must be ${describe(schema.properties[k])}`);
  }
  return a;
}

module.exports = { checkArgs };
