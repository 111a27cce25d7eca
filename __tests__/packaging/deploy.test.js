'use strict';
// rootless: no — a schema check of files in the repository, no box: once is enough
// The Kubernetes manifest docs/containers.md points at (deploy/k8s/deployment.yaml), checked offline against
// the Kubernetes API schemas that kubernetes-validate bundles (scripts/setup-deps.sh installs it
// into target/tools; no cluster here), strictly (unknown fields refused); and its securityContext
// holds exactly what the container tests (__tests__/packaging/container.test.js) measured a box needs.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { makeTempDir } = require('../helpers');

const repo = path.join(__dirname, '..', '..');
const manifest = path.join(repo, 'deploy', 'k8s', 'deployment.yaml');
const tool = path.join(repo, 'target', 'tools', 'kubernetes-validate');

function python(args) {
  if (!fs.existsSync(path.join(tool, 'kubernetes_validate', '__main__.py'))) {
    throw new Error(`kubernetes-validate is missing at ${tool}: run scripts/setup-deps.sh`);
  }
  return spawnSync('python3', args, { encoding: 'utf8', env: { ...process.env, PYTHONPATH: tool }, timeout: 120000 });
}

function validate(file) {
  return python(['-m', 'kubernetes_validate', '--strict', file]);
}

/** The manifest's documents, parsed by the PyYAML that kubernetes-validate brings. */
function load(file) {
  const r = python(['-c', 'import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))', file]);
  if (r.status !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout);
}

test('deploy/k8s/deployment.yaml is a valid apps/v1 Deployment (strict schema check, offline)', () => {
  const r = validate(manifest);
  expect(r.stderr + r.stdout).toMatch(/passed for resource deployment\/agent/);
  expect(r.status).toBe(0);
});

test('the check can fail: a misspelt field is refused', () => {
  const bad = path.join(makeTempDir('kern-deploy-'), 'bad.yaml');
  fs.writeFileSync(bad, fs.readFileSync(manifest, 'utf8').replace(/^(\s+)hostUsers: false$/m, '$1hostUser: false'));
  const r = validate(bad);
  expect(r.status).not.toBe(0);
  expect(r.stdout + r.stderr).toMatch(/'hostUser' was unexpected/);
});

test("the pod's securityContext is what the container tests measured: profile, unmasked /proc, user namespace, non-root, no capability, never privileged", () => {
  const [deployment] = load(manifest);
  const pod = deployment.spec.template.spec;
  expect(pod.hostUsers).toBe(false);
  expect(pod.securityContext).toEqual({
    runAsNonRoot: true,
    runAsUser: 1000,
    runAsGroup: 1000,
    seccompProfile: { type: 'Localhost', localhostProfile: 'kern-sandbox.json' },
  });
  expect(pod.containers).toHaveLength(1);
  expect(pod.containers[0].securityContext).toEqual({
    privileged: false,
    allowPrivilegeEscalation: false,
    readOnlyRootFilesystem: true,
    capabilities: { drop: ['ALL'] },
    procMount: 'Unmasked',
  });
  // The read-only root leaves /tmp (workspaces, scratch) to a volume.
  expect(pod.containers[0].volumeMounts).toContainEqual({ name: 'tmp', mountPath: '/tmp' });
  expect(pod.volumes).toContainEqual(expect.objectContaining({ name: 'tmp', emptyDir: expect.any(Object) }));
});

test('the container docs point at the manifest and the Dockerfile in deploy/ (not copies of them)', () => {
  const doc = fs.readFileSync(path.join(repo, 'docs', 'containers.md'), 'utf8');
  expect(doc).toContain('](../deploy/k8s/deployment.yaml)');
  expect(doc).toContain('](../deploy/Dockerfile)');
  // A copy would go stale: neither file's body is pasted into the docs or the README.
  const readme = fs.readFileSync(path.join(repo, 'README.md'), 'utf8');
  for (const text of [doc, readme]) {
    expect(text).not.toMatch(/```ya?ml\n[^`]*kind: Deployment/);
    expect(text).not.toMatch(/```dockerfile/);
  }
});

describe('deploy/k8s/serve.yaml: kern serve as a fleet', () => {
  const serveManifest = path.join(repo, 'deploy', 'k8s', 'serve.yaml');
  const routerCfg = path.join(repo, 'deploy', 'k8s', 'haproxy.cfg');
  const docs = () => load(serveManifest);
  const kind = (k) => docs().find((d) => d.kind === k);

  test('every resource is valid against the Kubernetes schemas (strict, offline)', () => {
    const r = validate(serveManifest);
    for (const res of ['secret/kern-serve-keys', 'service/kern-serve', 'statefulset/kern-serve', 'configmap/kern-serve-router', 'deployment/kern-serve-router', 'service/kern-serve-router', 'ingress/kern-serve']) {
      expect(r.stderr + r.stdout).toContain(`passed for resource ${res}`);
    }
    expect(r.status).toBe(0);
  });

  test("the router's config is deploy/k8s/haproxy.cfg as the fleet test runs it, one server per replica, each named for its pod", () => {
    const cfg = fs.readFileSync(routerCfg, 'utf8');
    expect(kind('ConfigMap').data['haproxy.cfg']).toBe(cfg);
    const sts = kind('StatefulSet');
    const n = sts.spec.replicas;
    const servers = [...cfg.matchAll(/^\s+server (\S+) "\$\{(KERN_SERVE_\d+)\}"/gm)].map((m) => [m[1], m[2]]);
    const routes = [...cfg.matchAll(/^\s+use-server (\S+) if \{ var\(txn\.sandbox\) -m beg (\S+) \}/gm)].map((m) => [m[1], m[2]]);
    expect(servers).toEqual([...Array(n).keys()].map((i) => [`kern-serve-${i}`, `KERN_SERVE_${i}`]));
    expect(routes).toEqual([...Array(n).keys()].map((i) => [`kern-serve-${i}`, `kern-serve-${i}-`]));
    const env = Object.fromEntries(kind('Deployment').spec.template.spec.containers[0].env.map((e) => [e.name, e.value]));
    for (let i = 0; i < n; i++) expect(env[`KERN_SERVE_${i}`]).toBe(`kern-serve-${i}.${sts.spec.serviceName}:49982`);
    // Each server names its sandboxes after its pod.
    const c = sts.spec.template.spec.containers[0];
    expect(c.args.join(' ')).toContain('--instance $(POD_NAME)');
    const peers = c.args[c.args.indexOf('--peers') + 1].split(',');
    expect(peers).toEqual([...Array(n).keys()].map((i) => `kern-serve-${i}=http://kern-serve-${i}.${sts.spec.serviceName}:49982`));
    expect(c.env).toContainEqual({ name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } });
    expect(c.env).toContainEqual({ name: 'KERN_API_KEYS', valueFrom: { secretKeyRef: { name: 'kern-serve-keys', key: 'KERN_API_KEYS' } } });
  });

  test("the servers' pods have the agent manifest's securityContext, which the container tests measured", () => {
    const [agent] = load(manifest);
    const pod = kind('StatefulSet').spec.template.spec;
    expect(pod.hostUsers).toBe(false);
    expect(pod.securityContext).toEqual(agent.spec.template.spec.securityContext);
    expect(pod.containers[0].securityContext).toEqual(agent.spec.template.spec.containers[0].securityContext);
  });
});
