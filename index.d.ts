// Type definitions for kern-sandbox: run code written by an LLM or agent in a fresh, isolated
// Linux box on the local machine, with no daemon.
//
// One paragraph per member. The detail behind each (every bound, refusal and edge case) is in
// docs/reference.md, under the member's name; the figures are in BENCHMARKS.md; how to use it
// all is docs/guide.md. Members beyond the published spec start with "ADDITION:".
//
// `Buffer` appears in this surface (chunk callbacks, `readFile`, decoded images), so TypeScript
// needs `@types/node` (`npm i -D @types/node`). There is deliberately no
// `/// <reference types="node" />`: without `@types/node` it only adds an error beside the
// `Buffer` errors, which already say what to install.

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/** Why the sandbox (not the user's code) ended or blocked a call; always data on an
 * `ExecutionResult`, never thrown. */
export type SandboxFaultType = "timeout" | "oom" | "escape_blocked" | "killed" | "startup_failed" | "exec_failed" | "workspace_full";

/** A sandbox-level fault: its kind and a human-readable explanation. */
export interface SandboxFault {
  type: SandboxFaultType;
  message: string;
}

/** One workspace file that a call created or changed. */
export interface FileInfo {
  /** Path relative to the workspace root. */
  path: string;
  /** Size in bytes. */
  size: number;
  /** Whether the call created the file or modified an existing one. */
  change: "created" | "modified";
}

/** A rich value a cell produced, as Jupyter display data: the value of a final bare expression,
 * each `display(obj)`, each matplotlib figure still open at the end. `data` maps a MIME type to
 * its payload (text and JSON as strings, images as base64); the getters read single entries.
 * IPython's display rules apply; results travel on their own channel, never parsed out of
 * stdout; a call keeps at most 10,000 results and 128 MiB of them (docs/reference.md,
 * "Result"). */
export class Result {
  /** MIME type -> payload, in a null-prototype object (the box picks the keys): use
   * `Object.hasOwn(data, type)`, `type in data` or `formats()`. Only MIME type names are
   * admitted; others are dropped with a runtime note. */
  data: Record<string, string>;
  /** The `text/plain` entry, if present. */
  readonly text?: string | undefined;
  /** The `text/html` entry, if present. */
  readonly html?: string | undefined;
  /** The `text/markdown` entry, if present. */
  readonly markdown?: string | undefined;
  /** The `image/svg+xml` entry, if present. */
  readonly svg?: string | undefined;
  /** The `application/json` entry (as JSON text), if present. */
  readonly json?: string | undefined;
  /** The `image/png` entry, base64-decoded, or null when absent. */
  readonly png: Buffer | null;
  /** The `image/jpeg` entry, base64-decoded, or null when absent. */
  readonly jpeg: Buffer | null;
  /** Every MIME type present in `data`. */
  formats(): string[];
  /** ADDITION: the `text/latex` entry, if present. */
  readonly latex?: string | undefined;
  /** ADDITION: the `application/javascript` entry, if present. */
  readonly javascript?: string | undefined;
  /** ADDITION: the `application/pdf` entry, base64-decoded, or null when absent. */
  readonly pdf: Buffer | null;
  /** ADDITION: true for the value of the cell's last expression (at most one per cell), false
   * for `display()` output and figures; `results` keeps production order, so the main result is
   * not always last. */
  isMainResult: boolean;
  /** ADDITION: what a matplotlib figure plots, as plain numbers and strings, read in the box
   * from the figure as it is shown; null for other results, figures without data, and Jupyter
   * kernels. See `Chart`. */
  chart: Chart | null;
}

/** ADDITION: the kinds of `Chart`, as E2B's chart extractor names them. */
export type ChartType = "line" | "scatter" | "bar" | "pie" | "box_and_whisker" | "superchart" | "unknown";

/** A number of a chart (null for NaN and infinities, which JSON can't carry), or a string (a
 * categorical value, an ISO date for a `datetime`). */
export type ChartValue = number | string | boolean | null;

/** ADDITION: what one Axes of a figure shows; texts as matplotlib has them (`""` when unset),
 * each cut at 1000 characters. */
export interface ChartBase {
  title: string;
  xLabel: string;
  yLabel: string;
  /** The unit an axis label names, `"Time (s)"` or `"Time [s]"` -> `"s"`; null when none. */
  xUnit: string | null;
  yUnit: string | null;
  /** Set when the figure held more than the 10,000 values read from one figure; a chart over
   * 4 MiB of JSON is dropped (`chart: null`) with a runtime note. */
  truncated?: true | undefined;
}

/** `plt.plot()` lines or `plt.scatter()` points: one element per call, `label` its legend label
 * (`""` when none), `points` its `[x, y]` pairs in order. */
export interface PointChart extends ChartBase {
  type: "line" | "scatter";
  /** The axes' scales: `"datetime"` for dates, `"categorical"` for strings, else matplotlib's
   * (`"linear"`, `"log"`, `"symlog"`, `"logit"`, ...); null if it can't be read. */
  xScale: string | null;
  yScale: string | null;
  /** The tick positions matplotlib chose (ISO dates on a `datetime` axis) and their labels as
   * drawn; `[]` if they can't be read. */
  xTicks: ChartValue[];
  yTicks: ChartValue[];
  xTickLabels: string[];
  yTickLabels: string[];
  elements: { label: string; points: [ChartValue, ChartValue][] }[];
}

/** `plt.bar()`/`barh()`/`hist()`: one element per bar; `label` its tick label (else its
 * position), `group` its bar call's legend label, `value` its height (width for `barh`). */
export interface BarChart extends ChartBase {
  type: "bar";
  elements: { label: string; group: string; value: ChartValue }[];
}

/** `plt.pie()`: one element per wedge; `angle` in degrees (rounded to 8 significant digits
 * less its decimal exponent, as E2B rounds them: 324, not 323.99999999999994), `radius` in
 * data units. */
export interface PieChart extends ChartBase {
  type: "pie";
  elements: { label: string; angle: ChartValue; radius: ChartValue }[];
}

/** `plt.boxplot()`: one element per box, with the statistics matplotlib drew it from. */
export interface BoxAndWhiskerChart extends ChartBase {
  type: "box_and_whisker";
  elements: {
    label: string;
    min: ChartValue;
    firstQuartile: ChartValue;
    median: ChartValue;
    thirdQuartile: ChartValue;
    max: ChartValue;
    outliers: ChartValue[];
  }[];
}

/** An Axes whose content is none of the above, or a mix of them (lines and bars together). */
export interface UnknownChart extends ChartBase {
  type: "unknown";
  elements: [];
}

/** A figure with several Axes holding data: one chart per Axes, in the figure's order; `title`
 * is the figure's `suptitle` (`""` when none). */
export interface SuperChart {
  type: "superchart";
  title: string;
  elements: (PointChart | BarChart | PieChart | BoxAndWhiskerChart | UnknownChart)[];
  truncated?: true | undefined;
}

/** ADDITION: a figure's chart data (`Result.chart`). A figure with one Axes is that Axes' chart
 * (its title falls back to the figure's `suptitle`). */
export type Chart = PointChart | BarChart | PieChart | BoxAndWhiskerChart | UnknownChart | SuperChart;

/** ADDITION: the exception a cell raised (`ExecutionResult.error`): its class name, its message
 * and the traceback Python prints (the cell's frames only, ANSI colours removed); each field cut
 * at 1 MiB. */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

/** ADDITION: one change seen by `Sandbox.watch()`. */
export interface WatchEvent {
  /** `overflow`: events were lost here (the watch's queue or the kernel's was full). */
  type: "create" | "modify" | "delete" | "rename" | "overflow";
  /** Workspace-relative (`""` for an overflow). */
  path: string;
  /** A `rename`'s old path. */
  oldPath?: string | undefined;
  isDir: boolean;
  /** An `overflow`'s count of lost events; null when the kernel's queue overflowed. */
  dropped?: number | null | undefined;
}

/** ADDITION: an open `Sandbox.watch()`: iterate it with `for await`; leaving the loop,
 * `close()` or the Sandbox's `close()` end it. */
export class WorkspaceWatch implements AsyncIterable<WatchEvent> {
  private constructor();
  [Symbol.asyncIterator](): AsyncIterator<WatchEvent>;
  /** Ends the watch: its inotify instance goes now; what was queued is still delivered. */
  close(): void;
  [Symbol.asyncDispose](): Promise<void>;
}

/** ADDITION: a box's port published on the host (`publish()`): HTTP and WebSocket through a
 * URL with a token. */
export class PublishedPort {
  private constructor();
  /** `http://127.0.0.1:<port>/?kern_token=<token>`: `fetch(url)` or a browser works as is (the
   * first answer sets a cookie, so the page's own requests need no token). Without the token
   * (in the URL, the `X-Kern-Token` header or that cookie) a connection is refused with 403;
   * the box's server never sees the token. */
  readonly url: string;
  /** 64 hex characters, new for each publish(). */
  readonly token: string;
  /** The host's address and port it listens on. */
  readonly host: string;
  readonly port: number;
  /** Revokes it: resolves once the host's port is closed and every connection through it
   * ended. A process's port also closes when the process ends, and every port when its
   * Sandbox closes. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** ADDITION: `publish()`'s options. */
export interface PublishOptions {
  /** `"http"` (the default, and the only one): HTTP/1.1 and WebSocket. For raw TCP from this
   * program, use `SandboxProcess.connect()`. */
  protocol?: "http" | undefined;
  /** The host's address to listen on: `"127.0.0.1"` (the default), `"::1"`, or `"0.0.0.0"` to
   * let other machines in (each still needs the token). */
  host?: string | undefined;
}

/** ADDITION: a named volume (`Volume`), as `create()`, `inspect()` and `list()` show it. */
export interface VolumeInfo {
  readonly name: string;
  /** The host directory boxes see at the volume's `path`. */
  readonly path: string;
  /** Its cap in MiB (`Volume.create(name, { sizeMb })`); null: none. */
  readonly sizeMb: number | null;
  /** When it was made, in milliseconds since the epoch. */
  readonly createdAt: number;
  /** What it holds as `du` counts (each entry at least 4 KiB), null when some of it could not
   * be read. */
  readonly usedBytes: number | null;
  /** A Sandbox (or `kern run`) has it mounted now. */
  readonly inUse: boolean;
}

/** ADDITION: named volumes: directories that outlive every box and Sandbox, kept per user
 * (`$KERN_VOLUMES`, else `$KERN_HOME/volumes`, else `~/.local/share/kern-sandbox/volumes`),
 * mounted by name with the `volumes` option (`kern volume` and `kern run --volume` on the
 * command line). A box sees one as it sees a `"rw"` mount: nosuid, nodev, set-id bits cleared
 * after each box, symlinks resolved in the box; nothing of the host beyond it. */
export class Volume {
  private constructor();
  /** Makes an empty volume, or with `from` a copy of the volume of that name: taken while no
   * Sandbox writes it (refused otherwise), files reflinked where the filesystem can, symlinks
   * as links, never set-id bits, devices, FIFOs and sockets left out; a branch to try something
   * destructive on. Rejects when the name is taken. `sizeMb` (a whole number, 1 to 8,589,934,591) caps what it
   * holds: checked before each call of a Sandbox that writes it, as `workspaceMaxBytes` is (the
   * call that crosses it completes; later ones get a `workspace_full` fault naming the volume).
   * A name is 1-64 letters, digits, `_`, `.` or `-`, starting with a letter or digit. */
  static create(name: string, opts?: { sizeMb?: number | null | undefined; from?: string | null | undefined }): Promise<VolumeInfo>;
  static inspect(name: string): Promise<VolumeInfo>;
  /** Every volume of this user, by name. */
  static list(): Promise<VolumeInfo[]>;
  /** Removes the volume and what it holds; rejects while a Sandbox has it mounted. */
  static remove(name: string): Promise<void>;
}

/** ADDITION: how a Sandbox mounts a volume (`volumes`): at `path`; read-write as its only
 * writer (the default), `readonly` (any number, beside a writer: they see its writes), or
 * `shared` (read-write beside other writers that all said `shared`). */
export type VolumeMount = string | { path: string; readonly?: boolean | undefined; shared?: boolean | undefined };

/** ADDITION: a stream kept whole in the workspace (`spillOutput`). */
export interface OutputSpill {
  /** Workspace-relative: `readFile(path, { offset, length })` pages through it. */
  path: string;
  /** Its size: the stream's, from its first byte, when `complete`. */
  bytes: number;
  /** false: the file stops at `bytes` (`workspaceMaxBytes`, or output a resident box's
   * processes wrote on after the call; a `note:` says which). */
  complete: boolean;
}

/** What one `runCode()`/`run()` call (or kernel cell, or process) produced. `fault` says whether
 * the sandbox intervened; `exitCode`, `stdout` and `stderr` say what the code did; `success` is
 * true only when both are clean. */
export class ExecutionResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  /** Wall-clock duration of the call in milliseconds. */
  durationMs: number;
  /** null exactly when the sandbox did not intervene: a non-zero `exitCode` with a null `fault`
   * is the code failing on its own. */
  fault: SandboxFault | null;
  /** Workspace files this call created or modified (`[]` when `trackFiles` is false, and for
   * kernel cells). */
  files: FileInfo[];
  /** stdout or stderr reached `maxOutputBytes` and the excess was dropped
   * (`stdoutTruncated || stderrTruncated`). */
  truncated: boolean;
  /** ADDITION: stdout reached `maxOutputBytes` and the excess was dropped. */
  stdoutTruncated: boolean;
  /** ADDITION: stderr reached `maxOutputBytes` and the excess was dropped. */
  stderrTruncated: boolean;
  /** ADDITION: with `spillOutput`, where stdout went whole once it passed `maxOutputBytes`;
   * null when it did not, or when the file could not be written (a `warning:` says why). */
  stdoutSpill: OutputSpill | null;
  /** ADDITION: the same for stderr. */
  stderrSpill: OutputSpill | null;
  /** ADDITION: the name of the signal that ended the process (`"SIGKILL"`, ...; `exitCode` is
   * then 128 + its number), or null when it exited by itself; a box kern ended (timeout, abort,
   * `close()`, memory cap) says `"SIGKILL"`. */
  signal: string | null;
  /** Rich MIME-typed values of a python `runCode` or kernel cell (see `Result`), in order; `[]`
   * for shells and `run()`. ADDITION: node and typescript cells have them too. */
  results: Result[];
  /** ADDITION: the exception a python, node or typescript cell raised (its traceback is on
   * `stderr` too), else null: a clean run, shells, `run()`, a call with a `fault`, and a python
   * `SystemExit` (an exit, carried by `exitCode`). */
  error: ExecutionError | null;
  /** ADDITION: a kernel cell's number, counted from 1 (a Jupyter kernel's own
   * `execution_count`); null for a one-shot `runCode`/`run`. */
  executionCount: number | null;
  /** `exitCode === 0` and `fault === null`. */
  readonly success: boolean;
  /** Exactly what the code wrote to stderr: `stderr` minus the lines the runtime wrote itself
   * (known as data, never matched by text). Show this to a model rather than `stderr`. */
  readonly codeStderr: string;
  /** The lines the runtime wrote itself (`note:`/`warning:`), one per element, in order: the
   * counterpart of `codeStderr`; `stderr` keeps both, interleaved as written. */
  readonly runtimeNotes: string[];
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/** Thrown for caller or configuration mistakes: a bad argument, a refused mount, a missing
 * runtime, an unsupported combination of options. What happens to running code is never
 * thrown: it is `ExecutionResult.fault`. */
export class SandboxError extends Error {
  /** ADDITION: what kind of mistake, as a stable code (`SandboxErrorCode`), on every
   * SandboxError the package throws; the message stays the human explanation. */
  readonly code: SandboxErrorCode;
}

/** ADDITION: `SandboxError.code`. A code is never renamed and never changes meaning; new ones
 * may be added. `ERR_INVALID_OPTION` a bad option, argument or call state; `ERR_MOUNT_REFUSED`
 * an unsafe mount; `ERR_NOT_OPEN`/`ERR_CLOSED` a call before `open()` or after the end;
 * `ERR_FILE` a workspace path refused or missing; `ERR_IMAGE` an image not resolved or pulled;
 * `ERR_SETUP_FAILED` `setup` failed (with `exitCode`, `stderrTail`); `ERR_ISOLATION_UNAVAILABLE`
 * a required control is not in force; `ERR_HOST_UNSUPPORTED` this host or container can't;
 * `ERR_CONNECTION_REFUSED` nothing accepts on `connect()`'s port; `ERR_RUNTIME` the kern runtime
 * or the host failed; `ERR_INTERNAL` a bug. Each in detail: docs/reference.md, "Error codes". */
export type SandboxErrorCode =
  | "ERR_INVALID_OPTION"
  | "ERR_MOUNT_REFUSED"
  | "ERR_NOT_OPEN"
  | "ERR_CLOSED"
  | "ERR_FILE"
  | "ERR_IMAGE"
  | "ERR_SETUP_FAILED"
  | "ERR_ISOLATION_UNAVAILABLE"
  | "ERR_HOST_UNSUPPORTED"
  | "ERR_CONNECTION_REFUSED"
  | "ERR_RUNTIME"
  | "ERR_INTERNAL";

/** Thrown when a requested host mount is unsafe: a sensitive host source, a `workspace` the box
 * must not write, or a target path that is relative or escapes. */
export class MountRefused extends SandboxError {}

// ---------------------------------------------------------------------------------------------
// Isolation, as measured
// ---------------------------------------------------------------------------------------------

/** ADDITION: a control `requireIsolation` can insist on. */
export type IsolationControl = "filesystem" | "network" | "process" | "limits" | "seccomp";

/** ADDITION: what `Sandbox.isolation()` measured in a box of this Sandbox (not what the options
 * asked for). */
export interface IsolationReport {
  /** The box has its own mount namespace (its root is the image, not the host's). */
  filesystem: boolean;
  /** `"none"`: its own network namespace with only `lo`; `"allowlist"`: out only through the
   * `egressAllow` proxy; `"host"`: the host's network namespace. */
  network: "none" | "allowlist" | "host";
  /** The box has its own PID namespace (it sees only its own processes). */
  process: boolean;
  /** How each cap is held: `"cgroup"` (read back from the box's cgroup), `"rlimit"` (the
   * best-effort fallback), `"none"` (not asked for, or not in force). */
  limits: {
    memory: "cgroup" | "rlimit" | "none";
    pids: "cgroup" | "rlimit" | "none";
    cpu: "cgroup" | "none";
  };
  /** `"untrusted"`: the `securityProfile: "untrusted"` filters; `"standard"`: kern's set-id
   * filter only (every box has it); `"none"`: no seccomp filter. */
  seccomp: "none" | "standard" | "untrusted";
  /** The box runs in a user namespace of its own that does not map the host's ids one to one. */
  userns: boolean;
  /** The cgroup hierarchy that holds the box's caps, or null when no cgroup does. */
  cgroup: "v1" | "v2" | null;
  /** ADDITION: the same report for each route a call of this Sandbox can take, each measured in
   * the box that route really gives; the top-level fields stay a fresh box's. Absent inside a
   * route's own report. */
  routes?: Partial<Record<IsolationRoute, Omit<IsolationReport, "routes">>> | undefined;
}

/** ADDITION: a way a call reaches a box (`IsolationReport.routes`). */
export type IsolationRoute = "fresh" | "zygote" | "prewarm" | "kernel" | "resident" | "spawn" | "terminal";

// ---------------------------------------------------------------------------------------------
// Sandbox options, grouped as src/session/options/ reads them: runtime, filesystem, limits,
// network, security (then profiles and the callbacks). Every bound: docs/reference.md.
// ---------------------------------------------------------------------------------------------

/** The value side of a `mounts` entry: a box target path, or a `[target, mode]` pair. */
export type MountSpec = string | [target: string, mode: "ro" | "rw"];

/** Options for `new Sandbox()`, `withSandbox()` and the one-shot `runCode()`. Everything is safe
 * by default; each option that loosens isolation says so. Mistakes throw a `SandboxError`
 * naming the option, from the constructor or `open()`; combinations this release can't build
 * are refused, never ignored. */
export interface SandboxOptions {
  // -- runtime (options/runtime.rs): what runs, and how ---------------------------------------

  /** The root filesystem boxes run from (default `"python:3.12-slim"`): a registry reference
   * (pulled on the first `open()`, every digest verified, then cached), an absolute path to an
   * OCI layout, a `docker save`/OCI archive or a root filesystem directory, or `"host"` (the
   * host's system directories, read-only, never homes or credentials). The image's `Env` and
   * `USER` apply. See docs/images.md. */
  image?: string | undefined;
  /** A shell command run once during `open()`, in a box with network access
   * (`setupNetwork`), to install dependencies (`"pip install pandas"`); installers write into
   * `/workspace/.deps`, which later boxes find on `PYTHONPATH`, `NODE_PATH` and `PATH`. It
   * runs nothing a box could have written; its limit is 900 s (`KERN_SETUP_TIMEOUT_S`). A
   * failure makes `open()` throw (`ERR_SETUP_FAILED`, with `exitCode` and `stderrTail`).
   * Addition: skipped, with a note, when a kept `workspace`'s `.deps` still holds what the same
   * setup installed (same command, image and options, the same content in the workspace or
   * mount paths the command names, `.deps` unchanged since); remove `.deps` to force a run. */
  setup?: string | undefined;
  /** Keep a single resident box and run each call inside it (`kern exec`) instead of a fresh
   * box; requires `name` and `workspace`, outlives `close()`, ends by `destroy()`, `kern stop` or
   * `persistTtlS`. Weaker than a fresh box: scratch and leftover processes persist between calls
   * (each call still gets its own Landlock domain and hidden `/proc`). Not with `egressAllow`,
   * `prewarm`, `kernel()` or `pycCache: true`. Default false. */
  persist?: boolean | undefined;
  /** The stable identity of a `persist` sandbox: processes naming the same one share its box.
   * 1-64 letters, digits, `_`, `.` or `-`, starting with a letter or digit; only with
   * `persist: true`. */
  name?: string | null | undefined;
  /** Lifetime of the resident `persist` box in seconds from its start, enforced by the box's
   * own monitor. Default 3600, at most a year; only with `persist: true`. */
  persistTtlS?: number | undefined;
  /** Extra environment variables for the code, over PATH, HOME, LANG and HOSTNAME (yours win);
   * sent over the runtime's private socket, never argv or a file. The host's environment never
   * reaches a box. Bounded by what Linux can exec; large data belongs in a workspace file. */
  env?: Record<string, string> | undefined;
  /** Mount what `setup` installed (`/workspace/.deps`) read-only in every box, so one call
   * cannot tamper with dependencies later calls load. Default true. */
  depsReadonly?: boolean | undefined;
  /** Byte-compile the image's Python library (and the results driver) once per image and
   * mount it read-only in every box, so an image shipped without `.pyc` files doesn't recompile
   * what it imports at each start, nor python `runCode` its driver. Built in the background after the first `open()` from the image alone; results are
   * the same either way. Default true. */
  pycCache?: boolean | undefined;
  /** true (default): `result.files` lists what each call created or modified: the workspace is
   * watched from `open()` (inotify), so a call costs what it changed (a 10,000-file workspace:
   * 0.5 ms a call here, where walks cost 50 ms and more); with `workspaceMaxBytes`, or where watches can't
   * be had, it is scanned before and after each call (stops at 100,000 entries).
   * false: `result.files` is always `[]`, and nothing is watched or scanned. */
  trackFiles?: boolean | undefined;
  /** Number of boxes started ahead, each with an idle interpreter, so a python `runCode` takes
   * one instead of starting its own. Each serves one call and is discarded, so isolation is
   * unchanged; calls that stream, use another language or another posture start normally. An
   * integer 0 to 64, default 0 (each slot holds an interpreter for the session's life). */
  prewarm?: number | undefined;
  /** ADDITION: fork each eligible python `runCode` cell's box from a zygote, an interpreter
   * started at `open()` in a box of its own that never runs a cell; each fork makes its own
   * namespaces and takes a fresh box's posture before the cell runs. Forks share the hash
   * secret, ASLR layout and stack canary. Refused with `persist`, `untrusted`, `apparmor`, a
   * kept capability, `user`, `network`, `egressAllow` or a writable mount. Default false. */
  zygote?: boolean | undefined;
  /** ADDITION: host memory, in MiB, for boxes kept ready beyond the minimum (two runtimes in
   * their cgroups, and with `zygote` two forks). Each call that finds none ready raises the
   * number kept, so N calls in flight soon find N ready; 2 s without a call brings it back to
   * the minimum. A ready runtime counts 1.5 MiB, a zygote fork 4 MiB (half the budget
   * each with `zygote`), at most 64 of a kind. Integer 0 to 4096, default 64. */
  spareMemoryMb?: number | undefined;

  // -- filesystem (options/filesystem.rs): the workspace, binds, scratch -----------------------

  /** An absolute host directory to use as the persistent workspace, created if missing and never
   * removed. Omitted: a temporary one, made by `open()` and removed by `close()` (or by a later
   * `open()` if its process died). A symlink or non-directory is refused; so, with `MountRefused`,
   * is a directory the box must not write: what `mounts` refuses, `/usr`, `/var/lib` and the like,
   * a home itself, the shared `/tmp` itself (a directory of its own inside one is fine). */
  workspace?: string | undefined;
  /** ADDITION: where the boxes see the workspace, their default cwd (relative `cwd`s and `.deps`
   * follow it), e.g. `"/home/user"` for an E2B template. An absolute, normalised box path, not
   * under `/proc`, `/sys`, `/dev`, the image's system directories, a scratch `tmpfs` or a
   * `mounts` target; a part the image lacks is made in the box. Default `"/workspace"`. */
  workspaceMount?: string | undefined;
  /** A cap, in bytes, on how large the workspace may grow across calls, checked between calls:
   * the call that crosses it completes, later calls return a `workspace_full` fault. Counted as
   * `du` counts, each entry at least 4 KiB, `.deps` aside. Default null (unbounded). */
  workspaceMaxBytes?: number | null | undefined;
  /** Extra host-to-box bind mounts, `{ hostSrc: boxTarget }` or
   * `{ hostSrc: [boxTarget, "ro" | "rw"] }`, read-only unless `"rw"`, at most 16. LOOSENS
   * ISOLATION by what you bind. Sensitive sources (`/`, `/etc`, homes, `.ssh`, sockets, the shared
   * `/tmp`, ...; `/usr`, `/var/lib` and the like as `"rw"`) and bad targets throw `MountRefused`
   * at `open()`. */
  mounts?: Record<string, MountSpec> | undefined;
  /** ADDITION: named volumes (`Volume.create()`) to mount, `{ name: "/data" }` or `{ name:
   * { path: "/data", readonly: true } }`; each must exist. Held from open() to close(): a second
   * Sandbox writing a volume another writes alone is refused at its open() (unless every writer
   * says `shared: true`), and `Volume.remove()` waits for close(). Read-write, a volume is swept
   * for set-id bits after each box, a walk: 10,000 files took a call from 17 to 59 ms here
   * (read-only: no cost). Targets follow the `mounts`
   * rules; `mounts` and `volumes` together at most 16. Not with `persist` (a resident box
   * outlives the Sandbox that holds the volume); read-only only with `zygote`. `fork()` copies
   * mount the same volumes (one written alone can't be forked: mount it `shared`); a checkpoint
   * doesn't hold a volume: pass `volumes` to `fromCheckpoint()` again. */
  volumes?: Record<string, VolumeMount> | undefined;
  /** In-box scratch filesystems, `{ "/path": "64m" }` or `["/path"]`. By default `/tmp` gets a
   * tmpfs of `DEFAULT_TMPFS_MB` MiB (`{}` for none), fresh in every box (in a kernel it lasts,
   * and fills, across cells). Its pages count against `memoryMb`, so the real ceiling is the
   * smaller of the two and overflowing it is an `oom` fault, not `ENOSPC`. */
  tmpfs?: Record<string, string | null> | readonly string[] | undefined;

  // -- limits (options/limits.rs): caps, time, output, enforcement ----------------------------

  /** Memory limit in MiB (kern `--memory`), counting `/tmp` scratch. Default 512, which wins
   * over a `vcpu:` profile's `memory`; null: the profile's, else uncapped. From 32 to
   * 16,777,216; exceeding it is an `oom` fault. */
  memoryMb?: number | null | undefined;
  /** CPU limit in cores (kern `--cpus`), 0.01 to 8192. Default null: a `vcpu:` profile's
   * `cpus`, else none. */
  cpus?: number | null | undefined;
  /** Maximum number of tasks in the box, which stops fork bombs (kern `--pids-limit`). Default
   * 256; from 8 to 4,194,304; null for no cap. */
  pids?: number | null | undefined;
  /** Wall-clock limit per call in seconds, always applied: kern kills the box's PID 1 from
   * outside (every process in the box ends) and the call has a `timeout` fault. Default 30; from
   * 0.01 to 604,800, here, per call and per kernel cell. */
  timeoutS?: number | undefined;
  /** Capture limit for stdout and for stderr, each, in bytes; the excess is dropped and
   * `truncated` set. Default 64 MiB, at most 256 MiB. */
  maxOutputBytes?: number | undefined;
  /** ADDITION: keep a stream that passes `maxOutputBytes` whole in a workspace file
   * (`.kern-output/...`), named by `stdoutSpill`/`stderrSpill`, on every route; written as it
   * comes, so the host's memory stays flat (1 GiB of stdout: +4 MiB RSS here). At most
   * `workspaceMaxBytes` bytes a file when set. Never through a symlink the box made. Default
   * false. */
  spillOutput?: boolean | undefined;
  /** true (default): the caps are held by a cgroup of the box's own, falling back to rlimits
   * (with a `warning:` note) where no cgroup can be written; false: rlimits only, with a note. */
  enforceLimits?: boolean | undefined;
  /** Refuse to start a box unless its memory and pids caps are read back from its cgroup as set,
   * instead of running with the fallback (kern `--require-limits`); `open()` checks one box.
   * Contradicts `enforceLimits: false`. Default false. */
  requireLimits?: boolean | undefined;

  // -- network (options/network.rs): the boxes' way out, and the setup box's -----------------

  /** LOOSENS ISOLATION when true: every box shares the host's network namespace (its loopback
   * included), with a `warning:` note on each result and the host's resolver and CA bundle.
   * Default false: a network namespace with only `lo`. */
  network?: boolean | undefined;
  /** Allow outbound traffic only to the listed destinations (`"pypi.org"`, `".example.com"` for a
   * domain and its subdomains, `"host:port"`, an IP literal), through kern's filtering proxy in
   * your process; each box has no other way out, and private, loopback and metadata addresses
   * are refused unless listed literally. ADDITION: `"*"` alone allows every public host and
   * address on any port (still never private or loopback ones unless listed); `[]` allows
   * nothing yet but gives the boxes the proxy, so `setEgressAllow` can widen it. Not with
   * `network: true`. See docs/network.md. */
  egressAllow?: readonly string[] | undefined;
  /** ADDITION: secrets the code may use but never read, `{ NAME: { value, hosts, headers? } }`.
   * Boxes see `NAME` as a random placeholder; the egress proxy writes `value` in its place only
   * in the allowed request headers (`headers`, default the usual auth headers) of requests to
   * `hosts`, and scrubs it from their answers. Needs `egressAllow` covering every host. See
   * docs/network.md. */
  secrets?: Record<string, { value: string; hosts: readonly string[]; headers?: readonly string[] | undefined }> | undefined;
  /** ADDITION: how the `setup` box reaches the network. `"public"` (default): every public host
   * on ports 80 and 443 through kern's proxy, never the host's private or loopback addresses
   * (literal addresses in `egressAllow` too); `"host"`: the host's network as it is. */
  setupNetwork?: "public" | "host" | undefined;
  /** ADDITION: the package cache. Package files a box downloads through kern's proxy (the
   * `setup` box's, and `egressAllow`'s) from PyPI (`files.pythonhosted.org`) and the npm
   * registry (tarballs of `registry.npmjs.org`) are kept on the host and sent again to later
   * boxes of any Sandbox and image. Only what the host fetched itself is kept, a PyPI file only
   * when its BLAKE2b-256 is the digest its URL names; never a byte a box sent. For this the
   * proxy terminates those hosts' TLS with its per-Sandbox CA, which the boxes trust
   * (`SSL_CERT_FILE` and the like). `true` (default): the user's cache, `$KERN_HOME/packages`
   * (`~/.cache/kern-sandbox/packages`); a string: that directory (an absolute path); `false`:
   * none, TLS to those hosts end to end. A note on the result says what it sent and kept.
   * Here, where the registries are near, it saves only the download (`pip download` of numpy
   * and pandas warm: 0.94× the time without it; BENCHMARKS.md, "Package installs"). */
  packageCache?: boolean | string | undefined;

  // -- security (options/security.rs): the workload's posture ---------------------------------

  /** `"untrusted"` opts into an extra hardening bundle for every box: a seccomp allowlist (escape
   * syscalls fail with EPERM and make an `escape_blocked` fault), all capabilities dropped and a
   * read-only root. Default null: kern's standard posture, which still forbids set-id bits.
   * x86_64 only. */
  securityProfile?: string | null | undefined;
  /** Name of an AppArmor profile, already loaded on the host, entered at the workload's exec;
   * fails closed (a `startup_failed` fault) when AppArmor or the profile is missing. Default
   * null. */
  apparmor?: string | null | undefined;
  /** Linux capabilities removed in every box (kern `--cap-drop`). Default `["ALL"]`; `[]` removes
   * none. A kept capability counts only inside the box's own user namespace (a port below 1024
   * needs `NET_BIND_SERVICE`). */
  capDrop?: readonly string[] | undefined;
  /** The account every box runs as, `"<user>[:<group>]"`, each a name or number (`"node"`,
   * `"1000:1000"`). Default null: the image's `USER`. The workspace appears owned by it (an
   * idmapped mount; nothing on disk changes); ids 0 to 65535. */
  user?: string | null | undefined;
  /** ADDITION: controls `open()` must find in force, measured as `isolation()` measures, or it
   * throws `ERR_ISOLATION_UNAVAILABLE` naming each one this host can't supply and what to do,
   * instead of quietly giving less. Read by src/session/isolation.rs. */
  requireIsolation?: readonly IsolationControl[] | undefined;

  // -- profiles (src/session/profiles/) ---------------------------------------------------------

  /** kern resource profiles to attach (`"vcpu:heavy"`, `"vgpio:leds"`, `"vdisk:scratch"`), each a
   * section of `~/.config/kern/kern.toml` (or `$KERN_CONFIG`): a CPU and memory slice, a set of
   * host devices (the only way to grant hardware), or a size-capped scratch disk. Each entry
   * must match `^(vcpu|vgpio|vdisk):[A-Za-z0-9]{1,64}$`. See docs/guide.md, "Resource
   * profiles". */
  profiles?: readonly string[] | undefined;

  // -- callbacks (js/sandbox.js) ------------------------------------------------------------

  /** Receives each stdout chunk as a Buffer while the code runs; `result.stdout` is still
   * filled. A slow callback holds the box's writes back; a returned promise is awaited (up to
   * 10 s) before the next chunk. */
  onStdout?: ((chunk: Buffer) => void | Promise<void>) | undefined;
  /** Receives each stderr chunk as a Buffer while the code runs, paced like `onStdout`. */
  onStderr?: ((chunk: Buffer) => void | Promise<void>) | undefined;
}

/** The interpreter a snippet runs under. `bash` and `sh` are distinct shells and the image must
 * have the one asked for (else an `exec_failed` fault naming it). `"node"` and (an ADDITION)
 * `"typescript"` run through kern's node driver, with results like python's; typescript needs a
 * Node that strips types (>= 22.13). See docs/guide.md, "JavaScript and TypeScript cells". */
export type Language = "python" | "bash" | "sh" | "node" | "typescript";

/** Overrides for a single `runCode()`/`run()` call: anything omitted falls back to the Sandbox's
 * value; `null` for a callback turns streaming off for this call. */
export interface PerCallOptions {
  /** Wall-clock limit in seconds for this call; omitted means the sandbox's `timeoutS`. */
  timeoutS?: number | undefined;
  /** stdout chunk callback for this call, or null for none; omitted means the sandbox's `onStdout`. */
  onStdout?: ((chunk: Buffer) => void) | null | undefined;
  /** stderr chunk callback for this call, or null for none; omitted means the sandbox's `onStderr`. */
  onStderr?: ((chunk: Buffer) => void) | null | undefined;
  /** ADDITION: called with each `Result` as the cell produces it (a `display()` while the cell
   * runs), in `results`' order, always before the promise resolves; a throw becomes a runtime
   * note and later results still come. */
  onResult?: ((result: Result) => void) | null | undefined;
  /** ADDITION: `onStdout`/`onStderr` receive whole lines (each chunk ends with `\n`); the rest
   * after the last newline comes when the call ends. Default false. */
  lineBuffered?: boolean | undefined;
  /** ADDITION: environment variables for this call only, over the Sandbox's `env` and under the
   * same rules. */
  env?: Record<string, string> | undefined;
  /** ADDITION: the workload's working directory for this call: relative to the workspace (and
   * staying in it), or an absolute path naming any directory of the box, such as `/tmp`. */
  cwd?: string | undefined;
  /** ADDITION: the account this call's box runs as, with the Sandbox's `user` rules
   * (`"root"`, `"nobody"`, `"1000:1000"`; resolved in the image, ids 0 to 65535); the
   * workspace appears owned by it in that box. Not for a `persist` Sandbox's calls. */
  user?: string | undefined;
  /** ADDITION: what the workload reads on stdin, a string (UTF-8) or a Buffer, then end-of-file;
   * at most 16 MiB. Omitted: `/dev/null`. */
  stdin?: string | Buffer | undefined;
  /** ADDITION: aborts the call: its box and every process in it end, and only then does the
   * promise reject with `signal.reason`, as Node's own APIs do; an already aborted signal starts
   * nothing. */
  signal?: AbortSignal | undefined;
  /** ADDITION: `"resolve"`: an aborted call resolves, once its box is gone, with what it made
   * until the abort (output as streamed, files, results) and a `killed` fault, instead of
   * rejecting; one aborted before its box started still rejects. Default `"reject"`. */
  onAbort?: "reject" | "resolve" | undefined;
}

// ---------------------------------------------------------------------------------------------
// The Sandbox
// ---------------------------------------------------------------------------------------------

/** A configured sandbox session: files persist between calls in an on-disk workspace, while every
 * `runCode`/`run` executes in a brand-new, short-lived box. Defaults are the safe choice; options
 * that weaken isolation are marked. */
export class Sandbox {
  constructor(opts?: SandboxOptions);
  /** Prepare the session: resolve the image, create or check the workspace, run `setup`. Must be
   * awaited before `runCode`/`run`; resolves to the sandbox itself. ADDITION: `signal` ends it
   * at its next step (a pull goes on in the background; a `setup` box is ended) and rejects
   * with `signal.reason`; nothing of the Sandbox is left, and `open()` may be called again. */
  open(opts?: { signal?: AbortSignal | undefined }): Promise<this>;
  /** End the session (its kernels, processes and streams with it), removing the workspace only
   * if `open()` created it. Safe to call more than once. */
  close(): Promise<void>;
  /** ADDITION: `close()`, so `await using sb = await new Sandbox(opts).open()` closes it at the
   * block's end (on Node 20 it sits at `Symbol.for("nodejs.asyncDispose")`). */
  [Symbol.asyncDispose](): Promise<void>;
  /** ADDITION: the isolation a box of this Sandbox really gets, measured once by a probe box of
   * its posture and the cgroup read-back (`routes`: each route measured in its own box). The
   * report never claims more than kern was asked to apply. Needs `/bin/sh` and `readlink` in the
   * image. */
  isolation(): Promise<IsolationReport>;
  /** ADDITION: a workspace file as a Node `Readable`, under `readFile`'s rules, read one
   * `highWaterMark` at a time so memory stays bounded; `offset`/`length` pick a range.
   * `close()` destroys the streams still open. */
  createReadStream(path: string, opts?: { offset?: number; length?: number }): import("stream").Readable;
  /** ADDITION: a Node `Writable` whose bytes land at `path` atomically when `end()` finishes
   * (until then nothing sees them; `destroy()`, an error or `close()` leaves `path` as it was),
   * under `writeFile`'s rules. */
  createWriteStream(path: string): import("stream").Writable;
  /** ADDITION: what changes below the workspace-relative directory `path` (default `"."`), by a
   * box or the host, as events (inotify, seen from the host; one instance while open). Never
   * through a symlink; a missing or non-directory `path` is refused (`ERR_FILE`). Bounded: a
   * reader that falls behind 65,536 events gets an `overflow` event, never a silent loss. */
  watch(path?: string, opts?: {
    /** Every directory below `path` too, each new one as it appears. Default true. */
    recursive?: boolean | undefined;
    /** Globs on the workspace-relative path (`*` within a component, `**` across): only
     * matching events. */
    include?: string | readonly string[] | undefined;
    /** Globs whose matching events are left out. */
    exclude?: string | readonly string[] | undefined;
  }): Promise<WorkspaceWatch>;
  /** ADDITION: a URL on the host into `port` of the box of this Sandbox's newest running
   * `spawn()` process that accepts on it, chosen for each connection (a server restarted in a
   * new process keeps the URL). Nothing of the host opens to the boxes: each connection is
   * dialled into the box by its connector, as `SandboxProcess.connect()` does; none accepting
   * is a 502. Until `close()` or the Sandbox's. */
  publish(port: number, opts?: PublishOptions): Promise<PublishedPort>;
  /** Stop the resident box of a `persist` sandbox ahead of its TTL, from any process; resolves
   * once it is gone. Idempotent; a no-op without `persist`; works without `open()`. */
  destroy(): Promise<void>;
  /** Run a code snippet (`language` defaults to "python") against the workspace in a new box with
   * no network. Files written to the workspace persist; in-memory state does not. The options
   * override the session's for this call only (see `PerCallOptions`). */
  runCode(code: string, opts?: { language?: Language } & PerCallOptions): Promise<ExecutionResult>;
  /** Run a command given as an argv array (never parsed by a shell) in a new box; the options
   * override the session's for this call only (see `PerCallOptions`). */
  run(command: readonly string[], opts?: PerCallOptions): Promise<ExecutionResult>;
  /** Write `data` to a workspace-relative path from the host, atomically, parents created. No
   * symlink is followed in any component; `..`, absolute paths and a non-regular or hard-linked
   * target are refused (`ERR_FILE`). */
  writeFile(path: string, data: Buffer | string): Promise<void>;
  /** Read a workspace-relative file from the host, following no symlink in any component.
   * `maxBytes` REJECTS a larger file, it never returns a prefix (files over 1 GiB are refused
   * without it); `offset`/`length` (an ADDITION) read a range instead. */
  readFile(path: string, opts?: {
    maxBytes?: number | undefined;
    /** ADDITION: read from this byte (default 0); with `offset` or `length` the result is a
     * range, and `maxBytes` caps the range, not the file. */
    offset?: number | undefined;
    /** ADDITION: read at most this many bytes (default: to the end). */
    length?: number | undefined;
  }): Promise<Buffer>;
  /** Save the entire workspace as a gzip tar at `dest`: files only, no process memory, `.deps`
   * left out; symlinks and special files are left out with a `KERN_SNAPSHOT_SKIPPED` warning.
   * Refused while a call runs or a kernel is open. */
  snapshot(dest: string): void;
  /** Unpack a `snapshot()` archive into the workspace, merging over what is there. The whole
   * archive is checked first: a symlink, hard link, device, `..`, absolute or duplicate member
   * makes it throw with the workspace untouched. */
  restore(src: string): void;
  /** List the regular files in the workspace, or under `subdir` of it, `.deps` omitted, sorted,
   * symlinks never followed; `change` is always "created" here. Over 100,000 entries throws. */
  listFiles(subdir?: string): Promise<FileInfo[]>;
  /** Start a long-lived interpreter in one box and return it, open: cells share its state, so
   * they are fast but NOT isolated from one another (the box is still network-off and capped).
   * `timeoutS` is the per-cell default; a cell past it ends the kernel. `jupyter` (an ADDITION)
   * starts the image's Jupyter kernelspec of that name instead (R, Julia, IPython's magics). */
  kernel(opts?: {
    timeoutS?: number | undefined;
    jupyter?: string | undefined;
    /** ADDITION: the driver kernel's language, "python" (default), "node" or "typescript"; not
     * with `jupyter`. */
    language?: "python" | "node" | "typescript" | undefined;
    /** ADDITION: the kernel's working directory, with a call's `cwd` rules. */
    cwd?: string | undefined;
    /** ADDITION: the kernel process's environment, over the Sandbox's `env`, with a call's `env`
     * rules. */
    env?: Record<string, string> | undefined;
    /** ADDITION: what a cell past its timeout, or aborted, does to the kernel. `"teardown"`
     * (the driver kernel's default, as the spec says): its box is ended. `"interrupt"` (a
     * Jupyter kernel's default; python driver kernels; refused for node and typescript, whose
     * running script can't be stopped without ending Node): the cell gets SIGINT
     * (KeyboardInterrupt), and the kernel keeps its state if the cell stops within 5 s (the
     * result's `timeout` fault says so), else its box is ended. */
    onTimeout?: "teardown" | "interrupt" | undefined;
  }): Promise<Kernel>;

  /** ADDITION: starts `argv` in the background in a fresh box of this Sandbox's posture on the
   * same workspace, resolving once it is about to exec. It runs until it exits, `kill()`, its
   * `timeoutS` (default none) or `close()`; its output streams to the callbacks and to
   * `stdout`/`stderr`, capped like a call's. */
  spawn(
    argv: readonly string[],
    opts?: {
      env?: Record<string, string> | undefined;
      cwd?: string | undefined;
      /** ADDITION: the account its box runs as (as `PerCallOptions.user`). */
      user?: string | undefined;
      signal?: AbortSignal | undefined;
      onStdout?: ((chunk: Buffer) => void) | null | undefined;
      onStderr?: ((chunk: Buffer) => void) | null | undefined;
      timeoutS?: number | undefined;
      /** ADDITION: the callbacks and the `stdout`/`stderr` iterators get whole lines, as
       * `PerCallOptions.lineBuffered`. */
      lineBuffered?: boolean | undefined;
    },
  ): Promise<SandboxProcess>;

  /** ADDITION: the processes `spawn()` started that still run. */
  processes(): SandboxProcess[];

  /** ADDITION: replaces the `egressAllow` list for every later call and for the next connection
   * of every box already running (a connection already open keeps its admission). A refused
   * list throws and leaves the current one; needs a Sandbox opened with `egressAllow` (`[]`
   * to start deny-all, `["*"]` to start open). */
  setEgressAllow(list: readonly string[]): Promise<void>;

  /** ADDITION: `count` (1 to 64, default 1) new open Sandboxes with this one's options, each
   * with a copy of this workspace as it is now: files (reflinked where the filesystem can),
   * directories and symlinks (as links), modes without set-id bits, `.deps` made again by their
   * own `setup`. A kept `workspace` stays this Sandbox's: each copy gets a temporary one. Refused
   * while a call or a kernel may write the workspace, and for `persist` (running processes are
   * not copied). Close each copy as any Sandbox. */
  fork(opts?: { count?: number | undefined }): Promise<Sandbox[]>;

  /** ADDITION: writes this Sandbox's workspace to `dir` (a new or empty host directory, not
   * inside the workspace), sealed as `Kernel.checkpoint()` does; `Sandbox.fromCheckpoint(dir)`
   * opens a Sandbox with it again. Refused for `persist` (running processes are not written). */
  checkpoint(dir: string): Promise<Checkpoint>;
  /** ADDITION: a new kernel of this Sandbox holding the state of the kernel checkpoint in
   * `dir` (its options, over which `opts` apply: `env` is not kept in a checkpoint, give it
   * again), with the checkpoint's workspace copied into this Sandbox's, which must be empty
   * (unless this Sandbox came from `Sandbox.fromCheckpoint(dir)` of the same checkpoint). The
   * Sandbox's image must be the checkpoint's. A checkpoint that does not check out throws and
   * nothing is restored. */
  restoreKernel(dir: string, opts?: Parameters<Sandbox["kernel"]>[0]): Promise<Kernel>;
  /** ADDITION: a new open Sandbox holding the workspace of the checkpoint in `dir` (a kernel's
   * or a Sandbox's), in the checkpoint's image unless `options.image` names it otherwise;
   * `restoreKernel(dir)` then brings a kernel's state back. */
  static fromCheckpoint(dir: string, options?: SandboxOptions): Promise<Sandbox>;

  /** ADDITION: freezes a `persist` Sandbox's resident box, processes its calls left running
   * included, until `resume()` (as `Kernel.pause()`: memory kept, no CPU). Calls into it throw
   * meanwhile, from any process (`kern pause NAME`/`kern resume NAME` do the same by name).
   * Without `persist` it throws: nothing runs between calls. */
  pause(): Promise<void>;
  /** ADDITION: lets a paused resident box run again. */
  resume(): Promise<void>;
  /** ADDITION: whether this Sandbox paused its resident box (and it was not resumed since,
   * here or by `kern resume`). */
  readonly paused: boolean;

  /** ADDITION: runs `argv` (default: the image's `bash`, else `sh`) on a new pseudo-terminal of a
   * fresh box, `cols` x `rows` (default 80 x 24, each 1 to 1000); it is the program's
   * controlling terminal and stdio. Lives as long as the program, `kill()` or `close()`. */
  terminal(opts?: {
    argv?: readonly string[] | undefined;
    cols?: number | undefined;
    rows?: number | undefined;
    env?: Record<string, string> | undefined;
    cwd?: string | undefined;
    /** The account its box runs as (as `PerCallOptions.user`). */
    user?: string | undefined;
  }): Promise<Terminal>;
}

// ---------------------------------------------------------------------------------------------
// Processes and terminals (additions)
// ---------------------------------------------------------------------------------------------

/** ADDITION: what `SandboxProcess` and `Terminal` share. */
declare class SteeredProcess {
  /** Its pid in its box (its box's PID 1 is kern's init). */
  readonly pid: number;
  /** False once it has ended. */
  readonly running: boolean;
  /** Sends `signal` (default `"SIGTERM"`, then the box is ended if it still runs 2 s later) to
   * the process's group; `"SIGKILL"` ends its box. An unknown name rejects; an ended process is
   * a no-op. */
  kill(signal?: string): Promise<void>;
  /** Resolves with its result once it has ended and every chunk of its output was delivered. */
  wait(): Promise<ExecutionResult>;
  /** Writes to its stdin (a terminal: types). Rejects once it has ended, or after `end()`. */
  write(data: string | Buffer): Promise<void>;
}

/** ADDITION: a background process from `Sandbox.spawn()`. */
export class SandboxProcess extends SteeredProcess {
  private constructor();
  /** Its stdout as it comes, in order; ends when the process has ended. */
  readonly stdout: AsyncIterable<Buffer>;
  readonly stderr: AsyncIterable<Buffer>;
  /** Closes its stdin: the process reads EOF. `write()` after it rejects. */
  end(): Promise<void>;
  /** A TCP connection to `127.0.0.1:port` inside the process's box (a dev server, say), dialled
   * by the box's own connector: no host port, no change to the box's network. Nothing accepting
   * rejects with `ERR_CONNECTION_REFUSED`; `waitS` (default 0, at most 3600) retries that long
   * for a server still starting. */
  connect(port: number, opts?: { waitS?: number | undefined }): Promise<import("net").Socket>;
  /** A URL on the host into `port` of this process's box, with a token (see
   * `PublishedPort`); it closes at `close()`, at the process's end or the Sandbox's. */
  publish(port: number, opts?: PublishOptions): Promise<PublishedPort>;
}

/** ADDITION: a program on a terminal, from `Sandbox.terminal()`. */
export class Terminal extends SteeredProcess implements AsyncIterable<Buffer> {
  private constructor();
  /** Calls `cb` with its output as it comes; returns a function that stops it. The first
   * listener also gets what came before it, so `onData` right after `terminal()` misses nothing. */
  onData(cb: (data: Buffer) => void): () => void;
  [Symbol.asyncIterator](): AsyncIterator<Buffer>;
  /** Resizes the terminal (the foreground program gets `SIGWINCH`); each of `cols` and `rows` a
   * whole number from 1 to 1000. */
  resize(cols: number, rows: number): void;
}

// ---------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------

/** ADDITION: a name of a kernel's namespace that a fork or checkpoint did not carry (a value
 * that could not be pickled or cloned), and why. */
export interface NotCarried {
  name: string;
  reason: string;
}

/** ADDITION: what `Kernel.checkpoint()` and `Sandbox.checkpoint()` wrote. */
export interface Checkpoint {
  /** The checkpoint's directory (absolute). */
  dir: string;
  /** Its random id. */
  id: string;
  /** Bytes of the kernel's state (`Kernel.checkpoint`), or of the workspace's files
   * (`Sandbox.checkpoint`). */
  bytes: number;
  notCarried: NotCarried[];
}

/** A warm interpreter in one long-lived box, from `Sandbox.kernel()`: state in memory survives
 * from cell to cell, and so does `/tmp`; the box stays network-off and capped until `close()` or
 * a cell's timeout ends it. Cells run one at a time, in call order; once the box is gone every
 * later call throws saying why. A Jupyter kernel is interrupted at a timeout and keeps its state
 * if the cell stops (docs/reference.md, "Kernels"). */
export class Kernel {
  /** Run `code` as the next cell, seeing earlier cells' state; a final expression, `display()`
   * and figures go to `results`. `timeoutS` overrides the kernel's deadline for this cell; going
   * over it ends the driver kernel with a `timeout` fault. ADDITION: a python cell Python refuses
   * as written is read by IPython's rules (dedented; `!cmd` runs in the shell, `x = !cmd` takes
   * its lines), as is a python `runCode`. */
  runCode(code: string, opts?: {
    timeoutS?: number | undefined;
    /** ADDITION: aborts the cell, stopping it as its timeout would; the promise rejects with
     * `signal.reason` once the cell has stopped. A cell still waiting for earlier ones never
     * runs. */
    signal?: AbortSignal | undefined;
    /** ADDITION: `"resolve"`: an aborted cell resolves with its output so far and its fault
     * (as `PerCallOptions.onAbort`). */
    onAbort?: "reject" | "resolve" | undefined;
    /** ADDITION: this cell's results, one by one (as `PerCallOptions.onResult`). */
    onResult?: ((result: Result) => void) | null | undefined;
    /** ADDITION: `onStdout`/`onStderr` get this cell's output as whole lines. */
    lineBuffered?: boolean | undefined;
    /** ADDITION: this cell's stdout chunks, instead of the Sandbox's `onStdout`; null: none. */
    onStdout?: ((chunk: Buffer) => void) | null | undefined;
    /** ADDITION: this cell's stderr chunks, instead of the Sandbox's `onStderr`; null: none. */
    onStderr?: ((chunk: Buffer) => void) | null | undefined;
    /** ADDITION: variables set for this cell only (and the processes it starts), over the
     * kernel's own env, with a call's `env` rules; a bad one throws before the cell runs. After
     * the cell each gets its old value back (or is removed), except one the cell itself changed
     * or deleted, which keeps the cell's change. A Jupyter kernel refuses a non-empty `env`. */
    env?: Record<string, string> | undefined;
  }): Promise<ExecutionResult>;
  /** ADDITION: freezes the kernel's box with the cgroup freezer: every process in it stops at
   * once, a running cell too (its timeout stands still while paused), memory kept, no CPU used,
   * until `resume()`. Cells called meanwhile throw. Idempotent. Needs a cgroup of the box's own:
   * as root, or on cgroup v2 under a systemd user session or `KERN_CGROUP_PARENT` (`kern doctor`,
   * "pause"); elsewhere it throws `ERR_HOST_UNSUPPORTED` naming the fix. Measured here
   * (release, cgroup v1, 100 MiB kernel): `pause()` + `resume()` 7 ms. */
  pause(): Promise<void>;
  /** ADDITION: lets a paused kernel run again; a paused cell goes on where it stopped. */
  resume(): Promise<void>;
  /** ADDITION: whether the kernel is paused. */
  readonly paused: boolean;
  /** ADDITION: `count` (1 to 64, default 1) new kernels, each in a fresh box of a new Sandbox
   * (this kernel's Sandbox's options, a copy of its workspace as `Sandbox.fork()` makes it),
   * holding this kernel's state: its variables and objects (python: pickled; node: structured
   * clone), the modules it names (imported again), functions and classes defined in cells, the
   * current directory (and python's `sys.path`). A fork is a fresh process, as isolated from its
   * parent and siblings as two fresh boxes are; its randomness is its own. Not carried: threads,
   * child processes, open files and sockets, each module's own globals, and (node) closures over
   * local variables and instances of classes; a value that can't be carried is left out, named
   * in `notCarried` and a `KERN_STATE_LEFT_OUT` warning. Runs in turn with cells, within the
   * kernel's cell timeout; this kernel is paused while its workspace is copied (where kern can't
   * pause, it is held between cells), then goes on. Python, node and typescript driver kernels: a
   * Jupyter kernel throws, saying why. Closing a fork closes its Sandbox (`kernel.sandbox`).
   * Measured here (release, 100 MiB of numpy data, numpy and pandas imported): 597 ms to the
   * fork's first cell, beside 513 ms for a fresh kernel that rebuilds the same state. */
  fork(opts?: { count?: number | undefined }): Promise<Kernel[]>;
  /** ADDITION: writes this kernel's state (as `fork()` carries it) and its Sandbox's workspace
   * to `dir`, a new (or empty) directory of the host's, not inside the workspace; sealed with
   * this host's key (`$KERN_HOME/checkpoint.key`), so a changed, cut or foreign checkpoint is
   * refused at restore. The kernel is then closed, its memory freed, unless `keepRunning`.
   * `Sandbox.fromCheckpoint(dir)` and `sandbox.restoreKernel(dir)` bring it back, in any later
   * process of this host. */
  checkpoint(dir: string, opts?: { keepRunning?: boolean | undefined }): Promise<Checkpoint>;
  /** ADDITION: the names a fork or restore of a kernel did not carry, with why (`[]` for a
   * kernel opened as new). */
  readonly notCarried: NotCarried[];
  /** ADDITION: the Sandbox the kernel runs in (a fork's own new Sandbox, for a fork). */
  readonly sandbox: Sandbox;
  /** Shut the kernel down: close its input, kill its process group and clean up (a Jupyter
   * kernel gets a `shutdown_request` first). */
  close(): Promise<void>;
  /** ADDITION: `close()`, for `await using k = await sb.kernel()`. */
  [Symbol.asyncDispose](): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/** Open a Sandbox, pass it to `fn`, and close it afterwards whether `fn` resolves or rejects.
 * Resolves to whatever `fn` resolves to. */
export function withSandbox<T>(fn: (sandbox: Sandbox) => Promise<T>): Promise<T>;
export function withSandbox<T>(opts: SandboxOptions, fn: (sandbox: Sandbox) => Promise<T>): Promise<T>;

/** Run `code` once in a temporary session whose workspace is created beforehand and deleted afterwards. */
export function runCode(code: string, opts?: SandboxOptions & { language?: Language }): Promise<ExecutionResult>;

/** This package's version string. */
export const version: string;

/** Size in MiB of the tmpfs mounted at `/tmp` when `tmpfs` is not given; derive another size
 * from it rather than hard-coding a second number. */
export const DEFAULT_TMPFS_MB: number;
