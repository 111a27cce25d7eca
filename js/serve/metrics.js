'use strict';
// Prometheus metrics (prom-client), served at GET /metrics on the control plane.

const client = require('prom-client');

function createMetrics() {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry, prefix: 'kern_serve_' });
  const sandboxes = new client.Gauge({ name: 'kern_serve_sandboxes', help: 'Sandboxes running now', registers: [registry] });
  const created = new client.Counter({ name: 'kern_serve_sandboxes_created_total', help: 'Sandboxes created', registers: [registry] });
  const ended = new client.Counter({ name: 'kern_serve_sandboxes_ended_total', help: 'Sandboxes ended, by why', labelNames: ['reason'], registers: [registry] });
  const requests = new client.Counter({ name: 'kern_serve_requests_total', help: 'Requests answered, by surface and status', labelNames: ['surface', 'status'], registers: [registry] });
  const latency = new client.Histogram({
    name: 'kern_serve_request_seconds',
    help: 'Time to answer a request (to the end of its stream), by surface and route',
    labelNames: ['surface', 'route'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60],
    registers: [registry],
  });
  return { registry, sandboxes, created, ended, requests, latency };
}

module.exports = { createMetrics };
