'use strict';
// `@modelcontextprotocol/sdk` is an optional peer dependency: only `kern mcp` needs it, so it is
// required here, lazily, and its absence is one clear message with the command that installs it.

const INSTALL = 'npm install @modelcontextprotocol/sdk';

class SdkMissing extends Error {}

/** The SDK modules kern mcp uses; throws SdkMissing when the package is not installed. */
function loadSdk() {
  try {
    return {
      Server: require('@modelcontextprotocol/sdk/server/index.js').Server,
      StdioServerTransport: require('@modelcontextprotocol/sdk/server/stdio.js').StdioServerTransport,
      StreamableHTTPServerTransport: require('@modelcontextprotocol/sdk/server/streamableHttp.js').StreamableHTTPServerTransport,
      types: require('@modelcontextprotocol/sdk/types.js'),
    };
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND' || !/@modelcontextprotocol\/sdk/.test(e.message)) throw e;
    throw new SdkMissing(`kern mcp needs the MCP SDK, an optional peer dependency: ${INSTALL} `
      + '(or run it with npx -y -p kern-sandbox -p @modelcontextprotocol/sdk kern mcp)');
  }
}

module.exports = { loadSdk, SdkMissing, INSTALL };
