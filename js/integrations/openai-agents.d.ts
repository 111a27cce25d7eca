// Types of kern-sandbox/openai-agents: a sandbox client for the OpenAI Agents SDK on kern.
// The whole map (what each member runs, what is not supported): docs/integrations.md.

import type { Editor, ToolOutputImage } from "@openai/agents";
import type {
  ExecCommandArgs,
  ListDirectoryArgs,
  Manifest,
  MaterializeEntryArgs,
  ReadFileArgs,
  SandboxClient,
  SandboxClientCreateArgs,
  SandboxDirectoryEntry,
  SandboxExecResult,
  SandboxSession,
  SandboxSessionState,
  ViewImageArgs,
} from "@openai/agents/sandbox";
import type { Sandbox, SandboxOptions } from "../../index";

/** Sandbox options for every session of a client (a run's `sandbox.options` add to them), or
 * `{ sandbox }`: an opened Sandbox the sessions use as it is (their close leaves it open). */
export type KernSandboxClientOptions = SandboxOptions | { sandbox: Sandbox };

/** A SandboxSession of the SDK on one kern Sandbox, whose workspace is the manifest's root
 * (kern's `workspaceMount`). Commands run with `sh -c` (or `shell -c`) in a fresh box each, to
 * their end: only files persist between them, and there is no pty (`write_stdin`). Errors are
 * the SDK's sandbox error classes with kern's message (`details.kernCode`, `cause`). */
export declare class KernSandboxSession implements SandboxSession<SandboxSessionState> {
  private constructor();
  state: SandboxSessionState;
  /** The kern Sandbox under the session, opened. */
  sandbox(): Promise<Sandbox>;
  /** Opens the Sandbox and writes the manifest's file and dir entries. */
  start(): Promise<void>;
  running(): Promise<boolean>;
  registerPreStopHook(hook: () => Promise<void> | void): () => void;
  runPreStopHooks(): Promise<void>;
  /** stop, shutdown, delete and close all close the Sandbox. */
  stop(): Promise<void>;
  shutdown(): Promise<void>;
  delete(): Promise<void>;
  close(): Promise<void>;
  /** Always false: commands run to their end, without a terminal. */
  supportsPty(): boolean;
  exec(args: ExecCommandArgs): Promise<SandboxExecResult>;
  execCommand(args: ExecCommandArgs): Promise<string>;
  readFile(args: ReadFileArgs): Promise<Uint8Array>;
  viewImage(args: ViewImageArgs): Promise<ToolOutputImage>;
  listDir(args: ListDirectoryArgs): Promise<SandboxDirectoryEntry[]>;
  pathExists(path: string): Promise<boolean>;
  directoryExists(path: string): Promise<boolean>;
  /** Applies apply_patch's V4A diffs to the box's files. `runAs` is not supported. */
  createEditor(runAs?: string): Editor;
  /** File and dir entries only (others: SandboxUnsupportedFeatureError). */
  materializeEntry(args: MaterializeEntryArgs): Promise<void>;
  applyManifest(manifest: Manifest): Promise<void>;
}

/** A sandbox client of the OpenAI Agents SDK: each session one kern Sandbox, closed with it.
 * Pass it as a run's `sandbox: { client }`. */
export declare class KernSandboxClient implements SandboxClient<Record<string, unknown>, SandboxSessionState> {
  constructor(options?: KernSandboxClientOptions);
  readonly backendId: "kern";
  create(args?: SandboxClientCreateArgs<Record<string, unknown>> | Manifest, manifestOptions?: Record<string, unknown>): Promise<KernSandboxSession>;
}
