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
