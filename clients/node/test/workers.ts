// Worker processes for the tests: the real `taskfleet-node` bin (or Python's `taskfleet`)
// in a child process, its output kept, waited on by conditions with deadlines.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const BIN = fileURLToPath(new URL("../src/taskfleet-node.js", import.meta.url));
export const FIXTURES = fileURLToPath(new URL("../../test/fixtures/", import.meta.url));

/** The environment without TASKFLEET_* (the tests say what they mean). */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith("TASKFLEET_")),
  );
  return { ...env, ...extra };
}

export class WorkerProcess {
  output = "";
  readonly child: ChildProcess;
  private readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(command: string, args: readonly string[], env: NodeJS.ProcessEnv = cleanEnv()) {
    this.child = spawn(command, args, { env, stdio: ["ignore", "pipe", "pipe"], cwd: FIXTURES });
    this.child.stdout?.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    this.child.stderr?.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    this.exited = new Promise((resolve) =>
      this.child.once("exit", (code, signal) => {
        resolve({ code, signal });
      }),
    );
  }

  /** A Node worker: `taskfleet-node worker ...args`. */
  static node(args: readonly string[], env?: NodeJS.ProcessEnv): WorkerProcess {
    return new WorkerProcess(process.execPath, [BIN, "worker", ...args], env);
  }

  get pid(): number {
    assert.ok(this.child.pid !== undefined);
    return this.child.pid;
  }

  /** Wait until the output matches `pattern`. */
  async saw(pattern: RegExp, deadlineMs = 20_000): Promise<void> {
    const end = Date.now() + deadlineMs;
    while (!pattern.test(this.output)) {
      if (this.child.exitCode !== null || Date.now() > end) {
        throw new Error(
          `not seen ${String(pattern)} (exit ${String(this.child.exitCode)}):\n${this.output}`,
        );
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  kill(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  /** Its exit code, within `deadlineMs` (else it is killed and the test fails). */
  async exit(deadlineMs = 30_000): Promise<number | null> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">(
      (resolve) =>
        (timer = setTimeout(() => {
          resolve("late");
        }, deadlineMs)),
    );
    const result = await Promise.race([this.exited, late]);
    clearTimeout(timer);
    if (result === "late") {
      this.child.kill("SIGKILL");
      throw new Error(`no exit within ${deadlineMs} ms:\n${this.output}`);
    }
    return result.code;
  }

  /** Killed at the end of a test, whatever happened. */
  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill("SIGKILL");
      await this.exited;
    }
  }
}

/** Lines of a run log: `[what, task id, attempt, pid]`. */
export function runs(path: string): [string, string, number, number][] {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => {
      const [what = "", id = "", attempt = "0", pid = "0"] = l.split(" ");
      return [what, id, Number(attempt), Number(pid)];
    });
}
