'use strict';
// The sandbox a Connect call addresses, set by the server from the `E2b-Sandbox-Id` header
// once the sandbox's access token is checked.

const { createContextKey } = require('@connectrpc/connect');

const SANDBOX = createContextKey(null, { description: 'the sandbox a request addresses' });

module.exports = { SANDBOX };
