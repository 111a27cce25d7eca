// Types of kern-sandbox/ai: an AI SDK 7 sandbox session on a kern Sandbox, and a code
// interpreter tool. The whole map (what each member runs, what is not supported): docs/integrations.md.

// The AI SDK is ESM-only: its types are imported as an ES module from this CommonJS package.
import type { Experimental_SandboxSession, Tool } from "@ai-sdk/provider-utils" with { "resolution-mode": "import" };
import type { Chart, Sandbox, SandboxOptions } from "../../index";

/** Options of `createKernSandbox`: the Sandbox options, or `{ sandbox }`, an opened Sandbox to
 * use as it is (then `close()` leaves it open: its owner closes it). */
export type KernSandboxOptions = SandboxOptions | { sandbox: Sandbox };

/** An `Experimental_SandboxSession` on one kern Sandbox. Every command runs in a fresh box of
 * it (`sh -c command`); files under the workspace (the base directory of relative paths,
 * `workspaceMount`, default `/workspace`) persist between them. */
export interface KernSandboxSession extends Experimental_SandboxSession {
  /** Opens the Sandbox now (else the first call opens it); resolves to the session. */
  open(): Promise<KernSandboxSession>;
  /** Closes the Sandbox: its boxes and processes end, a temporary workspace is removed; later
   * calls reject with a SandboxError (`ERR_CLOSED`). */
  close(): Promise<void>;
  /** The kern Sandbox under the session, opened. */
  sandbox(): Promise<Sandbox>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** An AI SDK sandbox session on a kern Sandbox, opened at its first use. Bad options throw a
 * SandboxError here. */
export function createKernSandbox(options?: KernSandboxOptions): KernSandboxSession;

/** What the code interpreter gives the model. */
export interface CodeInterpreterOutput {
  stdout: string;
  /** What the code wrote to stderr, plus a `[kern-sandbox] <fault>` line when the sandbox ended
   * it (timeout, memory). */
  stderr: string;
  exitCode: number;
  /** The exception a python/node/typescript cell raised, else null. */
  error: { name: string; value: string; traceback: string } | null;
  /** Its rich results: each MIME bundle (images base64) and chart (see `Result`). */
  results: Array<{ isMainResult: boolean; data: Record<string, string>; chart: Chart | null }>;
}

/** The input the model gives: the code and its language (default python). */
export interface CodeInterpreterInput {
  code: string;
  language?: "python" | "node" | "typescript" | "bash" | "sh";
}

/** A code interpreter tool that runs in the session `generateText`/`streamText`/an agent
 * passes as `experimental_sandbox` (it must be a `createKernSandbox` session: another gives a
 * tool error). */
export const codeInterpreter: Tool<CodeInterpreterInput, CodeInterpreterOutput>;

/** A code interpreter tool bound to one session, for use without `experimental_sandbox`. */
export function createCodeInterpreter(session: KernSandboxSession): Tool<CodeInterpreterInput, CodeInterpreterOutput>;
