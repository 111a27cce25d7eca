// Types of kern-sandbox/langchain: a LangChain Deep Agents sandbox backend on a kern Sandbox.
// The whole map (what each member runs, what is not supported): docs/integrations.md.

import type { BaseSandbox, ExecuteResponse, FileDownloadResponse, FileUploadResponse } from "deepagents";
import type { Sandbox, SandboxOptions } from "../../index";

/** Options of `KernSandbox`: the Sandbox options, or `{ sandbox }`, an opened Sandbox to use as
 * it is (then `close()` leaves it open: its owner closes it). */
export type KernSandboxOptions = SandboxOptions | { sandbox: Sandbox };

/** A deepagents sandbox backend (`SandboxBackendProtocolV2`, through `BaseSandbox`) on one kern
 * Sandbox: `execute` runs `sh -c command` in a fresh box in the workspace (`workspaceMount`,
 * default `/workspace`), whose files persist between commands; deepagents' file tools (ls,
 * read, write, edit, glob, grep, delete) run on `execute`, `uploadFiles` and `downloadFiles`.
 * Failures are deepagents' `SandboxError` (`COMMAND_FAILED`, `FILE_OPERATION_FAILED`,
 * `NOT_INITIALIZED`) with kern's message, and kern's error as `cause`. */
export class KernSandbox extends BaseSandbox {
  /** Bad options are checked when it opens (`create()`, `initialize()` or the first call). */
  constructor(options?: KernSandboxOptions);
  /** A KernSandbox, opened. */
  static create(options?: KernSandboxOptions): Promise<KernSandbox>;
  /** `kern-<uuid>`, unique per instance. */
  readonly id: string;
  /** False once closed. */
  readonly isRunning: boolean;
  /** Opens the Sandbox now (else the first call opens it). */
  initialize(): Promise<void>;
  /** Closes the Sandbox: its boxes end, a temporary workspace is removed. */
  close(): Promise<void>;
  /** The kern Sandbox under it, opened. */
  sandbox(): Promise<Sandbox>;
  /** stdout then stderr as `output` (plus a `[kern-sandbox] <fault>` line when the sandbox ended
   * the command), its exit code, and whether `maxOutputBytes` cut it. */
  execute(command: string): Promise<ExecuteResponse>;
  uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]>;
  downloadFiles(paths: string[]): Promise<FileDownloadResponse[]>;
}
