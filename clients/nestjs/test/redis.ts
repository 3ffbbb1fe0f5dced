// A real redis-server for the tests: its own process on a free port in a temp dir, no
// persistence, flushed between tests (as clients/node/test/redis.ts does).
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

import { Queue } from "taskfleet";

const REDIS_SERVER = process.env.REDIS_SERVER ?? "redis-server";
const REDIS_CLI = process.env.REDIS_CLI ?? "redis-cli";
const execFileAsync = promisify(execFile);

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

/** Resolves once `check` is true; throws after `deadlineMs` saying what was waited for. */
export async function until(
  what: string,
  check: () => Promise<boolean> | boolean,
  deadlineMs = 10_000,
): Promise<void> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > end) throw new Error(`not within ${deadlineMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export class RedisServer {
  readonly dir = mkdtempSync(join(tmpdir(), "taskfleet-nestjs-redis-"));
  port = 0;
  private process: ChildProcess | undefined;

  get url(): string {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  /** Starts it (on `port`, or a free one); a missing redis-server fails the test (never a skip). */
  async start(port?: number): Promise<void> {
    this.port = port ?? (await freePort());
    const args = [
      "--port",
      String(this.port),
      "--bind",
      "127.0.0.1",
      "--dir",
      this.dir,
      "--save",
      "",
      "--appendonly",
      "no",
    ];
    const child = spawn(REDIS_SERVER, args, { stdio: "ignore" });
    this.process = child;
    const spawned = new Promise<void>((resolve, reject) => {
      child.once("spawn", resolve);
      child.once("error", (error) => {
        reject(new Error(`${REDIS_SERVER} did not start: ${error.message}`));
      });
    });
    await spawned;
    const probe = new Queue("probe", { redisUrl: this.url });
    try {
      await until(`redis-server on port ${this.port} answers`, async () => {
        if (child.exitCode !== null) throw new Error("redis-server exited at start");
        try {
          await probe.stats();
          return true;
        } catch {
          return false;
        }
      });
    } finally {
      await probe.close();
    }
  }

  async flush(): Promise<void> {
    const out = await execFileAsync(REDIS_CLI, ["-p", String(this.port), "flushall"]);
    if (out.stdout.trim() !== "OK") throw new Error(`redis-cli flushall answered ${out.stdout}`);
  }

  /** Stops the server process and keeps its directory: `start(port)` brings it back. */
  async halt(): Promise<void> {
    const child = this.process;
    this.process = undefined;
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    }
  }

  async stop(): Promise<void> {
    await this.halt();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
