'use strict';
// Errors as the E2B SDKs read them: the REST routes answer `{ code, message }` with the HTTP
// status; the Connect services throw ConnectError with the matching Connect code.

const { ConnectError, Code } = require('@connectrpc/connect');

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const CONNECT_CODE = {
  400: Code.InvalidArgument,
  401: Code.Unauthenticated,
  403: Code.PermissionDenied,
  404: Code.NotFound,
  409: Code.AlreadyExists,
  413: Code.ResourceExhausted,
  429: Code.ResourceExhausted,
  501: Code.Unimplemented,
  502: Code.Unavailable,
  507: Code.ResourceExhausted,
};

/** `e` as a ConnectError: an ApiError keeps its meaning, a library SandboxError its message. */
function toConnectError(e) {
  if (e instanceof ConnectError) return e;
  if (e instanceof ApiError) return new ConnectError(e.message, CONNECT_CODE[e.status] ?? Code.Internal);
  if (e && e.code === 'ERR_INVALID_OPTION') return new ConnectError(e.message, Code.InvalidArgument);
  if (e && e.code === 'ERR_FILE') return new ConnectError(e.message, Code.InvalidArgument);
  if (e && (e.code === 'ERR_CLOSED' || e.code === 'ERR_NOT_OPEN')) return new ConnectError('the sandbox has ended', Code.NotFound);
  return new ConnectError(e && e.message ? e.message : String(e), Code.Internal);
}

/** `e` as an HTTP status and E2B error body. */
function toHttpError(e) {
  if (e instanceof ApiError) return { status: e.status, body: { code: e.status, message: e.message } };
  if (e && (e.code === 'ERR_INVALID_OPTION' || e.code === 'ERR_FILE')) return { status: 400, body: { code: 400, message: e.message } };
  if (e && (e.code === 'ERR_CLOSED' || e.code === 'ERR_NOT_OPEN')) return { status: 404, body: { code: 404, message: 'the sandbox has ended' } };
  return { status: 500, body: { code: 500, message: e && e.message ? e.message : String(e) } };
}

module.exports = { ApiError, toConnectError, toHttpError, ConnectError, Code };
