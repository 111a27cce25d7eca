// Type definitions for kern-sandbox
// Execute code written by an LLM or agent in a fresh, isolated Linux box on the local machine,
// with no daemon to run.
//
// Several members of this surface use Node's `Buffer` (streaming chunk callbacks, `readFile`, the
// decoded images on `Result`), so a TypeScript consumer needs `@types/node` installed
// (`npm i --save-dev @types/node`). This file intentionally has no `/// <reference types="node" />`
// directive: when `@types/node` is missing, such a directive only adds a "cannot find type
// definition file" error next to the `Buffer` errors, which already tell you what to install.
// Retyping these members as `Uint8Array` (which `Buffer` extends) would drop the requirement, but that
// changes the published surface and is left for a later minor release.
//
// Release 0.1 builds this whole surface. The few combinations it does not support (`persist` with
// `egressAllow`, `prewarm` or `kernel()`; `securityProfile` off x86_64) are REFUSED: they throw a
// `SandboxError` naming them, rather than being silently ignored. Each affected doc comment says so.

/** Why the SANDBOX (not the user's code) ended or blocked a call. Always returned as data on an
 * `ExecutionResult`, never thrown. */
export type SandboxFaultType = "timeout" | "oom" | "escape_blocked" | "killed" | "startup_failed" | "exec_failed" | "workspace_full";

/** A sandbox-level fault: what kind, plus a human-readable explanation. */
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

/** A rich value produced by Python code, in the style of Jupyter display data: the value of a final
 * bare expression, each `display(obj)`, and any matplotlib figure still open at the end. `data` maps
 * each MIME type to its payload: text types and application/json as strings, image types as base64.
 * The convenience getters below read individual entries of `data`, in the order the code produced
 * them.
 *
 * The rules are IPython's: the last statement is shown when it is a bare expression that is not
 * `None` and does not end with `;`; `display(*objs)` is a builtin; `_repr_html_`, `_repr_markdown_`,
 * `_repr_svg_`, `_repr_png_`, `_repr_jpeg_`, `_repr_json_`, `_repr_latex_`, `_repr_javascript_` and
 * `_repr_mimebundle_` map to their MIME types, with `text/plain` from `repr()` always present;
 * every open matplotlib figure is rendered to PNG (Agg) at the end. Results travel on their own
 * channel, never parsed out of stdout, so nothing the code prints becomes one. PNG and JPEG data is
 * decoded once before it reaches you: an image that is malformed, over 32 MiB, or over 50 million
 * pixels is dropped with a runtime note. Base64 image data is decoded as Jupyter clients do,
 * whitespace ignored (kernels such as IRkernel send it in MIME-style lines), and kept in `data`
 * without the line breaks.
 *
 * ADDITION (bounds, on every path: a fresh box, a prewarmed one, the driver kernel and a Jupyter
 * kernel): one call or cell keeps at most 10,000 results and 128 MiB of them (payloads, MIME names,
 * and an overhead of 256 bytes per result and 64 per entry); what does not fit is dropped, and a runtime
 * note says how many results were. A result (a driver frame, a Jupyter message) of more than 1,048,576
 * JSON values (e.g. an `application/json` array of a million numbers) is dropped the same way before it
 * is parsed: parsed, it would cost this process some 40 times its size (measured here: a 16 MiB
 * `[0,0,…]` took it from 54 to 663 MiB; with the bound, to 71 MiB). */
export class Result {
  /** MIME type -> payload. A NULL-PROTOTYPE object (change: it was a plain object): the box picks
   * its keys, so it has no `hasOwnProperty`/`toString` of its own; use `Object.hasOwn(data, type)`,
   * `type in data` or `formats()`. Only MIME type names (`type/subtype`, RFC 6838 characters) are
   * admitted; any other name is dropped with a runtime note. */
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
  /** ADDITION to the published surface: the `text/latex` entry, if present. */
  readonly latex?: string | undefined;
  /** ADDITION to the published surface: the `application/javascript` entry, if present. */
  readonly javascript?: string | undefined;
  /** ADDITION to the published surface: the `application/pdf` entry, base64-decoded, or null
   * when absent. */
  readonly pdf: Buffer | null;
  /** ADDITION to the published surface: true for the value of the cell's last expression (the
   * python driver's result, a Jupyter kernel's `execute_result`); false for `display()` output
   * and the figures shown at the end of a cell or by `plt.show()` (a figure that is itself the
   * last expression's value is the main result). `results` keeps the order they were produced
   * in, so the main result is not always last (open figures are shown after it). At most one
   * per cell. */
  isMainResult: boolean;
  /** ADDITION to the published surface: what a matplotlib figure plots, as plain numbers and
   * strings, read in the box by the python driver from the Figure as it is shown (the driver
   * never imports matplotlib for it). null for every other result, for a figure without axes
   * that hold data, and for Jupyter kernels (their results carry no chart data). See `Chart`. */
  chart: Chart | null;
}

/** ADDITION to the published surface: the kinds of `Chart`, as E2B's chart extractor names them. */
export type ChartType = "line" | "scatter" | "bar" | "pie" | "box_and_whisker" | "superchart" | "unknown";

/** A number of a chart (null for NaN and infinities, which JSON can't carry), or a string (a
 * categorical value, an ISO date for a `datetime`). */
export type ChartValue = number | string | boolean | null;

/** ADDITION to the published surface: what one Axes of a figure shows. The texts are as
 * matplotlib has them (`""` when unset), each cut at 1000 characters. */
export interface ChartBase {
  title: string;
  xLabel: string;
  yLabel: string;
  /** At most 10,000 values (points, bars, wedges, outliers) are read from one figure: a chart
   * cut there has `truncated: true` (a figure of 1,000,000 points gives 10,000 of them). Measured
   * here: a 10,000-point line of random floats is 261 KB of chart JSON, and reading it made no
   * difference we could measure to a call that renders the figure (1.3 to 4.6 s either way on
   * the shared test machine, render-bound). A chart over 4 MiB of JSON is dropped (`chart:
   * null`) with a runtime note. */
  truncated?: true | undefined;
}

/** `plt.plot()` lines (`type: "line"`) or `plt.scatter()` points (`type: "scatter"`): one
 * element per line or scatter call, `label` its legend label (`""` when it has none), `points`
 * its `[x, y]` pairs in order. */
export interface PointChart extends ChartBase {
  type: "line" | "scatter";
  /** The axes' scales: `"linear"`, `"log"`, `"symlog"`, `"logit"`. */
  xScale: string;
  yScale: string;
  elements: { label: string; points: [ChartValue, ChartValue][] }[];
}

/** `plt.bar()`/`plt.barh()`/`plt.hist()`: one element per bar; `label` is the tick label under
 * the bar (else its position), `group` the legend label of its bar call (`""` when none),
 * `value` its height (width for `barh`). */
export interface BarChart extends ChartBase {
  type: "bar";
  elements: { label: string; group: string; value: ChartValue }[];
}

/** `plt.pie()`: one element per wedge; `angle` in degrees, `radius` in data units. */
export interface PieChart extends ChartBase {
  type: "pie";
  elements: { label: string; angle: ChartValue; radius: ChartValue }[];
}

/** `plt.boxplot()`: one element per box, the statistics matplotlib drew it from (whisker ends,
 * quartiles, median, outliers). */
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

/** A figure with several Axes holding data (`plt.subplots(1, 2)`): one chart per Axes, in the
 * figure's order; `title` is the figure's `suptitle` (`""` when none). */
export interface SuperChart {
  type: "superchart";
  title: string;
  elements: (PointChart | BarChart | PieChart | BoxAndWhiskerChart | UnknownChart)[];
  truncated?: true | undefined;
}

/** ADDITION to the published surface: a figure's chart data (`Result.chart`). A figure with one
 * Axes is that Axes' chart (its title falls back to the figure's `suptitle`). */
export type Chart = PointChart | BarChart | PieChart | BoxAndWhiskerChart | UnknownChart | SuperChart;

/** ADDITION to the published surface: the exception a cell raised (`ExecutionResult.error`).
 * `name` is the exception's class name (`"ZeroDivisionError"`), `value` its message, `traceback`
 * the text Python prints (the cell's own frames, not the driver's; a Jupyter kernel's lines
 * joined by `\n`), with ANSI colour codes removed. Each field is cut at 1 MiB. */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

/** What one `runCode()`/`run()` call produced. Two separate questions are answered here: `fault` says
 * whether the sandbox intervened; `exitCode`, `stdout` and `stderr` describe what the user's code did.
 * `success` is true only when both are clean. */
export class ExecutionResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  /** Wall-clock duration of the call in milliseconds. */
  durationMs: number;
  /** null exactly when the sandbox did not intervene; a non-zero `exitCode` with a null `fault` is the
   * user's code failing on its own. */
  fault: SandboxFault | null;
  /** Workspace files this call created or modified (empty when `trackFiles` is false). */
  files: FileInfo[];
  /** True when stdout or stderr reached `maxOutputBytes` and the excess was dropped
   * (`stdoutTruncated || stderrTruncated`). */
  truncated: boolean;
  /** ADDITION to the published surface: stdout reached `maxOutputBytes` and the excess was
   * dropped. */
  stdoutTruncated: boolean;
  /** ADDITION to the published surface: stderr reached `maxOutputBytes` and the excess was
   * dropped. */
  stderrTruncated: boolean;
  /** ADDITION to the published surface: the name of the signal that ended the process
   * (`"SIGKILL"`, `"SIGTERM"`, ...; `exitCode` is then 128 + its number), or null when it
   * exited by itself. A signal it sent itself, or one from another process of the box, counts;
   * so does kern's: a box ended for its timeout, an abort, `close()` or the memory cap was
   * ended with `"SIGKILL"`. A kernel cell whose box was ended says `"SIGKILL"` too. */
  signal: string | null;
  /** Rich MIME-typed values of a Python `runCode` (see `Result`), in order; `[]` for other
   * languages and `run()` (ADDITION: a node or typescript `runCode` or kernel cell has them
   * too, see NODE CELLS at `Language`). */
  results: Result[];
  /** ADDITION to the published surface: the exception a python, node or typescript `runCode`,
   * a kernel cell or a Jupyter kernel's cell raised (its traceback is on `stderr` too, as
   * before), else null: for a clean run, for bash and sh, and `run()`. Also null when `fault` is set: a timeout's
   * or abort's KeyboardInterrupt is the fault, not the code's error. A `SystemExit` (`exit(3)`,
   * `sys.exit("msg")`) is an exit, not an error, in a python `runCode` and a driver kernel:
   * `exitCode` carries it and `error` is null; a Jupyter kernel reports what the kernel says
   * (ipykernel sends an error for a `SystemExit`). A `SyntaxError` is an error. */
  error: ExecutionError | null;
  /** ADDITION to the published surface: a kernel cell's number, counted from 1 in the order the
   * kernel ran its cells (the driver kernels, python and node, count every cell sent, a
   * Jupyter kernel's is its `execute_reply`'s `execution_count`); null for a one-shot
   * `runCode`/`run`. */
  executionCount: number | null;
  /** `exitCode === 0` and `fault === null`. */
  readonly success: boolean;
  /** Exactly what the code wrote to stderr: `stderr` minus the lines the sandbox runtime wrote
   * itself. The runtime knows which lines are its own (they travel from it as data, not matched
   * by their text), so a line the code prints that starts `warning:` or `note:` stays here.
   * Prefer this over `stderr` when showing output to a model. */
  readonly codeStderr: string;
  /** The lines the sandbox runtime wrote itself (each starting `note:` or `warning:`), one per
   * element, in order; the counterpart of `codeStderr`. Never a line the code printed, whatever it
   * starts with. `stderr` keeps both, interleaved as written (the runtime's lines stand before the
   * code's output, or after it). */
  readonly runtimeNotes: string[];
}

/** THROWN for caller or configuration mistakes: an invalid argument, a refused mount, a missing `kern`
 * runtime, or (in 0.1) a combination of options it does not support. Sandbox-level outcomes of running
 * code are never thrown; they are reported as `ExecutionResult.fault`. */
export class SandboxError extends Error {
  /** ADDITION to the published surface: what kind of mistake, as a stable code (see
   * `SandboxErrorCode`). Set on every SandboxError the package throws, from the native side or
   * the JS layer; the message stays the human explanation. */
  readonly code: SandboxErrorCode;
}

/** ADDITION to the published surface: `SandboxError.code`. Stable: a code is never renamed and
 * never changes meaning; new ones may be added.
 * - `ERR_INVALID_OPTION`: a bad option or argument (type, range, an unknown name, a contradicting
 *   combination, an unsupported combination); thrown before any box starts. Also a call in the
 *   wrong state (a cwd the box could not enter, `snapshot()` while calls run).
 * - `ERR_MOUNT_REFUSED`: a host mount refused as unsafe (always a `MountRefused`).
 * - `ERR_NOT_OPEN`: a call on a Sandbox before `open()`.
 * - `ERR_CLOSED`: a call on a Sandbox after `close()`; on a kernel torn down or closed; a
 *   `write()` to a process that has ended; a stream whose Sandbox closed.
 * - `ERR_FILE`: a workspace path refused by `readFile`/`writeFile`/`listFiles`/the streams (a
 *   symlink on the way, `..`, absolute, not a regular file, hard links, over `maxBytes`) or
 *   not there.
 * - `ERR_IMAGE`: the image could not be resolved, pulled, verified or unpacked (unknown tag,
 *   unreachable registry, bad credentials, corrupt blob, disk full). A malformed reference is
 *   `ERR_INVALID_OPTION`.
 * - `ERR_SETUP_FAILED`: `setup` exited non-zero or was ended (with `exitCode`, `stderrTail`).
 * - `ERR_ISOLATION_UNAVAILABLE`: a control the options insist on (`requireLimits`,
 *   `requireIsolation`) is not in force on this host; the message says why and what to do.
 * - `ERR_HOST_UNSUPPORTED`: this host can't do it at all (no native package for the platform,
 *   `securityProfile` off x86_64), or the container kern runs in refuses boxes (its seccomp
 *   profile, masked `/proc` paths, root without a user namespace of its own or without
 *   CAP_SETFCAP): thrown by `open()` (which tries one box where such a restriction is in force)
 *   and by a call, naming the refusal and the exact flag or pod `securityContext` line that
 *   lifts it (README, "Inside containers and pods").
 * - `ERR_CONNECTION_REFUSED`: `SandboxProcess.connect()` found nothing accepting on the port
 *   (within its `waitS`, if given): the server is not listening (yet).
 * - `ERR_RUNTIME`: the kern runtime is missing, failed or could not be talked to, or the host
 *   refused an operation (a file it could not read, a temp file it could not create).
 * - `ERR_INTERNAL`: a bug in kern-sandbox (an error without a code of its own); please report it. */
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

/** ADDITION to the published surface: a control `requireIsolation` can insist on. */
export type IsolationControl = "filesystem" | "network" | "process" | "limits" | "seccomp";

/** ADDITION to the published surface: what `Sandbox.isolation()` measured in a box of this
 * Sandbox (not what the options asked for). */
export interface IsolationReport {
  /** The box has its own mount namespace (its root is the image, not the host's). */
  filesystem: boolean;
  /** `"none"`: its own network namespace with only `lo`; `"allowlist"`: its own namespace, out
   * only through the `egressAllow` proxy; `"host"`: the host's network namespace. */
  network: "none" | "allowlist" | "host";
  /** The box has its own PID namespace (it sees only its own processes). */
  process: boolean;
  /** How each cap is in force: `"cgroup"` (read back from the box's cgroup as set), `"rlimit"`
   * (the best-effort fallback: RLIMIT_DATA, RLIMIT_NPROC), `"none"` (not asked for, e.g. `cpus`
   * unset, or not in force: a CPU cap without a cgroup). */
  limits: {
    memory: "cgroup" | "rlimit" | "none";
    pids: "cgroup" | "rlimit" | "none";
    cpu: "cgroup" | "none";
  };
  /** `"untrusted"`: the `securityProfile: "untrusted"` filters are in force; `"standard"`: kern's
   * set-id filter only (every box has it); `"none"`: no seccomp filter. */
  seccomp: "none" | "standard" | "untrusted";
  /** The box runs in a user namespace of its own that does not map the host's ids one to one. */
  userns: boolean;
  /** The cgroup hierarchy that holds the box's caps, or null when no cgroup does. */
  cgroup: "v1" | "v2" | null;
  /** ADDITION to the published surface: the same report for each route a call of this Sandbox
   * can take, each measured in the box that route really gives: `fresh` (a `run()`), `zygote` (a
   * python cell forked from the zygote, with `zygote`, while it lives), `prewarm` (a slot of the
   * pool, with `prewarm`), `kernel` (a `kernel()`), `resident` (a call into the `persist` box,
   * which replaces `fresh`, `zygote`, `prewarm` and `kernel`), `spawn` and `terminal`. The
   * top-level fields stay the measurement of a fresh box of this posture. Absent inside a
   * route's own report. */
  routes?: Partial<Record<IsolationRoute, Omit<IsolationReport, "routes">>> | undefined;
}

/** ADDITION to the published surface: a way a call reaches a box (`IsolationReport.routes`). */
export type IsolationRoute = "fresh" | "zygote" | "prewarm" | "kernel" | "resident" | "spawn" | "terminal";
/** Thrown when a requested host mount is unsafe: a sensitive host source, or a target path that is
 * relative or escapes. */
export class MountRefused extends SandboxError {}

/** The value side of a `mounts` entry: a box target path, or a `[target, mode]` pair. */
export type MountSpec = string | [target: string, mode: "ro" | "rw"];

/** Options for `new Sandbox()`, `withSandbox()` and the one-shot `runCode()`. Everything is safe by
 * default; each option that loosens isolation says so. */
export interface SandboxOptions {
  /** The root filesystem boxes run from. Default: "python:3.12-slim" (an OCI image).
   *
   * - A registry reference, normalised as Docker does (`python:3.12-slim` is
   *   `docker.io/library/python:3.12-slim`; `host:port/repo:tag`, `repo@sha256:…`). Pulled on the
   *   first `open()` from any v2 registry (anonymous tokens, `~/.docker/config.json` or
   *   `KERN_REGISTRY_AUTH` credentials), every digest verified, and kept in a content-addressed store
   *   (`$KERN_HOME`, default `~/.cache/kern-sandbox`). A cached reference opens with no network at
   *   all; `KERN_PULL=always` re-checks tags, `KERN_PULL=never` forbids pulling. Measured here: a cold
   *   pull of an 89 MB (248 MB unpacked) image from a loopback registry takes 1.7-4.6 s, mostly
   *   unpacking, a little less than `skopeo copy` followed by a plain `tar` unpack; a cached one
   *   opens in 2.6 ms. (Added:) HTTPS pulls trust the system CA store plus `KERN_REGISTRY_CA`, go
   *   through `HTTPS_PROXY`/`HTTP_PROXY` except for `NO_PROXY` hosts and loopback, and try
   *   `KERN_REGISTRY_MIRRORS` for docker.io images first (README "Registries, proxies and CAs").
   * - An absolute path: an OCI image layout directory, a `docker save` / OCI archive, or a plain
   *   root filesystem directory (mounted read-only; nothing is ever written into it).
   * - `"host"`: the host's `/usr`, `/bin`, `/sbin`, `/lib*` and a reduced `/etc`, read-only; never
   *   `/home`, `/root`, `/var`, `/tmp`, `/opt` or credential files. Of `/usr/local` only its program
   *   directories (`bin`, `sbin`, `lib*`, `libexec`, `include`, `share`): its `etc` and the rest are
   *   hidden. (Changed: `/opt` and `/usr/local/etc` were shown before.) README "Images" lists it all.
   *
   * The image config's `Env` is the workload's environment, its `USER` the account it runs as;
   * `WorkingDir` gives way to the workspace. An unreachable registry, an unknown tag, missing
   * credentials or a corrupt blob throws SandboxError from `open()`, naming the image and the
   * registry. */
  image?: string | undefined;
  /** A shell command run once during `open()`, in a box that has network access, to install
   * dependencies (for example "pip install pandas" or "npm install -g left-pad").
   *
   * The setup box is the session's box (image, account, limits, mounts, your `env`) with network
   * (`setupNetwork`). It runs nothing a box could have written: it starts in an empty scratch
   * directory (`/.kern-setup`, not the workspace: name workspace files by their absolute path,
   * `pip install -r /workspace/requirements.txt`), with the image's environment and none of
   * `/workspace/.deps` or the workspace on `PATH`, `PYTHONPATH`, the python user site or a config
   * path (`PYTHONSAFEPATH=1`, `PYTHONNOUSERSITE=1`, `HOME` never in the workspace). The host's
   * variables never reach it. Installers write into `/workspace/.deps` (`PIP_TARGET`,
   * `npm_config_prefix`), and every later box gets `PYTHONPATH`, `NODE_PATH` and `PATH` pointing
   * there, so `import x`, `require('x')` and installed commands just work. `open()` makes
   * `.deps` before any box runs, so an ordinary box never creates it. It trusts the host's
   * CA bundle (bound read-only, with `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, `PIP_CERT`,
   * `CURL_CA_BUNDLE` and `NODE_EXTRA_CA_CERTS` pointing at it), so networks that intercept TLS
   * work; `KERN_HOST_CA=0` turns that off. Its output goes to `onStdout`/`onStderr`. Its
   * wall-clock limit is 900 s (`KERN_SETUP_TIMEOUT_S` changes it), not `timeoutS`.
   *
   * A setup that exits non-zero, or that the sandbox ends, makes `open()` throw a SandboxError
   * with `exitCode` and `stderrTail` (the last 20 lines the command wrote to stderr; CHANGED in
   * 0.1: kern's own `note:`/`warning:` lines are left out) as properties; the temporary
   * workspace is removed. */
  setup?: string | undefined;
  /** A host directory to use as the persistent workspace. When omitted, a temporary directory is
   * created by `open()` and removed by `close()`; one whose process died before its `close()`
   * (SIGKILL, a Ctrl-C) is removed by the next `open()` of the same user (its owner file, locked
   * for the owner's life, says it is dead). A `workspace` you give is never removed. An absolute
   * path; created if missing. A path that is a symlink (even to a directory), a file, a FIFO, a
   * socket or a device is a `SandboxError` (`kern doctor --workspace` applies the same check). */
  workspace?: string | undefined;
  /** Upper bound, in bytes, on how large the workspace may grow across calls. Checked between calls
   * rather than enforced as a hard limit: the call that crosses it completes, and later calls
   * (`runCode`, `run` and kernel cells) are not run and return a `workspace_full` fault that says
   * how much the workspace holds and the cap. A positive integer, at most 2^53 - 1. What counts is the disk space of the workspace's
   * entries, as `du` counts it (a sparse file costs what it holds), each entry at least 4 KiB (what
   * an inode costs: a million empty files are 4 GiB), without `.deps`. The walk counts every entry
   * however many there are (it stops once past the cap), and a directory kern cannot read fails
   * the check closed with a `workspace_full` that names it. Host `writeFile`/`restore` are not
   * refused, but count for the next call. Default null (unbounded). */
  workspaceMaxBytes?: number | null | undefined;
  /** Stable identifier for a `persist` sandbox, so separate processes using the same name share one
   * resident box. 1-64 letters, digits, `_`, `.` or `-`, starting with a letter or digit. Only with
   * `persist: true` (else SandboxError). */
  name?: string | null | undefined;
  /** Keep a single resident box alive and run each call inside it (`kern exec`) instead of starting a
   * fresh box. The interpreter is still started anew for every call, so the saving over a fresh box is
   * small: it saves building the box, not the interpreter start (see BENCHMARKS.md, "Resident box vs
   * fresh box", measured here: `runCode('pass')` 26.4 ms against 29.6 ms for a fresh box, 0.89x;
   * `run(['/bin/true'])` 5.1 against 7.4 ms, 0.68x). Requires `name` and `workspace`.
   *
   * `open()` meets the live box of that name (any process, any Sandbox) or starts one; `setup` runs
   * only when the box is created. A box of that name built under another posture (image, workspace,
   * limits, network, mounts, tmpfs, user, capDrop, securityProfile, apparmor, depsReadonly, setup) is
   * refused with a SandboxError naming the differing options. The box outlives `close()` and the
   * process that opened it; `destroy()` (from any process) or `kern stop NAME` ends it, and so does
   * `persistTtlS`. It is weaker isolation than a fresh box: `/tmp` and other scratch persist between
   * calls (and count against `memoryMb`), and processes a call leaves running stay until the box
   * ends (the first call's `runtimeNotes` says so). Calls share the PID namespace but not each other's
   * processes: each call runs in a Landlock domain of its own and the box's `/proc` is mounted
   * `hidepid=invisible`, so a call neither lists, traces nor reads (`/proc/<pid>/{cmdline,environ,mem,fd}`)
   * another call's processes, and so cannot see another call's `env`, source or output; what calls
   * still share is the filesystem (workspace, `/tmp`), the network namespace (`lo`), System V IPC,
   * and signals by pid. Without Landlock in the kernel a call says so in a `warning:` note. Each call gets
   * a fresh box's posture (capabilities, seccomp, no_new_privs, AppArmor, account); a call's timeout
   * kills that call's processes only (a per-call cgroup as root; rootless, its process group: a
   * process that starts its own session escapes that kill and lives on in the box until it ends).
   * Not combinable with `egressAllow` (its proxy lives in the opening process) or `prewarm`; `kernel()`
   * is refused, and so is a `capDrop` that keeps SYS_ADMIN (whose locked mounts resident calls would not
   * join); `pycCache` is off (`pycCache: true` is refused). Default false. */
  persist?: boolean | undefined;
  /** Lifetime of the resident `persist` box, in seconds, from its start: kern's own deadline on the
   * box, enforced by the box's monitor, so it goes away even if every process that used it died. The
   * opener that creates the box sets it. Default 3600, at most 31,536,000 (a year). Only with
   * `persist: true`. */
  persistTtlS?: number | undefined;
  /** Memory limit in MiB (kern `--memory`), counting the box's `/tmp` scratch and any `vdisk:`
   * profile. Default 512, and that default is an explicit value: it wins over a `vcpu:` profile's
   * `memory`. `null` means no limit of its own: a `vcpu:` profile's `memory` applies when there is
   * one, else the box is uncapped. Exceeding it ends the call with an `oom` fault.
   * Bounds (SandboxError naming them otherwise, at `open()`): at least 32 (python with a few
   * imports takes 12 MiB, node 20 MiB, before any code of yours runs), at most 16,777,216 (16 TiB); fractions are allowed. The same
   * bounds hold for a `vcpu:` profile's `memory` (a bare integer there is bytes) and `kern run
   * --memory`. */
  memoryMb?: number | null | undefined;
  /** CPU limit in cores (kern `--cpus`). Default null: no limit of its own, so a `vcpu:` profile's
   * `cpus` applies when there is one, else no CPU limit. A number wins over the profile. From 0.01
   * (the kernel's smallest quota, 1 ms per 100 ms) to 8192 (more cores than Linux schedules on),
   * here and in a `vcpu:` profile. */
  cpus?: number | null | undefined;
  /** Maximum number of tasks in the box, which stops fork bombs (kern `--pids-limit`). Default 256.
   * An integer from 8 (a box needs its init, the interpreter and its threads) to 4,194,304 (the
   * kernel's PID_MAX_LIMIT); null for no cap. */
  pids?: number | null | undefined;
  /** Wall-clock limit per call, in seconds; always applied. The kern runtime enforces it from outside
   * the box by killing the box's PID 1, which ends every process in it (double-forked and `setsid`
   * ones too); the call then has a `timeout` fault. Default 30. From 0.01 to 604,800 (7 days), here,
   * per call and per kernel cell. */
  timeoutS?: number | undefined;
  /** LOOSENS ISOLATION when true: every `runCode`/`run` box, kernel and prewarmed box shares the
   * host's network namespace (rootless too): it can reach anything the host can, its loopback
   * included. Each result carries a `warning:` runtime note saying so. The box gets the host's
   * resolver configuration and trusts the host's CA bundle (as the `setup` box does;
   * `KERN_HOST_CA=0` turns the CA off). Default false: a network namespace with only `lo`. */
  network?: boolean | undefined;
  /**
   * Allow outbound traffic only to the listed domains (for example ["pypi.org",
   * "files.pythonhosted.org"]) rather than choosing between all or no network. Boxes get a private
   * network namespace whose only route out is kern's filtering proxy. Cannot be combined with
   * `network: true`. Applies to `runCode`/`run`; the `setup` box reaches every public host through
   * the same kind of proxy, and the literal addresses listed here (`setupNetwork`).
   *
   * Entries: `"pypi.org"` (that name), `".example.com"` (the domain and every subdomain; never a
   * substring: `example.com.attacker.test` does not match), either with `:port`; an IP literal
   * (`"127.0.0.1:9000"`, `"[::1]"`) allows exactly that address. Without a port an entry allows 80
   * and 443. Names are compared lowercase, IDNA-encoded, without a trailing dot. An empty entry, a
   * URL, a wildcard or a bad port throws SandboxError from the constructor. `[]` means no network.
   *
   * How it holds: each box has its own network namespace with only `lo`, where kern's PID 1 runs
   * a relay on 127.0.0.1:3128 that hands each connection (the socket itself) to a proxy in your
   * process; `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (and lowercase) point at it, `NO_PROXY` is
   * loopback, and `/etc/resolv.conf` names no resolver. The proxy admits `CONNECT host:port` and
   * absolute-form plain-HTTP requests (the `Host` header must match; one request per connection)
   * for listed hosts only; it resolves allowed names itself (a denied name is never resolved) and
   * refuses the request if any address is outside the public internet (every block of IANA's
   * special-purpose registries that is not globally reachable: loopback, private, link-local
   * with 169.254.169.254, CGNAT, benchmarking, multicast, reserved, and IPv4-mapped/NAT64/6to4
   * forms of them; the documentation ranges count as public); a name never reaches such an
   * address, and the way to it is the address itself, listed. It dials the address it checked.
   * A tunnel's first bytes are read: a TLS ClientHello (required on 443) must name the CONNECT
   * host in its SNI; a plaintext HTTP request (through a tunnel, or to a listed loopback
   * address) must name it in `Host` and gets one request per connection (first bytes that could
   * begin a request line are held until that line ends, 30 s at most). Every decision is logged with
   * `tracing` and summarised in `runtimeNotes` (`note: egress denied: …`, `note: egress allowed:
   * …`). A box holds at most 256 connections through the proxy at once (more are closed), so it
   * can't exhaust your process's descriptors. A listed loopback address (`"127.0.0.1:8080"`, or
   * `"127.0.0.1"` for ports 80 and 443) also gets a listener at that address in the box, which
   * the proxy tunnels to the host's (same checks): clients that skip the proxy for loopback
   * (`NO_PROXY`), curl and raw sockets reach the listed service with the default environment, and
   * other loopback ports stay the box's own. Measured here: a CONNECT tunnel moves about 1 GB/s (995 MiB/s, 0.39× a direct loopback
   * connection; BENCHMARKS.md). Boxes trust the host's CA bundle, as with `network: true`. Residual risks: data can leave
   * through an allowed host, and TLS to an allowed name can carry anything: a `Host` inside it
   * naming another site of the same server (domain fronting) is out of any SNI check's sight.
   */
  egressAllow?: readonly string[] | undefined;
  /** *(Addition to the published surface.)* Secrets the code may use but never read: `{ NAME: {
   * value, hosts, headers? } }`. Each box's environment gets `NAME=kern-secret-<32 to 34 random
   * hex digits>`, a placeholder drawn at `open()` for this Sandbox alone; the egress proxy (in
   * your process) writes `value` in its place in the request headers `headers` names, of
   * requests to one of `hosts`, and nowhere else. The value never enters a box: not its
   * environment, `/proc`, files or memory, nor `runtimeNotes`, errors or logs.
   *
   * - Needs `egressAllow`, and every host must be allowed by it (`"api.example.com"`, or
   *   `"host:port"` for one port; a host names one host exactly, not a domain). A `NAME` is a
   *   variable name (`[A-Za-z_][A-Za-z0-9_]*`) that `env` does not also set; a call's own `env`
   *   naming it is overridden by the placeholder. `value` is a non-empty string without CR, LF or
   *   NUL. Mistakes throw a `SandboxError` (`ERR_INVALID_OPTION`) from the constructor, naming
   *   the secret, never its value.
   * - *(Addition.)* `headers`: the request headers the value may go into (any case). Default:
   *   `Authorization`, `X-Api-Key`, `Api-Key`, `X-Goog-Api-Key`, `X-Auth-Token`, `Private-Token`
   *   (`Authorization: Basic` credentials holding the placeholder are re-encoded with the value).
   *   Headers servers reflect or route by (`Host`, `Origin`, `Referer`, `User-Agent`,
   *   `Access-Control-Request-*`, `Forwarded`, `X-Forwarded-*`) and framing or hop-by-hop ones
   *   are refused here. A request to one of `hosts` holding the placeholder anywhere else (the
   *   URL, a header name, another header, the body) is refused by the proxy (403, or the body
   *   cut before its end reaches the server) without the value, and a runtime note says why:
   *   servers echo URLs (error pages, redirects) and some headers (CORS) into their answers.
   * - What one of `hosts` answers is scrubbed: the value in the response's headers or body,
   *   as it is, percent-encoded, JSON- or HTML-escaped, in hex, or in base64 / base64url at any
   *   alignment, reaches the box as the placeholder. The proxy asks for an uncompressed answer
   *   (`Accept-Encoding: identity`) and refuses (502) a compressed body it could not check; the
   *   body is passed on chunked (to an HTTP/1.0 client: to the close). A host that deliberately
   *   echoes credentials in another form (hashed, reversed, double-encoded, split) can still
   *   hand the value to the box: list only hosts that don't.
   * - HTTPS: for a connection to one of `hosts` (a `CONNECT`, or a listed loopback address
   *   reached directly), the proxy checks the ClientHello's SNI as for any tunnel, terminates TLS
   *   with a certificate for that host from a CA made at `open()` for this Sandbox (ECDSA P-256;
   *   its private key stays in your process's memory, never written anywhere), and opens its own
   *   TLS connection to the real host, verified against the store image pulls use (the system's,
   *   and `KERN_REGISTRY_CA`; a failure there is a runtime note naming that variable). Boxes
   *   trust that CA's certificate (appended to the bundle `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`,
   *   `NODE_EXTRA_CA_CERTS`, `PIP_CERT`, `CURL_CA_BUNDLE` name); a connection to any other host
   *   is tunnelled as before, so the CA vouches for nothing else. The CA is also name-constrained
   *   to `hosts`: a certificate it signed for any other site fails verification. Only HTTP/1.1
   *   is spoken there (ALPN `http/1.1`); plain HTTP to a listed host is handled the same way.
   * - One request per connection to a secret's host: its head must name that host (origin-form
   *   target, one `Host` equal to the host and port reached, 443 implied over TLS, 80 over plain
   *   HTTP; else 400), it goes out with `Connection: close`, its body by its own framing, and
   *   nothing sent after it on that connection reaches the server.
   * - To every other host the placeholder is sent as it is: it is a random string, worthless
   *   outside this Sandbox's proxy. A host `setEgressAllow` removes is simply unreachable.
   * - Every box of the Sandbox gets the placeholders (calls, kernels, `spawn()`, `terminal()`,
   *   prewarmed boxes); the `setup` box does not (it installs, and trusts only the host's CAs).
   *
   * Measured here (BENCHMARKS.md, "egress proxy overhead", dev build, a machine shared with other
   * builds): a small HTTPS GET on a new connection took 3.4 ms (median) through the proxy to a
   * secret's host, 3.5 ms tunnelled and 2.3 ms direct (`network: true`); between runs the medians
   * moved by up to 1 ms, so termination's own cost is below what this machine can resolve. */
  secrets?: Record<string, { value: string; hosts: readonly string[]; headers?: readonly string[] | undefined }> | undefined;
  /** Additional host-to-box bind mounts: `{ hostSrc: boxTarget }` or `{ hostSrc: [boxTarget, "ro" | "rw"] }`,
   * read-only unless `"rw"`; at most 16. LOOSENS ISOLATION by what you bind.
   *
   * Refused with `MountRefused` at `open()`: a relative or missing source; a source that is,
   * contains, or lies inside `/`, `/etc`, `/proc`, `/sys`, `/dev`, `/boot`, `/root`, `/run`,
   * `/var/run`, `$XDG_RUNTIME_DIR`, a home directory itself, or a home's `.ssh`, `.gnupg`, `.aws`,
   * `.config`, `.docker`, `.kube`, `.npmrc`, `.netrc`; a directory holding a container-engine or
   * D-Bus socket. The check is made on the source as resolved through symlinks, and kern mounts
   * only the inode that was checked. Targets must be absolute and normalised, not `/`, not under
   * `/proc`, `/sys`, `/dev` or the workspace; below the top level they must already exist in the
   * image (never reached through its symlinks). A mount at `/tmp` replaces the default scratch.
   * Running as root, the mount is idmapped like the workspace (its owner appears as the box's
   * account); a writable mount then needs a filesystem that supports idmapped mounts. */
  mounts?: Record<string, MountSpec> | undefined;
  /**
   * In-box scratch filesystems (kern `--tmpfs`), given as `{ "/path": "64m" }` or `["/path"]`.
   *
   * **By default `/tmp` gets a tmpfs of `DEFAULT_TMPFS_MB` MiB.** The box root is read-only; without a
   * writable `/tmp`, tools that want a temp file tend to fall back to the working directory and leave
   * their scratch in the persistent workspace. Use `{ "/tmp": "512m" }` to change the size or `{}` for
   * no scratch at all; binding your own directory at `/tmp` through `mounts` also replaces the
   * default. tmpfs pages count against the box's memory limit, so an unbounded writer is killed for
   * memory instead of filling the host's disk.
   *
   * **Scratch is per call.** Each `runCode`/`run` starts a new box with a new, empty tmpfs; only the
   * workspace carries over. (Inside a `kernel()`, which is one long-lived box, scratch would persist and
   * its usage would add up across cells.) Anything a later call needs to find belongs in the
   * workspace, not in `/tmp`.
   *
   * The real limit is the smaller of the tmpfs size and `memoryMb`, which tools such as `df` inside the
   * box cannot see: an oversized tmpfs reports plenty of free space, and writing past the memory limit
   * ends in an `oom` fault rather than `ENOSPC`. That fault's message points at the scratch mount.
   *
   * A size is at least 4096 bytes (one page) and at most 16 TiB, here and for a `vdisk:` profile.
   */
  tmpfs?: Record<string, string | null> | readonly string[] | undefined;
  /**
   * kern resource profiles to attach, such as ["vcpu:heavy", "vgpio:leds", "vdisk:scratch"], each
   * referring to a `[[vcpu]]`, `[[vgpio]]` or `[[vdisk]]` section of `~/.config/kern/kern.toml`: a
   * CPU/memory allotment, a set of GPIO/I2C/SPI devices (the only route to host hardware), or a
   * size-limited scratch disk. Every entry must be a known prefix plus an alphanumeric name, so an
   * entry cannot be used to inject a command-line flag: an entry must match
   * `^(vcpu|vgpio|vdisk):[A-Za-z0-9]{1,64}$`, checked by the constructor.
   *
   * The file is `$KERN_CONFIG` when set (an absolute path), else `~/.config/kern/kern.toml`. It is
   * read at `open()`, and only when `profiles` is non-empty:
   *
   * ```toml
   * [[vcpu]]                # a CPU + memory slice; at most one per Sandbox
   * name = "heavy"          # 1-64 ASCII letters or digits, unique within its kind
   * cpus = 1.5              # optional: cores, > 0
   * memory = "2G"           # optional: "512M", "2G", or an integer number of bytes (`memory_mb` is refused)
   *
   * [[vgpio]]               # host devices: the only way to grant a box hardware
   * name = "leds"
   * devices = ["/dev/gpiochip0", "/dev/i2c-1"]   # character devices only
   *
   * [[vdisk]]               # a size-capped scratch area, fresh in every box
   * name = "scratch"
   * size = "256M"           # same forms as `memory`
   * path = "/scratch"       # optional: an absolute box path, default /scratch
   * ```
   *
   * - `vcpu`: explicit options win. `memoryMb` left out is its 512 default, which wins; only
   *   `memoryMb: null` lets the profile's `memory` apply (uncapped if it has none). `cpus` left out
   *   or null lets the profile's `cpus` apply; a number wins.
   * - `vgpio`: each device is resolved on the host (symlinks such as `/dev/serial/by-id/...`
   *   followed to the real node, which must be a character device; `/dev/mem`, `/dev/kmem` and
   *   `/dev/port` are refused) and bound read-write into the box at the path as written when it is
   *   under `/dev`, else at `/dev/<file name>`, never over the box's own `/dev` nodes. kern binds
   *   only the node it checked (same inode and device number): one replaced after `open()` makes
   *   the call a `startup_failed` fault. The node's host permissions still apply: rootless the
   *   box's uid is yours; run as root, the box is an unprivileged host id, which must be able to
   *   reach and open the node (its mode, group or ACL).
   * - `vdisk`: in 0.1 a tmpfs with that size, so it is memory-backed and counts toward `memoryMb`:
   *   writing past `size` fails with ENOSPC, and writing past `memoryMb` ends in an `oom` fault
   *   that names the scratch. Its `path` must not be `/`, under `/proc`, `/dev`, `/sys`, `/etc`
   *   or `/tmp`, over or inside the workspace, or overlap a `tmpfs` or `mounts` target.
   *
   * Every mistake throws SandboxError from `open()`, naming the file and line (`kern.toml:7: ...`)
   * where there is one: an unknown entry or kind, a missing file, malformed TOML, an unknown key, a
   * duplicate name, a missing or non-character device, a bad size or path, two `vcpu` entries.
   */
  profiles?: readonly string[] | undefined;
  /** Extra environment variables for the code, on top of PATH, HOME, LANG and HOSTNAME (yours win).
   * They travel to the runtime over its private control socket: never on a command line, never in a
   * file. The host's own environment never reaches the box.
   *
   * Bounded by what Linux can exec, checked by the constructor (SandboxError naming the limit):
   * each `NAME=value` under 128 KiB (MAX_ARG_STRLEN), and all of them together within the exec
   * budget (a quarter of the stack rlimit, at most 6 MiB: 2 MiB with the usual 8 MiB) less 256 KiB
   * kept for the image's environment, kern's own variables and the call's arguments. A call whose
   * whole argv and environment (`run()`'s arguments, `runCode`'s code for bash, sh and node) would
   * not exec is a SandboxError before its box starts. Large data belongs in a workspace file. */
  env?: Record<string, string> | undefined;
  /** Capture limit for stdout and for stderr, each, in bytes; output beyond it is dropped and
   * `truncated` is set. Default 64 MiB. A positive integer, at most 268,435,456 (256 MiB). */
  maxOutputBytes?: number | undefined;
  /** true (default): `memoryMb`, `pids` and `cpus` are enforced by a cgroup of the box's own (cgroup
   * v1 or v2; unprivileged on v2 through a systemd-delegated subtree). Where no cgroup can be
   * written (an unprivileged user on cgroup v1), the caps fall back to rlimits and a `warning:` line
   * in `runtimeNotes` says so. false: rlimits only (memory as RLIMIT_DATA, which does not count
   * `/tmp`; pids as RLIMIT_NPROC; no CPU cap), with a note. The cgroup costs nothing per call: see
   * BENCHMARKS.md. */
  enforceLimits?: boolean | undefined;
  /** When true, refuse to start a box unless its memory and pids limits are verifiably in force (checked
   * against the cgroup), instead of falling back to running without them (kern `--require-limits`).
   * Default false.
   *
   * `open()` starts one box and kern reads `memory.limit_in_bytes`/`memory.max` and `pids.max` back
   * from its cgroup and checks the box's monitor is in it; anything short of that makes `open()`
   * throw a SandboxError saying why and where caps can be enforced (as root, or under a delegated
   * cgroup v2 subtree). Every later box is checked the same way before it starts. Unprivileged
   * on cgroup v1 (as on this project's machines) it always refuses. Contradicts
   * `enforceLimits: false` (SandboxError). */
  requireLimits?: boolean | undefined;
  /** ADDITION to the published surface: controls `open()` must find in force, or it throws a
   * SandboxError (code `ERR_ISOLATION_UNAVAILABLE`) naming each one this host cannot supply,
   * with why and what to do, instead of quietly giving less. Measured as `isolation()` measures
   * (one probe box, before `setup` runs): `"filesystem"` and `"process"` need the box's own mount
   * and PID namespaces; `"network"` no host network (the default, or `egressAllow`);
   * `"limits"` the memory and pids caps held by a cgroup (not the rlimit fallback: an
   * unprivileged caller on cgroup v1 can't have that; `enforceLimits: false` never has it);
   * `"seccomp"` the untrusted profile (`securityProfile: "untrusted"`). An unknown name, or
   * `"network"` with `network: true`, is a SandboxError from the constructor. */
  requireIsolation?: readonly IsolationControl[] | undefined;
  /** `"untrusted"` opts into an extra hardening bundle: a seccomp allowlist, dropping all capabilities
   * and a read-only root; paths bound through `mounts` remain writable. Default null: kern's standard
   * posture, which has one small seccomp filter of its own in every box: a set-id mode bit can't be
   * set (`chmod`/`fchmod`/`fchmodat`/`fchmodat2`, and `open`/`creat`/`mknod`/`mkdir` with such a
   * mode, answer EPERM, 32-bit `int 0x80` calls included; `openat2` and `io_uring_setup` answer
   * ENOSYS), so nothing a box writes in the workspace or a `"rw"` mount is ever set-id on the host.
   *
   * The allowlist follows Docker's default seccomp profile plus what Python, Node and bash were measured
   * to call; it covers every box of the Sandbox (`runCode`, `run`, kernels, prewarmed boxes, `setup`).
   * - Escape syscalls (the mount family, `setns`, `clone`/`unshare` with namespace flags, `ptrace`,
   *   `process_vm_*`, `bpf`, `perf_event_open`, `keyctl`/`add_key`/`request_key`, `userfaultfd`,
   *   `kexec_*`, module loading, `open_by_handle_at`, `reboot`, `swapon`, `syslog`, clock setting,
   *   `iopl`/`ioperm`, `ioctl` `TIOCSTI`/`TIOCLINUX`, `AF_ALG`/`AF_VSOCK` sockets, …) fail with EPERM;
   *   the code runs on, and the result's `fault` is `escape_blocked`, naming each syscall it tried
   *   (each name once). Kernel cells get the EPERM but no per-cell fault in 0.1.
   * - `clone3`, `io_uring_*`, x32 numbers and syscalls on neither list answer ENOSYS, so libc and libuv
   *   fall back as they do on an older kernel.
   * - A 32-bit (`int 0x80`) syscall kills the process: an `escape_blocked` fault says so.
   * - The root is read-only and `/workspace`, the scratch tmpfs and writable `mounts` stay writable,
   *   as in the standard posture; a `capDrop` that keeps a capability contradicts the profile
   *   (SandboxError).
   * x86_64 only in 0.1 (elsewhere: SandboxError). Cost, measured here: a few ms per box start
   * (BENCHMARKS.md, the `untrusted` rows; loading the 1,700-instruction allowlist into the kernel is
   * 1.2 ms of it) and about 40 ns per syscall afterwards. */
  securityProfile?: string | null | undefined;
  /** Name of an AppArmor profile, already loaded on the host, to apply when the box starts its
   * process; kern refuses to start the box if the profile is not loaded. Default null (no AppArmor
   * profile).
   *
   * Fails closed: with AppArmor off on the host, or the profile not among the loaded ones
   * (`/sys/kernel/security/apparmor/profiles`), every call returns a `startup_failed` fault that
   * says so and the code never runs (the `setup` box too). The workload enters the profile at
   * exec (`/proc/self/attr/apparmor/exec`). Only the refusal is tested on this project's
   * machines, which have no AppArmor. */
  apparmor?: string | null | undefined;
  /** Linux capabilities removed in every box (kern `--cap-drop`). Default ["ALL"]. This can affect
   * workloads: for example, listening on a port below 1024 inside the box needs NET_BIND_SERVICE.
   * `[]` removes none.
   *
   * Names are Linux's (`"NET_BIND_SERVICE"`, `"CAP_SYS_ADMIN"`, any case); an unknown one throws
   * SandboxError. The workload keeps every capability not listed, from the bounding set to the
   * effective set (and, for an image `USER` other than root, the ambient set). Kept capabilities
   * count only inside the box's own user namespace: box root is never host root, and nested user
   * namespaces stay refused. */
  capDrop?: readonly string[] | undefined;
  /** The account every box runs as, `"<user>[:<group>]"`, each part a name or a numeric id (e.g.
   * "node", "1000", "1000:1000"). Default null: the image's own `USER`, resolved in the image's
   * /etc/passwd. The workspace appears owned by that account (an idmapped mount; nothing on disk
   * changes, and no host user gains access), and what it writes lands owned by the workspace's owner.
   *
   * A name is looked up in the image's /etc/passwd (and a group in its /etc/group) at `open()`: an
   * account the image lacks throws SandboxError there; a number needs no entry (its group is then 0).
   * The account applies to every box: `runCode`, `run`, kernels, prewarmed boxes and `setup`. Since
   * the workspace is idmapped to that account, files it closes to others (0600, 0700) stay readable
   * through the host file API (`readFile`, `snapshot`), which works as the workspace's owner; no ACL
   * or subordinate id range is needed, rootless or as root. The account must lie within the box's
   * 65,536 ids (uid and gid 0 to 65535), rootless too (changed: rootless took any id before).
   * Rootless, supplementary groups are not set (the kernel allows one mapped id). */
  user?: string | null | undefined;
  /** Mount what `setup` installed (`/workspace/.deps`) read-only in every `runCode`/`run` box and
   * kernel, so one call cannot tamper with dependencies that later calls load. Default true.
   * `open()` makes `.deps` in every workspace before any box runs, so it always applies. With
   * `false`, boxes may write there (and later boxes run what they wrote); the setup box still runs
   * nothing from it. */
  depsReadonly?: boolean | undefined;
  /** *(Addition to the published surface.)* How the `setup` box reaches the network.
   * `"public"` (default): every public host on ports 80 and 443 through kern's egress proxy (the
   * box has no route of its own; `HTTP(S)_PROXY` point at the proxy, which resolves names
   * itself), never the host's loopback, private, link-local or metadata addresses, so an install
   * script can't reach the host's own services; a literal address listed in `egressAllow`
   * (`"10.0.0.5:3141"`) is reachable too. `"host"`: the host's network namespace as it is, for a
   * private package index by name or a proxy of your own. A failed setup's error lists the
   * destinations the proxy refused. */
  setupNetwork?: "public" | "host" | undefined;
  /** Byte-compile the image's Python library path once per image (into `$KERN_HOME/pyc`) and mount
   * the result read-only in every box, where python reads the image's own modules' bytecode from
   * it. Default true.
   *
   * The box root is read-only, so an image shipped without `.pyc` files (the official `python:*`
   * images delete them) otherwise recompiles every module it imports at every start. The cache
   * is built in the background after the first `open()`; calls made before it is ready run
   * without it. Results are the same either way. Measured here
   * on an image without `.pyc` files: a `runCode` importing nine common stdlib modules took 100 ms
   * with the cache against 362 ms without (built in 1.5 s, once per image); on an image that ships
   * them (Debian's python3), no difference (BENCHMARKS.md). The `"host"` image is left alone (the host's python
   * has its compiled files). If the image has no `python3`, or compiling fails, python calls carry
   * a `note:` saying so.
   *
   * Changed: the cache is shared by every Sandbox of the image, so it is built from the image
   * alone: a box with an empty workspace of its own, no mounts, no network, no capabilities,
   * running `python3 -I` (no environment, no user site, no cwd on the import path), so nothing
   * any box wrote can get into it; it is published complete by an atomic rename and is
   * read-only on the host (files 0444, directories 0555) and in the box.
   * Changed: `PYTHONPYCACHEPREFIX` is no longer set. `PYTHONPATH` starts with `/.kern-pyc/hook`,
   * where a `sitecustomize` maps only the image's own directories to the cache, then runs the
   * image's (or your) `sitecustomize`, and takes itself off `sys.path`. Everything else compiles
   * as without the cache: `py_compile`, `compileall` and `zipfile.PyZipFile` work, and modules
   * in the workspace get their `__pycache__` there. A stdlib module's `__cached__` names its file
   * in the cache. `python3 -I`/`-E`/`-S` run without the cache. */
  pycCache?: boolean | undefined;
  /** true (default): `result.files` lists the workspace files each call created or modified, found by
   * scanning the workspace before and after the call (never following a symlink), so its cost grows
   * with the number of files: about 52 ms per call at 10,000 files here (BENCHMARKS.md). The scan
   * stops at 100,000 entries, with a note. `.deps` is not reported. Kernel cells report `[]`.
   * false: `result.files` is always `[]` and no scan happens (unless `workspaceMaxBytes` needs it). */
  trackFiles?: boolean | undefined;
  /** Receives each stdout chunk as a Buffer while the code runs. Streaming does not replace capture:
   * `result.stdout` still holds the (capped) full output. A slow callback holds the box back (its
   * writes wait, within its timeout) rather than queueing output in this process; a returned
   * promise is awaited (up to 10 s) before the next chunk. */
  onStdout?: ((chunk: Buffer) => void | Promise<void>) | undefined;
  /** Receives each stderr chunk as a Buffer while the code runs; `result.stderr` is still filled.
   * Paced like `onStdout`. */
  onStderr?: ((chunk: Buffer) => void | Promise<void>) | undefined;
  /** Number of boxes to start ahead of time, each with an idle, booted interpreter, so that a Python
   * `runCode` can take one instead of paying for a box and interpreter start itself (see
   * BENCHMARKS.md).
   *
   * Isolation is unchanged: a pre-started box runs exactly one call and is then discarded, so every
   * call still gets a box in which nothing else has run; only the start-up happens earlier. Calls that
   * stream output, use a language other than Python, or need a different posture than the pooled
   * boxes start a box the normal way.
   *
   * Default 0. Each warm box keeps an interpreter resident for the whole session whether it is used or
   * not, so the caller decides whether that is worth it. Refilling a slot takes time, so N behaves as a
   * burst allowance: up to N calls in quick succession are served warm and later ones start normally.
   * An integer from 0 to 64. A call's `timeoutS` is enforced the same way on a prewarmed box. Closing the Sandbox
   * ends the pool; no process is left behind. */
  prewarm?: number | undefined;
  /** ADDITION (issue 21): fork each python `runCode` cell's box from a zygote. At `open()` the
   * Sandbox starts one python interpreter with the results driver imported, in a box of its own;
   * it never runs a cell, nor anything a box could have written (it starts outside the workspace,
   * without the Sandbox's `PYTHONPATH`, `HOME`, `PATH` or other `PYTHON*` paths, which each call
   * gets back in its own box). Each python `runCode` cell that may take it (no `env`, `cwd` or
   * `stdin` of its own; streaming and `signal` calls included) is a fork of it, which
   * then makes its own user, mount, PID, network, IPC, UTS and cgroup namespaces, gets a fresh
   * masked `/proc`, `/tmp`, `/dev/shm` and `/dev/pts`, is placed in a cgroup of its own with the
   * Sandbox's caps, and takes the posture a fresh box's workload takes (no capabilities,
   * `no_new_privs`, a Landlock domain, the set-id filter, a new session keyring) before the cell
   * runs. Its answers are a fresh box's (the same stdout, results, errors and faults; a timeout,
   * an OOM and `maxOutputBytes` work the same), and no state of another call is visible in it.
   * Other cells (other languages, `run()`, the calls above) start a fresh box as before.
   *
   * What calls of one zygote share, being forks of one process: the interpreter's string hash
   * secret (`hash("x")` is the same in each call; a fresh box draws its own), and the memory
   * layout (ASLR) and the stack canary (AT_RANDOM), the zygote's in every call. `random` is
   * reseeded at each fork, and `os.urandom`, `secrets` and `uuid.uuid4()` read the kernel's
   * generator, so every other random value is the call's own. A call's PID 1 is a fork of the
   * zygote too: the call can list `/proc/1/fd` and write PID 1's `oom_score_adj` (a fresh box
   * refuses both), which touches only that call. Every call runs inside the zygote's box: if that
   * box ends (killed from outside, the host's OOM killer), the calls running then end with it,
   * and later ones run in fresh boxes, with a note.
   *
   * Refused at `open()`, before any box, with `persist`, `securityProfile: "untrusted"`,
   * `apparmor`, a `capDrop` that keeps capabilities, `user` (or an image whose USER is not root),
   * `network: true` and `egressAllow`: the forks would not get them; with a writable mount, or an
   * `env` naming `LD_*`, `PYTHONHOME`, `PYTHONPLATLIBDIR` or glibc's path variables (read only at
   * start, from a place a box could write). An image whose `python3`
   * can't start the zygote is refused at `open()` too, with python's own words. Default false. */
  zygote?: boolean | undefined;
}

/** The interpreter a snippet runs under. `bash` and `sh` are distinct shells (bash vs. the POSIX
 * shell), and the image must contain the one requested; asking for a shell the image lacks (bash on
 * alpine, say) yields an `exec_failed` fault that names it, never a silent substitute. */
export type Language = "python" | "bash" | "sh" | "node" | "typescript";
// ADDITIONS to the published `Language` ("python" | "bash" | "sh" | "node", all still valid):
// "typescript" (see NODE CELLS below); and "node" now runs through kern's node driver.
/**
 * NODE CELLS (an ADDITION to the published behaviour of `language: "node"`). A node `runCode`,
 * and every cell of `kernel({ language: "node" })`, is run by kern's node driver (`node -e`,
 * reading the cell from a channel of the box, as the python driver does):
 * - The value of the last statement, when it is an expression, is a `Result` (`text/plain` as
 *   `util.inspect` renders it); a promise is awaited first; `undefined` gives no result. What
 *   the cell prints, its exit code (0; 1 after an uncaught error, whose stack goes to stderr;
 *   `process.exitCode`/`process.exit()` as set) and its event loop (a one-shot call ends when it
 *   is empty, as `node -e` does) are as before.
 * - Rich output: `display(value)` sends a value's MIME bundle as a result while the cell runs,
 *   `display(data, mime)` sends `data` as that type (a Buffer or Uint8Array as base64, e.g.
 *   `display(pngBuffer, "image/png")`). An object with a `[Symbol.for("Jupyter.display")]()`
 *   method (the hook Deno's Jupyter kernel reads) returning `{ [mime]: data }` gives those
 *   forms beside `text/plain`, as a last value or through `display()`.
 * - `import` declarations work in a cell (`import fs from "node:fs"`,
 *   `import { a } from "./mod.mjs"`, relative to the current directory): the driver rewrites
 *   them, on their own lines, to `await import()` after parsing the cell with acorn, in the
 *   box. Top-level `await` works.
 * - In a kernel, state persists across cells in one Node process, evaluated in V8's REPL mode
 *   (as Chrome DevTools' console and Deno's Jupyter kernel are): a later cell may declare the
 *   same `let`, `const` or `class` again. An error thrown after a cell (a timer's) is printed
 *   on stderr as `Uncaught ...` and the kernel lives on. Timeout, `signal` and teardown are
 *   the python driver kernel's.
 * - "typescript": the cell's types are stripped by the box's Node (`module.stripTypeScriptTypes`,
 *   Node >= 22.13 / 23.2) and it then runs as a node cell. Where the box's Node cannot strip
 *   types, `kernel()` rejects at once (as a node kernel does where the box has no node); a `runCode` cell does not run: exit code 1 and stderr saying which Node it needs and which it
 *   found (the check is the box's: the host does not know the image's Node version). Tested
 *   here both ways: the test image's Node 18 refuses; Node 24 bound into the box strips (enums
 *   included, `transform` mode) with no warning on the cell's stderr. Newer Node reserves more
 *   address space at start: where the memory cap falls back to `RLIMIT_DATA` (unprivileged on
 *   cgroup v1, see `runtimeNotes`), Node 24 did not start under the default 512 MiB ("Failed to
 *   reserve virtual memory for CodeRange") and did under `memoryMb: 2048`; Node 18 starts under
 *   the default.
 * Measured here (debug build, the 2-core machine loaded, load average about 5, medians of 21):
 * a node `runCode` that prints and returns a value takes 239 ms, against 209 ms for
 * `run(["node", "-e", same])` (the driver's start: the inspector session and acorn, 246 KB,
 * sent and compiled at each start); a node kernel's first cell 205 ms after `kernel()`, then
 * a cell `1 + 1` 0.6 ms (median of 201).
 */

/** Overrides for a single `runCode()`/`run()` call. Anything omitted falls back to the value given to
 * the Sandbox; a value given here affects only this call. Passing `null` for a callback turns streaming
 * off for this call. */
export interface PerCallOptions {
  /** Wall-clock limit in seconds for this call; omitted means the sandbox's `timeoutS`. */
  timeoutS?: number | undefined;
  /** stdout chunk callback for this call, or null for none; omitted means the sandbox's `onStdout`. */
  onStdout?: ((chunk: Buffer) => void) | null | undefined;
  /** stderr chunk callback for this call, or null for none; omitted means the sandbox's `onStderr`. */
  onStderr?: ((chunk: Buffer) => void) | null | undefined;
  /** ADDITION to the published surface: called with each `Result` of the call as the cell
   * produces it (a `display()` while the cell still runs), in `results`' order, and always
   * before the promise resolves. Not ordered against `onStdout`/`onStderr` chunks (another
   * channel). Each is a Result of its own, equal to its entry in `results` (a Jupyter display
   * that the cell later updates with `update_display_data` is delivered as first shown, and
   * `results` holds its update). Under the rules of `onStdout`: a callback that throws does not
   * break the call; the first throw becomes a runtime note and later results are still
   * delivered. Never called for `run()` and languages other than python (they have no
   * results). */
  onResult?: ((result: Result) => void) | null | undefined;
  /** ADDITION to the published surface: `onStdout`/`onStderr` receive whole lines: each chunk
   * ends with `\n` (it may hold several lines), and what is left after the last newline is
   * delivered when the call ends, before the promise resolves (a call that rejects, e.g. on
   * abort, delivers it too). Default false: chunks as the box's pipes give them (a `print` can
   * arrive in several pieces). Not a boolean: a SandboxError. */
  lineBuffered?: boolean | undefined;
  /** ADDITION to the published surface: environment variables for this call only, over the
   * Sandbox's `env` (a name in both takes this call's value) and under the same rules: string
   * values, no empty name, no `=` in a name, no NUL byte, within what Linux can exec (a
   * SandboxError says which rule an entry breaks). Like the Sandbox's, they reach the workload's
   * environment only: never its argv, never a file. A Python `runCode` with `env` does not
   * take a `prewarm`ed box (that interpreter started under the Sandbox's environment). */
  env?: Record<string, string> | undefined;
  /** ADDITION to the published surface: the workload's working directory for this call,
   * relative to the workspace (`"src"`, `"a/b"`, `"."`); an absolute path must name the
   * workspace (`/workspace`) or a directory under it. Omitted: the workspace itself. `..` is
   * resolved by name and may not lead out of the workspace; the rest is resolved in the box.
   * SandboxError, naming the cause: a path outside the workspace or escaping it through `..`
   * (before any box starts), a directory that does not exist in the box or is not a directory,
   * or one whose symlinks lead out of the workspace (the box checks, and runs nothing). A
   * Python `runCode` with `cwd` runs its code there (and imports from there) and does not take
   * a `prewarm`ed box. */
  cwd?: string | undefined;
  /** ADDITION to the published surface: what the workload reads on its stdin (fd 0), a string
   * (as UTF-8) or a Buffer, delivered through a pipe and then closed, so the workload reads
   * it and then end-of-file. Omitted: stdin is `/dev/null`, as before. At most 16 MiB (a
   * SandboxError over it: put larger input in a workspace file). A workload that exits without
   * reading it all just leaves the rest unread. A Python `runCode` with `stdin` does not take
   * a `prewarm`ed box. */
  stdin?: string | Buffer | undefined;
  /** ADDITION to the published surface: aborts the call. Aborting ends the call's box and
   * every process in it (the path `close()` takes, for this call's box alone; in a `persist`
   * sandbox, the call's processes as its timeout does), and only once they are gone does the
   * promise reject, with `signal.reason` (an `AbortError` `DOMException` unless the abort
   * gave another), as Node's own APIs do. A signal already aborted rejects at once, without
   * starting a box. A call that finished before the abort resolves as usual. A Python
   * `runCode` with a `signal` does not take a `prewarm`ed box. Not an `AbortSignal`: a
   * SandboxError. Measured here (BENCHMARKS.md, "Steered processes"): the promise rejects
   * 2.9 ms after `abort()`, and nothing of the box is left in the host's `/proc` 6.8 ms after
   * it (a host child spawned with a signal: 0.35 and 1.9 ms). */
  signal?: AbortSignal | undefined;
}

/** A configured sandbox session. Files persist between calls in an on-disk workspace, while every
 * `runCode`/`run` executes in a brand-new, short-lived box. Defaults are the safe choice; options that
 * weaken isolation are marked. */
export class Sandbox {
  constructor(opts?: SandboxOptions);
  /** Prepare the session: resolve the image, create or check the workspace, run `setup`. Must be
   * awaited before `runCode`/`run`. Resolves to the sandbox itself. */
  open(): Promise<this>;
  /** End the session, removing the workspace only if `open()` created it. Safe to call more than once. */
  close(): Promise<void>;
  /** ADDITION to the published surface: `close()`, so that
   * `await using sb = await new Sandbox(opts).open()` (TypeScript 5.2+, or JS where `using` is
   * supported) closes it when the block ends. On Node 20, whose `Symbol.asyncDispose` may be
   * undefined, the method sits at `Symbol.for("nodejs.asyncDispose")`, the symbol Node itself
   * and TypeScript's helpers fall back to; nothing global is patched. */
  [Symbol.asyncDispose](): Promise<void>;
  /** ADDITION to the published surface: the isolation a box of this Sandbox really gets,
   * MEASURED once per Sandbox by a probe box with its posture (which reads its own namespaces,
   * seccomp state and uid map, compared with the host's) and kern's read-back of the caps from
   * the box's cgroup; later calls return the same measurement. Measured here (dev build, a busy
   * 2-core machine, 7 Sandboxes each): the first call 27 ms median as root, 41 ms unprivileged
   * (a `run(["true"])` there: 19-20 ms); later calls 0.4 ms. With `requireIsolation` the
   * measurement is made at `open()` and costs the same there. Needs `/bin/sh` and `readlink` in the image
   * (else a SandboxError, `ERR_ISOLATION_UNAVAILABLE`). A `persist` Sandbox is measured on a
   * fresh box of its posture. (Added:) `routes` has the report of every route a call can take,
   * each measured once in its own box (a spare, a zygote fork, a pool slot, a kernel, the
   * resident box, a spawned process, a terminal) by the first `isolation()`. Those tools are the image's, so an image can make them print
   * anything: the report never claims more than kern was asked to apply (`network: true` is
   * `"host"`, and `seccomp` is `"untrusted"` only with `securityProfile: "untrusted"`, whatever
   * the probe prints); the probe can only lower it. kern gives every box its own user, mount
   * and PID namespaces, so for those a lying image changes nothing kern did not already do. */
  isolation(): Promise<IsolationReport>;
  /** ADDITION to the published surface: a workspace file as a Node `Readable`, under
   * `readFile`'s rules (no symlink followed anywhere in the path, regular single-link files
   * only; refused with a SandboxError, `ERR_FILE`, emitted as the stream's `error`). The file
   * is opened once, when the stream is made; then it is read at most one `highWaterMark` (64
   * KiB) at a time, so memory stays bounded whatever its size. `offset` (default 0) and
   * `length` (default: to the end) pick a range; a range past the end yields what exists.
   * `destroy()`, the end, an error, or the Sandbox's `close()` closes the file (`close()`
   * destroys the streams still open, without an error: `pipeline()`/`finished()` report a
   * premature close). */
  createReadStream(path: string, opts?: { offset?: number; length?: number }): import("stream").Readable;
  /** ADDITION to the published surface: a Node `Writable` whose bytes land at `path`
   * ATOMICALLY when `end()` finishes: they go to an unnamed file (`O_TMPFILE`) in the same
   * directory, made when the stream is made, with `writeFile`'s rules (parents created, no
   * symlink followed, an existing non-regular or hard-linked target refused): no box, listing,
   * snapshot or `trackFiles` sees it while the stream is open. At the end it is named and
   * renamed over `path` (the target checked again: one a box turned into a symlink meanwhile is
   * refused). Until then readers see the old file; `destroy()` or an error drops the bytes and
   * leaves `path` as it was, as does the Sandbox's `close()` before the end. `'finish'` fires
   * once the file is in place. (A filesystem without
   * `O_TMPFILE` gets a named `.kern-write-*` temp file instead, removed the same way.) */
  createWriteStream(path: string): import("stream").Writable;
  /** Stop the resident box of a `persist` sandbox (its `name`, whoever started it) ahead of its TTL;
   * resolves once its state and cgroup are gone. Idempotent; without `persist`, or with no live box,
   * it does nothing. Another Sandbox on that box then throws a SandboxError on its next call. Works
   * without `open()`. */
  destroy(): Promise<void>;
  /** Run a code snippet (`language` defaults to "python") against the workspace in a new box with
   * no network. Files written to the
   * workspace persist; in-memory state does not. `timeoutS`,
   * `onStdout` and `onStderr` override the session's values for this call only (and, as
   * additions, `env`, `cwd`, `stdin` and `signal`: see `PerCallOptions`). */
  runCode(code: string, opts?: { language?: Language } & PerCallOptions): Promise<ExecutionResult>;
  /** Run a command given as an argv array (never parsed by a shell) in a new box. `timeoutS`,
   * `onStdout` and `onStderr` override the session's values for this call only (and, as
   * additions, `env`, `cwd`, `stdin` and `signal`: see `PerCallOptions`). */
  run(command: readonly string[], opts?: PerCallOptions): Promise<ExecutionResult>;
  /** Write `data` to a workspace-relative path directly from the host. Missing parent directories
   * are created; the file is replaced atomically (written under a temporary name, then renamed).
   * Every path component is resolved without following symlinks (`openat2` with
   * `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS`): `..`, absolute paths, a symlink
   * anywhere in the path, or an existing target that is not a regular file (or has other hard
   * links) are refused with SandboxError. Running as root, what it creates is owned by the
   * workspace's owner. */
  writeFile(path: string, data: Buffer | string): Promise<void>;
  /**
   * Read a workspace-relative file directly from the host, refusing to follow a symlink in any path
   * component.
   *
   * `maxBytes` is a size limit that REJECTS, not a length to read: a file larger than it makes the call
   * throw and returns nothing. It never hands back the first `maxBytes` bytes, so do not use it to peek
   * at a file header. Without it, files over 1 GiB are refused.
   *
   * Refused with SandboxError: `..`, absolute paths, a symlink anywhere in the path, and anything
   * that is not a regular file (a FIFO is refused without blocking) or has more than one hard
   * link (one may reach a file outside the workspace).
   */
  readFile(path: string, opts?: {
    maxBytes?: number | undefined;
    /** ADDITION to the published surface: read from this byte (default 0). With `offset` or
     * `length`, readFile returns a RANGE (what exists of it: a range past the end returns fewer
     * bytes, or none), and `maxBytes` (default 1 GiB) caps the range, not the file. Each a
     * non-negative integer (else SandboxError, `ERR_INVALID_OPTION`). */
    offset?: number | undefined;
    /** ADDITION to the published surface: read at most this many bytes (default: to the end). */
    length?: number | undefined;
  }): Promise<Buffer>;
  /** Save the entire workspace as a gzip-compressed tar at `dest`: a filesystem checkpoint only, with
   * no process memory. Regular files and directories are archived (`.deps` is not: `setup`
   * recreates it); symlinks, special files and names that are not valid UTF-8 are never followed
   * and left out, with a process warning (`KERN_SNAPSHOT_SKIPPED`) naming them. Written to a temporary file and renamed, so
   * `dest` is never half-written; `dest` may not be inside the workspace.
   *
   * Consistency: it refuses (SandboxError) while a call of this Sandbox is running or a kernel
   * is open, and calls started meanwhile wait for it. Bounded: at most 1,000,000 entries, 16 GiB
   * per file, 64 GiB in all.
   *
   * Changed: a file with holes (a sparse file) keeps them: only its data is archived, as a PAX 1.0
   * sparse member (what `tar --sparse --format=posix` writes; GNU tar, bsdtar and Python's
   * `tarfile` read it), and the size bounds count the bytes a file holds, not its apparent size:
   * a 3 GiB sparse file holding a few KiB snapshots in milliseconds to a few KiB. */
  snapshot(dest: string): void;
  /** Unpack an archive made by `snapshot()` into the workspace, rejecting symlink, `..` and absolute
   * members. The whole archive is checked before anything is written: a symlink, hardlink,
   * device or FIFO member, a `..` or absolute name (after PAX and GNU long names), a duplicate, a
   * member under `.deps`, or one over the limits makes it throw SandboxError with the workspace
   * untouched. Members are merged in: files in the archive replace what is there, other files
   * stay. Nothing is ever written outside the workspace or through a symlink a box planted. Same
   * consistency rule as `snapshot()`. Changed: a PAX 1.0 sparse member is restored as a sparse
   * file (its holes stay holes); its map is checked first like everything else. Other sparse
   * forms (old GNU `S` members, PAX 0.x) are refused. */
  restore(src: string): void;
  /** List the regular files in the workspace, or under `subdir` of it (the `.deps` directory is
   * omitted), sorted by path, paths relative to the workspace; `change` is always "created" here.
   * Symlinks are never followed; a missing `subdir` lists nothing; names that are not valid UTF-8
   * (which no path string can address) are left out. Bounded: a workspace with more
   * than 100,000 entries under `subdir` throws SandboxError rather than returning part of it. */
  listFiles(subdir?: string): Promise<FileInfo[]>;
  /** Start a long-lived Python interpreter in one box and return it, already open. Cells sent to it run
   * in the same process, so variables and imports carry over between cells and each cell avoids an
   * interpreter start. The trade-off against `runCode`: cells are fast but NOT isolated from one
   * another (the box is still network-off and resource-limited). Call `await kernel.close()` when
   * finished. A cell that exceeds its timeout ends the kernel.
   *
   * Measured here: starting a kernel and running its first cell takes about 40 ms; after that a
   * `runCode('pass')` round trip takes 0.14 ms (median), against about 20 ms for a fresh-box
   * `runCode`. `timeoutS` is the per-cell default (the Sandbox's `timeoutS` when absent). The
   * session's `onStdout`/`onStderr` see each cell's output as it runs. Closing the Sandbox closes
   * its kernels.
   *
   * ADDITION to the published surface — `jupyter`: instead of our Python driver, start the image's
   * Jupyter kernelspec of that name (`"python3"` for ipykernel, `"ir"` for IRkernel, any other
   * the image installs), for stateful R/Julia/JavaScript sessions or IPython's own behaviour
   * (`!cmd`, `%magics`, `%pip`). It is looked up as jupyter does: in each `JUPYTER_PATH` entry's
   * `kernels` (from the image's `Env` or your `env`; a path under `/workspace` is read from the
   * workspace, and `setup` puts `.deps`' `share/jupyter` there, so `setup: "pip install ipykernel"`
   * on an image without it works), then `$HOME/.local/share/jupyter/kernels`,
   * `/root/.local/share/...`, `/usr/local/share/jupyter/kernels` and `/usr/share/jupyter/kernels`.
   * A missing one is a SandboxError listing the kernelspecs there are. A kernelspec whose
   * interpreter is `python` runs `python3` when the box has only that (pip's kernelspecs name
   * `python`; Debian's images have `python3`). The kernel runs in one
   * long-lived box with the same posture as any kernel box (network off unless the Sandbox says
   * otherwise, limits, `securityProfile`, `user`). kern talks to it over ZeroMQ `ipc://` sockets
   * in a private directory bound into the box at `/.kern-jupyter` (no TCP, no change to the
   * box's network), every message signed with HMAC-SHA256 under a key made for this kernel;
   * a message whose signature does not verify is dropped and counted in the next cell's
   * `runtimeNotes`. Bounds (ADDITION): a message over 64 MiB is dropped before kern buffers it;
   * kern queues at most 1024 messages / 16 MiB per socket for the running cell (a faster kernel
   * waits, and its IOPub drops as for any slow subscriber); output a kernel sends while no cell
   * runs (a thread an earlier cell left) is dropped as it arrives. The next cell's `runtimeNotes`
   * say how many messages, and how many bytes, were dropped. See `Kernel` for how its cells
   * differ.
   *
   * Measured here (BENCHMARKS.md, "Jupyter kernels vs the driver kernel", an idle machine):
   * start plus first cell 0.62 s for ipykernel and 0.68 s for IRkernel (the kernels' own
   * imports), against 25 ms for the driver kernel; a trivial cell 4.7 ms on ipykernel and 14 ms
   * on IRkernel, against 0.33 ms (IPython's and IRkernel's per-cell work plus four signed
   * messages); a matplotlib figure cell 91 ms against 71 ms. */
  kernel(opts?: {
    timeoutS?: number | undefined;
    jupyter?: string | undefined;
    /** ADDITION to the published surface: the driver kernel's language, "python" (the
     * default), "node" or "typescript" (see NODE CELLS at `Language`). Not with `jupyter`. */
    language?: "python" | "node" | "typescript" | undefined;
    /** ADDITION to the published surface: the kernel's working directory, workspace-relative,
     * with a call's `cwd` rules (see `PerCallOptions.cwd`), for every kind of kernel. */
    cwd?: string | undefined;
    /** ADDITION to the published surface: environment variables of the kernel's process, over
     * the Sandbox's `env`, with a call's `env` rules (see `PerCallOptions.env`), for every kind
     * of kernel. */
    env?: Record<string, string> | undefined;
  }): Promise<Kernel>;

  /** *(Addition to the published surface.)* Starts `argv` in the background, in a fresh box of
   * this Sandbox's posture (image, limits, network, profile) on the same workspace, and resolves
   * once it is about to exec (a missing program then ends it with exit code 127, as `run` does).
   * It runs until it exits, `kill()`, its `timeoutS` (default: none; it lives as long as the
   * Sandbox) or `close()`, which ends it with its box and everything in it. `env`, `cwd` and
   * `signal` follow `PerCallOptions`; aborting the signal ends the box and `wait()` rejects with
   * the signal's reason. Its output streams as it comes, to `onStdout`/`onStderr` (the
   * Sandbox's unless given here, as for a call; `null`: none) and to
   * `stdout`/`stderr`, under `maxOutputBytes` per stream like a call's: past the cap a stream
   * delivers nothing more and `wait()`'s result says it was truncated, while the process runs on
   * unblocked. A bad `argv`, `env` or `cwd` rejects before any box starts; a `cwd` missing in
   * the box rejects once the box says so. A `persist` Sandbox starts it in a fresh box too, not
   * in the resident one.
   *
   * Measured here (BENCHMARKS.md, "Steered processes", dev build, a busy machine): from
   * `spawn(["echo", "hi"])` to its first byte 9.9 ms, against 3.9 ms for Node's own
   * `child_process.spawn` of the same program. */
  spawn(
    argv: readonly string[],
    opts?: {
      env?: Record<string, string> | undefined;
      cwd?: string | undefined;
      signal?: AbortSignal | undefined;
      onStdout?: ((chunk: Buffer) => void) | null | undefined;
      onStderr?: ((chunk: Buffer) => void) | null | undefined;
      timeoutS?: number | undefined;
      /** ADDITION: `onStdout`/`onStderr` and the `stdout`/`stderr` iterators get whole lines
       * (as `PerCallOptions.lineBuffered`); the rest after the last newline comes when the
       * process ends. (`terminal()` has no such option: a prompt does not end in a newline.) */
      lineBuffered?: boolean | undefined;
    },
  ): Promise<SandboxProcess>;

  /** *(Addition to the published surface.)* The processes `spawn()` started that still run. */
  processes(): SandboxProcess[];

  /** *(Addition to the published surface.)* Replaces the `egressAllow` list for every later call
   * and for the next connection of every box of this Sandbox already running (kernels, `spawn()`
   * processes): the proxy reads its list once per connection. A connection opened before (a
   * CONNECT tunnel, a download in progress) goes on under the list it was admitted by. Same entries
   * and checks as the option; `[]` denies everything. A refused list throws a `SandboxError`
   * (`ERR_INVALID_OPTION`) and leaves the current one in force; so does a Sandbox opened without a
   * non-empty `egressAllow` (its boxes have no proxy to steer). A loopback address added later is reached through the
   * proxy (`HTTP_PROXY`) by boxes already running; only boxes started after the change also get
   * its listener in the box. A `secrets` host removed here is unreachable, not sent the value. */
  setEgressAllow(list: readonly string[]): Promise<void>;

  /** *(Addition to the published surface.)* Runs `argv` (default: the image's `bash`, else
   * `sh`) on a new terminal of a fresh box of this Sandbox, `cols` x `rows` (default 80 x 24,
   * each 1 to 1000). The terminal is the box's own: a pseudo-terminal of the box's private
   * `/dev/pts`, the program's controlling terminal and its stdin, stdout and stderr
   * (`isatty(0)` is true, `TERM` is `xterm-256color` unless `env` gives one). Only this process
   * holds its master. It lives as long as the program, `kill()` or `close()`; its output counts
   * as stdout under `maxOutputBytes`, like `spawn()`'s. Measured here: a keystroke's echo from
   * bash comes back 0.81 ms after `write()` (bash on a host pty: 0.18 ms). */
  terminal(opts?: {
    argv?: readonly string[] | undefined;
    cols?: number | undefined;
    rows?: number | undefined;
    env?: Record<string, string> | undefined;
    cwd?: string | undefined;
  }): Promise<Terminal>;
}

/** *(Addition to the published surface.)* What `SandboxProcess` and `Terminal` share. */
declare class SteeredProcess {
  /** Its pid in its box (its box's PID 1 is kern's init). */
  readonly pid: number;
  /** False once it has ended. */
  readonly running: boolean;
  /** Sends `signal` (default `"SIGTERM"`, then the box is ended if the process still runs
   * 2 s later) to the process's group: the process and the children it did not move to a
   * group of their own. Names: SIGHUP, SIGINT, SIGQUIT, SIGABRT, SIGKILL, SIGUSR1, SIGUSR2,
   * SIGALRM, SIGTERM, SIGCONT, SIGTSTP, SIGWINCH (with or without `SIG`). `"SIGKILL"` ends its
   * box. Resolves once the signal is sent, or, with no signal or SIGKILL, once the process has
   * ended. An unknown name rejects with a `SandboxError`; a process already ended is a no-op. */
  kill(signal?: string): Promise<void>;
  /** Resolves with its result once it has ended and every chunk of its output was delivered
   * (`files` as for a call, when `trackFiles` is on: what changed in the workspace while it
   * ran, by anyone). */
  wait(): Promise<ExecutionResult>;
  /** Writes to its stdin (a terminal: types). Rejects once it has ended, or after `end()`. */
  write(data: string | Buffer): Promise<void>;
}

/** *(Addition to the published surface.)* A background process from `Sandbox.spawn()`. */
export class SandboxProcess extends SteeredProcess {
  private constructor();
  /** Its stdout as it comes, in order; ends when the process has ended. */
  readonly stdout: AsyncIterable<Buffer>;
  readonly stderr: AsyncIterable<Buffer>;
  /** Closes its stdin: the process reads EOF. `write()` after it rejects. */
  end(): Promise<void>;
  /** A TCP connection from this process to `127.0.0.1:port` inside the process's box (a dev
   * server's preview, say). Nothing listens on a host port and the box's network policy is
   * unchanged: the box's own connector dials its loopback and hands the socket over. A port
   * outside 1 to 65535 is a `SandboxError`; a port nobody accepts on rejects with a
   * `SandboxError` of code `ERR_CONNECTION_REFUSED` naming it, as a process that has ended
   * rejects. `waitS` (default 0, at most 3600): how long a refused connection is tried again, for
   * a server that is still starting (`connect(8000, { waitS: 10 })`); the process's end stops the
   * wait at once. Each request is matched to its
   * own answer: a connector that something in the box stopped or stalls rejects after 10 s
   * saying so, and its late answer is discarded, never handed to a later `connect()`. Measured here: 1.5 ms to the
   * socket (a `net.connect` to a host port: 0.6 ms); an HTTP GET to `python3 -m http.server`
   * through it 2.8 ms, against 2.1 ms on the host. */
  connect(port: number, opts?: { waitS?: number | undefined }): Promise<import("net").Socket>;
}

/** *(Addition to the published surface.)* A program on a terminal, from `Sandbox.terminal()`. */
export class Terminal extends SteeredProcess implements AsyncIterable<Buffer> {
  private constructor();
  /** Calls `cb` with its output as it comes, in order; returns a function that stops it. The
   * first listener also gets what came before it was attached (output can arrive before
   * `terminal()` resolves), so `onData` right after `terminal()` misses nothing. */
  onData(cb: (data: Buffer) => void): () => void;
  [Symbol.asyncIterator](): AsyncIterator<Buffer>;
  /** Resizes the terminal: the foreground program gets `SIGWINCH` and the new size. Each of
   * `cols` and `rows` a whole number from 1 to 1000. */
  resize(cols: number, rows: number): void;
}

// ADDITION: `kernel({ language: "node" | "typescript" })` is the same driver kernel with one Node
// process instead of Python's (see NODE CELLS at `Language`): same timeout, `signal` and teardown.
/** A warm Python interpreter living in one long-lived box, obtained from `Sandbox.kernel()`. State in
 * memory survives from cell to cell; the box stays network-off and resource-limited until `close()` or
 * a cell timeout ends it. Its `/tmp` persists across cells too, and fills up cumulatively.
 *
 * Cells run one at a time, in the order `runCode` was called. Once the box is gone (a cell timed
 * out or, an ADDITION, was aborted by its `signal`; the memory cap killed it, `close()`, or its
 * Sandbox closed) every later call throws a SandboxError that says which.
 *
 * A Jupyter kernel (`kernel({ jupyter })`) answers the same calls, with these differences:
 * - Output: `stream` messages are `stdout`/`stderr` (and reach `onStdout`/`onStderr` as they
 *   arrive); `display_data` and `execute_result` are `results`, in order
 *   (`update_display_data` replaces the display it names; `clear_output` is ignored, so nothing
 *   a cell printed is lost); an `error` puts its traceback, colour codes removed, on stderr and
 *   makes `exitCode` 1. Output the kernel's process writes to its own stdout/stderr during a
 *   cell (an R `system()` call) is the cell's too. IPython's `!cmd` runs on a terminal, so its
 *   lines end in `\r\n`.
 * - Timeout: a cell past its deadline is first INTERRUPTED (SIGINT to the kernel's process group, or
 *   an `interrupt_request` when its kernelspec's `interrupt_mode` is `"message"`). If the cell
 *   stops within 5 s, the kernel keeps its state: the result has a `timeout` fault saying so
 *   (with the kernel's own KeyboardInterrupt or R error on stderr) and later cells run on. Only
 *   a kernel that does not stop is torn down, with a `timeout` fault and exit code 137. The
 *   driver kernel always tears down.
 * - No stdin is offered (`allow_stdin: false`): IPython's `input()` fails at once with its own
 *   error; a kernel that asks for input anyway (IRkernel's `readline()`) has the cell
 *   interrupted at once, with a runtime note saying why. A cell never waits for an answer.
 * - Before each cell kern checks the kernel's heartbeat (5 s at most): a kernel whose process
 *   died (told by how it ended: "exited (code 3)") or that stopped answering (its box is ended
 *   5 s later if it has not ended by itself) is reported by that call's SandboxError.
 * - `close()` sends `shutdown_request` (so the kernel's exit handlers run) and ends the box if
 *   it has not exited within 3 s. */
export class Kernel {
  /** Run `code` as the next cell, seeing the state left by earlier cells. A final expression,
   * `display()` calls and matplotlib figures are captured into `results`. `timeoutS` overrides the
   * kernel's deadline for this cell; going over it ends the kernel and yields a `timeout` fault
   * (a Jupyter kernel is interrupted first; see above). */
  runCode(code: string, opts?: {
    timeoutS?: number | undefined;
    /** ADDITION to the published surface: aborts the cell. An aborted cell is stopped the way
     * its timeout would stop it: the driver kernel's box is ended (the kernel is torn down,
     * and later calls say the cell was aborted); a Jupyter kernel is interrupted and keeps its
     * state if the cell stops within 5 s (torn down otherwise). Only once the cell has stopped
     * does the promise reject, with `signal.reason` (an `AbortError` `DOMException` unless the
     * abort gave another), as Node's own APIs do. A signal already aborted rejects at once,
     * and the cell never runs; so does one aborted while the cell waits for earlier cells. A
     * cell that finished before the abort resolves as usual. Not an `AbortSignal`: a
     * SandboxError. */
    signal?: AbortSignal | undefined;
    /** ADDITION to the published surface: this cell's results, one by one (as
     * `PerCallOptions.onResult`). */
    onResult?: ((result: Result) => void) | null | undefined;
    /** ADDITION to the published surface: the Sandbox's `onStdout`/`onStderr` get this cell's
     * output as whole lines (as `PerCallOptions.lineBuffered`). */
    lineBuffered?: boolean | undefined;
  }): Promise<ExecutionResult>;
  /** Shut the kernel down: close its input, kill its process group and clean up (a Jupyter
   * kernel gets a `shutdown_request` first). */
  close(): Promise<void>;
  /** ADDITION to the published surface: `close()`, for `await using k = await sb.kernel()`
   * (see `Sandbox`'s). */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Open a Sandbox, pass it to `fn`, and close it afterwards whether `fn` resolves or rejects.
 * Resolves to whatever `fn` resolves to. */
export function withSandbox<T>(fn: (sandbox: Sandbox) => Promise<T>): Promise<T>;
export function withSandbox<T>(opts: SandboxOptions, fn: (sandbox: Sandbox) => Promise<T>): Promise<T>;

/** Run `code` once in a temporary session whose workspace is created beforehand and deleted afterwards. */
export function runCode(code: string, opts?: SandboxOptions & { language?: Language }): Promise<ExecutionResult>;

/** This package's version string. */
export const version: string;

/** Size in MiB of the tmpfs mounted at `/tmp` when `tmpfs` is not given.
 *
 * Exposed so callers who want a different size can derive it from this value (e.g. a multiple of it)
 * instead of hard-coding a second number that may fall out of step.
 */
export const DEFAULT_TMPFS_MB: number;
