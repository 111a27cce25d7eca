// Type-checked by integrations/types.test.js: each integration's types as a user writes them,
// against the frameworks' own types (a session/backend/client where the framework wants one).
import type { Experimental_SandboxSession, Tool } from "@ai-sdk/provider-utils" with { "resolution-mode": "import" };
import type { SandboxBackendProtocolV2 } from "deepagents";
import type { SandboxClient, SandboxSession } from "@openai/agents/sandbox";
import { Sandbox } from "kern-sandbox";
import { createKernSandbox, codeInterpreter, createCodeInterpreter } from "kern-sandbox/ai";
import type { CodeInterpreterOutput } from "kern-sandbox/ai";
import { KernSandbox } from "kern-sandbox/langchain";
import { KernSandboxClient, KernSandboxSession } from "kern-sandbox/openai-agents";

async function main(): Promise<void> {
  const session: Experimental_SandboxSession = createKernSandbox({ image: "python:3.12-slim", network: false, memoryMb: 256 });
  const mine = createKernSandbox({ sandbox: new Sandbox({ image: "host" }) });
  const r: { exitCode: number; stdout: string } = await session.run({ command: "ls" });
  const t: Tool = codeInterpreter;
  const bound: Tool = createCodeInterpreter(mine);
  const out: CodeInterpreterOutput | undefined = undefined;
  await mine.close();
  // @ts-expect-error: not a session option
  createKernSandbox({ imag: "x" });

  const backend: SandboxBackendProtocolV2 = await KernSandbox.create({ image: "python:3.12-slim" });
  const ex: { output: string; exitCode: number | null; truncated: boolean } = await backend.execute("ls");
  await new KernSandbox({ egressAllow: ["pypi.org"] }).close();

  const client: SandboxClient = new KernSandboxClient({ image: "python:3.12-slim", mounts: { "/data": "/data" } });
  const s: SandboxSession = await new KernSandboxClient().create();
  const k: KernSandboxSession = await new KernSandboxClient().create();
  const text: string = await k.execCommand({ cmd: "ls" });
  void [r, t, bound, out, ex, client, s, text];
}
void main;
