// Type-level test of the published surface in ../../index.d.ts. Compiled (never run) by
// __tests__/packaging/types.test.js with `tsc --noEmit --strict`. Every export, option and overload is used with
// correct types; the `@ts-expect-error` lines must stay errors.
import {
  Chart,
  ChartValue,
  DEFAULT_TMPFS_MB,
  ExecutionError,
  ExecutionResult,
  FileInfo,
  Kernel,
  Language,
  PublishedPort,
  MountRefused,
  MountSpec,
  PerCallOptions,
  Result,
  Sandbox,
  SandboxError,
  SandboxErrorCode,
  IsolationReport,
  NotCarried,
  Checkpoint,
  IsolationControl,
  SandboxFault,
  SandboxFaultType,
  SandboxOptions,
  runCode,
  version,
  withSandbox,
} from '../..';

// ---- constants -------------------------------------------------------------------------------
const v: string = version;
const tmpMb: number = DEFAULT_TMPFS_MB;

// ---- unions / aliases ------------------------------------------------------------------------
const faultTypes: SandboxFaultType[] = [
  'timeout', 'oom', 'escape_blocked', 'killed', 'startup_failed', 'exec_failed', 'workspace_full',
];
const languages: Language[] = ['python', 'bash', 'sh', 'node', 'typescript'];
const mountA: MountSpec = '/data';
const mountB: MountSpec = ['/data', 'ro'];
const mountC: MountSpec = ['/out', 'rw'];

// ---- every SandboxOptions member -------------------------------------------------------------
const onChunk = (chunk: Buffer): void => { void chunk.length; };
const fullOpts: SandboxOptions = {
  image: 'host',
  setup: 'pip install pandas',
  workspace: '/tmp/ws',
  workspaceMount: '/home/user',
  workspaceMaxBytes: 1 << 30,
  name: 'agent-1',
  persist: false,
  persistTtlS: 3600,
  memoryMb: 512,
  cpus: 1.5,
  pids: 256,
  timeoutS: 30,
  network: false,
  egressAllow: ['pypi.org', 'files.pythonhosted.org'],
  secrets: { API_KEY: { value: 'sk-123', hosts: ['api.example.com', 'api.example.com:8443'] } },
  mounts: { '/srv/a': mountA, '/srv/b': mountB, '/srv/c': mountC },
  tmpfs: { '/tmp': `${DEFAULT_TMPFS_MB * 2}m`, '/scratch': null },
  profiles: ['vcpu:heavy', 'vgpio:leds', 'vdisk:scratch'],
  env: { FOO: 'bar' },
  maxOutputBytes: 64 * 1024 * 1024,
  enforceLimits: true,
  requireLimits: false,
  securityProfile: 'untrusted',
  apparmor: 'kern-box',
  capDrop: ['ALL'],
  user: '1000:1000',
  depsReadonly: true,
  pycCache: false,
  trackFiles: true,
  onStdout: onChunk,
  onStderr: onChunk,
  prewarm: 0,
  zygote: false,
};
const nullOpts: SandboxOptions = {
  workspaceMaxBytes: null,
  name: null,
  memoryMb: null,
  cpus: null,
  pids: null,
  tmpfs: ['/tmp', '/scratch'],
  securityProfile: null,
  apparmor: null,
  user: null,
};
const emptyOpts: SandboxOptions = { tmpfs: {}, mounts: {}, capDrop: [] };

// ---- per-call options ------------------------------------------------------------------------
const perCall: PerCallOptions = { timeoutS: 5, onStdout: onChunk, onStderr: null, onResult: (r: Result) => void r, lineBuffered: true };
const perCallEmpty: PerCallOptions = {};

// ---- result shapes ---------------------------------------------------------------------------
function inspectResult(r: ExecutionResult): void {
  const stdout: string = r.stdout;
  const stderr: string = r.stderr;
  const exitCode: number = r.exitCode;
  const durationMs: number = r.durationMs;
  const fault: SandboxFault | null = r.fault;
  if (fault !== null) {
    const t: SandboxFaultType = fault.type;
    const m: string = fault.message;
    void t; void m;
  }
  const files: FileInfo[] = r.files;
  for (const f of files) {
    const p: string = f.path;
    const size: number = f.size;
    const change: 'created' | 'modified' = f.change;
    void p; void size; void change;
  }
  const truncated: boolean = r.truncated;
  const success: boolean = r.success;
  const codeStderr: string = r.codeStderr;
  const notes: string[] = r.runtimeNotes;
  for (const res of r.results) inspectRich(res);
  const error: ExecutionError | null = r.error;
  if (error !== null) {
    const parts: string[] = [error.name, error.value, error.traceback];
    void parts;
  }
  void stdout; void stderr; void exitCode; void durationMs; void truncated; void success;
  void codeStderr; void notes;
  // @ts-expect-error success is readonly
  r.success = true;
}

function inspectRich(res: Result): void {
  const data: Record<string, string> = res.data;
  const text: string | undefined = res.text;
  const html: string | undefined = res.html;
  const md: string | undefined = res.markdown;
  const svg: string | undefined = res.svg;
  const json: string | undefined = res.json;
  const png: Buffer | null = res.png;
  const jpeg: Buffer | null = res.jpeg;
  const formats: string[] = res.formats();
  void data; void text; void html; void md; void svg; void json; void png; void jpeg; void formats;
  const latex: string | undefined = res.latex;
  const js: string | undefined = res.javascript;
  const pdf: Buffer | null = res.pdf;
  const main: boolean = res.isMainResult;
  const chart: Chart | null = res.chart;
  if (chart !== null) inspectChart(chart);
  void latex; void js; void pdf; void main;
}

function inspectChart(c: Chart): void {
  const title: string = c.title;
  switch (c.type) {
    case 'line':
    case 'scatter': {
      const scale: string | null = c.xScale;
      const ticks: ChartValue[] = c.xTicks;
      const tickLabels: string[] = c.yTickLabels;
      const unit: string | null = c.xUnit;
      void ticks; void tickLabels; void unit;
      for (const e of c.elements) {
        const label: string = e.label;
        const [x, y]: [ChartValue, ChartValue] = e.points[0];
        void label; void x; void y;
      }
      void scale;
      break;
    }
    case 'bar':
      for (const e of c.elements) {
        const v: ChartValue = e.value;
        const g: string = e.group;
        void v; void g;
      }
      break;
    case 'pie':
      for (const e of c.elements) {
        const a: ChartValue = e.angle;
        void a;
      }
      break;
    case 'box_and_whisker':
      for (const e of c.elements) {
        const m: ChartValue = e.median;
        const out: ChartValue[] = e.outliers;
        void m; void out;
      }
      break;
    case 'superchart':
      for (const sub of c.elements) inspectChart(sub);
      break;
    case 'unknown': {
      const none: [] = c.elements;
      void none;
      break;
    }
  }
  const cut: true | undefined = c.truncated;
  void title; void cut;
}

// ---- errors ----------------------------------------------------------------------------------
function classify(e: unknown): string {
  if (e instanceof MountRefused) {
    const asBase: SandboxError = e;
    return asBase.message;
  }
  if (e instanceof SandboxError) {
    const asError: Error = e;
    return asError.name;
  }
  return 'other';
}
const madeErr: SandboxError = new SandboxError('bad option');
const madeMount: MountRefused = new MountRefused('refused');

// ---- Sandbox / Kernel ------------------------------------------------------------------------
async function sandboxApi(): Promise<void> {
  const bare = new Sandbox();
  const sb: Sandbox = await new Sandbox(fullOpts).open();
  const opened: Sandbox = await bare.open();
  void opened;

  inspectResult(await sb.runCode('print(1)'));
  inspectResult(await sb.runCode('echo hi', { language: 'bash' }));
  inspectResult(await sb.runCode('echo hi', { language: 'sh', timeoutS: 3, onStdout: null, onStderr: onChunk }));
  inspectResult(await sb.runCode('console.log(1)', { language: 'node', ...perCall }));
  inspectResult(await sb.run(['ls', '-la']));
  inspectResult(await sb.run(['sleep', '1'], perCall));
  inspectResult(await sb.run(['true'], perCallEmpty));

  const w: void = await sb.writeFile('a.txt', 'hello');
  await sb.writeFile('b.bin', Buffer.from([1, 2, 3]));
  const buf: Buffer = await sb.readFile('a.txt');
  const capped: Buffer = await sb.readFile('a.txt', { maxBytes: 1024 });
  await sb.readFile('a.txt', {});
  const listed: FileInfo[] = await sb.listFiles();
  const listedSub: FileInfo[] = await sb.listFiles('out');
  const snap: void = sb.snapshot('/tmp/ws.tar.gz');
  const rest: void = sb.restore('/tmp/ws.tar.gz');
  void w; void buf; void capped; void listed; void listedSub; void snap; void rest;

  const k: Kernel = await sb.kernel();
  const k2: Kernel = await sb.kernel({ timeoutS: 10 });
  const k3: Kernel = await sb.kernel({ jupyter: "python3", timeoutS: 10 });
  const k4: Kernel = await sb.kernel({ language: 'node', cwd: 'src', env: { A: '1' } });
  const count: number | null = (await k4.runCode('1')).executionCount;
  void k3; void count;
  inspectResult(await k.runCode('x = 1'));
  inspectResult(await k.runCode('x + 1', { timeoutS: 2 }));
  inspectResult(await k.runCode('x + 2', { signal: new AbortController().signal, timeoutS: 2 }));
  inspectResult(await k.runCode('x + 3', { onResult: (res: Result) => inspectRich(res), lineBuffered: true }));
  inspectResult(await k.runCode('x + 4', { env: { A: '1' } }));
  inspectResult(await k.runCode('x + 5', { env: undefined }));
  inspectResult(await k3.runCode('x', { signal: AbortSignal.timeout(1000) }));
  const paused: void = await k.pause();
  const kernelPaused: boolean = k.paused;
  await k.resume();
  // @ts-expect-error paused is read-only
  k.paused = true;
  void paused; void kernelPaused;
  const kids: Kernel[] = await k.fork({ count: 2 });
  const left: NotCarried[] = kids[0]!.notCarried;
  const home: Sandbox = kids[0]!.sandbox;
  const written: Checkpoint = await k.checkpoint('/var/tmp/ck', { keepRunning: true });
  const sbWritten: Checkpoint = await sb.checkpoint('/var/tmp/ck2');
  const back: Kernel = await sb.restoreKernel(written.dir, { env: { TOKEN: 'x' } });
  const fresh: Sandbox = await Sandbox.fromCheckpoint(sbWritten.dir, { memoryMb: 512 });
  // @ts-expect-error checkpoint takes a directory
  await k.checkpoint();
  // @ts-expect-error notCarried is read-only
  k.notCarried = [];
  void left; void home; void back; void fresh; void written.bytes; void written.id;
  await k.close();
  await k2.close();

  const forks: Sandbox[] = await sb.fork({ count: 2 });
  const one: Sandbox[] = await sb.fork();
  // @ts-expect-error fork takes { count }
  await sb.fork(2);
  await sb.pause();
  const sbPaused: boolean = sb.paused;
  await sb.resume();
  void forks; void one; void sbPaused;

  const widened: void = await sb.setEgressAllow(['pypi.org', '.example.com']);
  void widened;
  await sb.setEgressAllow([]);
  // @ts-expect-error setEgressAllow takes a list, not one host
  await sb.setEgressAllow('pypi.org');
  const d: void = await sb.destroy();
  const c: void = await sb.close();
  void d; void c;
}

// ---- withSandbox overloads and one-shot runCode ----------------------------------------------
async function helpers(): Promise<void> {
  const n: number = await withSandbox(async (sb: Sandbox) => (await sb.runCode('1')).exitCode);
  const s: string = await withSandbox({ image: 'host', timeoutS: 5 }, async (sb) => (await sb.run(['id'])).stdout);
  const inferred = await withSandbox(nullOpts, async () => ({ ok: true as const }));
  const ok: true = inferred.ok;

  inspectResult(await runCode('print(1)'));
  inspectResult(await runCode('print(1)', { image: 'host' }));
  inspectResult(await runCode('echo 1', { ...emptyOpts, image: '/srv/rootfs', language: 'bash' }));
  void n; void s; void ok;
}

// ---- wrong usages ----------------------------------------------------------------------------
// @ts-expect-error unknown option
const badUnknown: SandboxOptions = { imagee: 'host' };
// @ts-expect-error image must be a string
const badImage: SandboxOptions = { image: 3 };
async function wrongUsages(sb: Sandbox): Promise<void> {
  // @ts-expect-error not a Language
  await sb.runCode('puts 1', { language: 'ruby' });
  // @ts-expect-error a kernel runs python, node or typescript
  await sb.kernel({ language: 'bash' });
  // @ts-expect-error not a Language (one-shot)
  await runCode('puts 1', { language: 'ruby' });
  // @ts-expect-error run takes an argv array, not a shell string
  await sb.run('ls -la');
  // @ts-expect-error unknown per-call option
  await sb.run(['ls'], { network: true });
  // @ts-expect-error the session callback cannot be null (only the per-call one can)
  new Sandbox({ onStdout: null });
  // @ts-expect-error timeoutS cannot be null
  new Sandbox({ timeoutS: null });
  // @ts-expect-error withSandbox needs a callback
  await withSandbox({ image: 'host' });
  // @ts-expect-error tmpfs size must be a string
  new Sandbox({ tmpfs: { '/tmp': 64 } });
  // @ts-expect-error mount mode is "ro" | "rw"
  new Sandbox({ mounts: { '/a': ['/b', 'rx'] } });
  // @ts-expect-error a cell's env values are strings
  await (await sb.kernel()).runCode('1', { env: { A: 1 } });
  // @ts-expect-error a cell's signal is an AbortSignal
  await (await sb.kernel()).runCode('1', { signal: { aborted: true } });
}

// ---- additions of issue 20: error codes, `await using`, isolation(), ranges and streams ------
async function issue20(): Promise<void> {
  await using sb = await new Sandbox({ image: 'host', requireIsolation: ['network', 'limits'] }).open();
  await using k = await sb.kernel();
  await k.runCode('1');
  const report: IsolationReport = await sb.isolation();
  const net: 'none' | 'allowlist' | 'host' = report.network;
  const mem: 'cgroup' | 'rlimit' | 'none' = report.limits.memory;
  const cg: 'v1' | 'v2' | null = report.cgroup;
  const part: Buffer = await sb.readFile('a.txt', { offset: 10, length: 20, maxBytes: 20 });
  const rs: import('stream').Readable = sb.createReadStream('a.txt', { offset: 1 });
  const ws: import('stream').Writable = sb.createWriteStream('b.txt');
  try {
    await sb.run(['true']);
  } catch (e) {
    if (e instanceof SandboxError) {
      const code: SandboxErrorCode = e.code;
      if (code === 'ERR_ISOLATION_UNAVAILABLE' || code === 'ERR_FILE') return;
    }
  }
  const controls: IsolationControl[] = ['filesystem', 'network', 'process', 'limits', 'seccomp'];
  // @ts-expect-error not a control
  const badControl: IsolationControl = 'apparmor';
  // @ts-expect-error not a code
  const badCode: SandboxErrorCode = 'ERR_SANDBOX';
  void [net, mem, cg, part, rs, ws, controls, badControl, badCode];
}

// TypeScript's current defaults (`tsc --init` turns on exactOptionalPropertyTypes): an option
// passed on as `undefined` and readonly arrays are accepted (types.test.js checks under both).
async function currentDefaults(passed: { signal?: AbortSignal | undefined; timeoutS?: number | undefined }) {
  const hosts = ['api.example.com'] as const;
  const argv: readonly string[] = ['python3', '-c', 'pass'];
  const opts: SandboxOptions = {
    image: undefined,
    egressAllow: hosts,
    capDrop: ['ALL'] as const,
    profiles: [] as readonly string[],
    requireIsolation: ['network'] as const,
    tmpfs: ['/scratch'] as const,
    secrets: { K: { value: 'v', hosts, headers: ['Authorization'] as const } },
    onStdout: undefined,
  };
  await using sb = await new Sandbox(opts).open();
  await sb.runCode('1', { signal: passed.signal, timeoutS: passed.timeoutS });
  await sb.run(argv, { signal: passed.signal });
  await sb.setEgressAllow(hosts);
  const p = await sb.spawn(argv, { signal: passed.signal, cwd: undefined });
  const published: PublishedPort = await p.publish(8000, { protocol: 'http', host: undefined });
  const url: string = published.url;
  void url;
  await published.close();
  await using everywhere = await sb.publish(8000, { host: '0.0.0.0' });
  const port: number = everywhere.port;
  void port;
  // @ts-expect-error only "http" is published
  await sb.publish(22, { protocol: 'tcp' });
  await p.wait();
  const t = await sb.terminal({ argv, cols: undefined });
  void t;
  await sb.kernel({ timeoutS: passed.timeoutS, language: undefined });
}

export {
  currentDefaults,
  v, tmpMb, faultTypes, languages, fullOpts, nullOpts, emptyOpts, classify, madeErr, madeMount,
  sandboxApi, helpers, wrongUsages, badUnknown, badImage, issue20,
};
