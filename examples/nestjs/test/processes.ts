// The example's programs as real processes for the test: a redis-server on a free port,
// and `node` running the application, the simulated provider and taskfleet-node's
// commands, each with its output kept for the failure message. Nothing is skipped: a
// missing redis-server, build or package fails the test.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const EXAMPLE = fileURLToPath(new URL("../", import.meta.url));
/** taskfleet-node, the npm package's command (configure, worker, ...). */
export const TASKFLEET_NODE = join(EXAMPLE, "node_modules/taskfleet/dist/src/taskfleet-node.js");

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => {
        if (address === null || typeof address === "string") reject(new Error("no port"));
        else resolve(address.port);
      });
    });
  });
}

/** Wait for `check` to hold, looking again every 50 ms, failing after `deadlineMs`. */
export async function until(what: string, check: () => Promise<boolean> | boolean, deadlineMs = 30_000): Promise<void> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > end) throw new Error(`not within ${deadlineMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** One program, its output kept. */
export class Program {
  output = "";
  private readonly child: ChildProcess;

  constructor(readonly name: string, command: string, args: readonly string[], env: Readonly<Record<string, string>>) {
    this.child = spawn(command, args, { cwd: EXAMPLE, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    const keep = (chunk: Buffer): void => {
      this.output += chunk.toString("utf8");
    };
    this.child.stdout?.on("data", keep);
    this.child.stderr?.on("data", keep);
  }

  get exitCode(): number | null {
    return this.child.exitCode;
  }

  /** Resolves once its output has `text`; fails when it exits first. */
  async printed(text: string, deadlineMs = 60_000): Promise<void> {
    await until(`${this.name} to print ${text}`, () => {
      if (this.child.exitCode !== null) throw new Error(`${this.name} exited ${this.child.exitCode}:\n${this.output}`);
      return this.output.includes(text);
    }, deadlineMs);
  }

  /** SIGTERM, then wait for the exit; resolves to the exit code. */
  async stop(): Promise<number | null> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.child.exitCode;
    const exited = new Promise<number | null>((resolve) => this.child.once("exit", (code) => { resolve(code); }));
    this.child.kill("SIGTERM");
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 15_000);
    try {
      return await exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

/** A redis-server of its own, no persistence. */
export class RedisServer {
  port = 0;
  private program: Program | undefined;
  /** A temporary directory of its own, removed with it (the worker's runtime files go here too). */
  readonly dir = mkdtempSync(join(tmpdir(), "taskfleet-nestjs-"));

  get url(): string {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  async start(): Promise<void> {
    this.port = await freePort();
    this.program = new Program("redis-server", process.env.REDIS_SERVER ?? "redis-server", ["--port", String(this.port), "--bind", "127.0.0.1", "--dir", this.dir, "--save", "", "--appendonly", "no"], {});
    await this.program.printed("Ready to accept connections", 15_000);
  }

  async stop(): Promise<void> {
    await this.program?.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * Outside Kubernetes a queue's shared settings (its rate limit) are set with
 * `taskfleet-node configure`; on a cluster the operator writes them from the TaskQueue.
 */
export function configure(redisUrl: string, queue: string, settings: Readonly<Record<string, number>>): void {
  const args = [TASKFLEET_NODE, "configure", queue, "--redis-url", redisUrl, ...Object.entries(settings).flatMap(([k, v]) => ["--set", `${k}=${v}`])];
  const run = spawnSync(process.execPath, args, { encoding: "utf8" });
  if (run.status !== 0) throw new Error(`taskfleet-node configure failed (${String(run.status)}): ${run.stderr}`);
}
