// A real redis-server for the tests: its own process on a free port in a temp dir, no
// persistence, flushed between tests that share it (as tests/fixtures_redis.py does).
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Redis } from "ioredis";

const REDIS_SERVER = process.env.REDIS_SERVER ?? "redis-server";
const START_DEADLINE_MS = 10_000;
const START_ATTEMPTS = 3;

/** The server process ended before it answered (most often: its port was taken). */
class ExitedAtStart extends Error {
  constructor(port: number) {
    super(`redis-server exited at start on port ${port}`);
  }
}

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
  readonly dir: string;
  port = 0;
  private process: ChildProcess | undefined;

  constructor(private readonly extraArgs: readonly string[] = []) {
    this.dir = mkdtempSync(join(tmpdir(), "taskfleet-node-redis-"));
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  /**
   * Starts the server on a free port. Test files run side by side (`node --test
   * --test-concurrency`), so the port a probe found free may be bound by another file's
   * server before this one binds it: a server that exits at start is started again on
   * another port.
   */
  async start(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.startOnce();
        return;
      } catch (error) {
        if (!(error instanceof ExitedAtStart) || attempt >= START_ATTEMPTS) throw error;
      }
    }
  }

  private async startOnce(): Promise<void> {
    this.port = await freePort();
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
      ...this.extraArgs,
    ];
    const server = spawn(REDIS_SERVER, args, { stdio: "ignore" });
    this.process = server;
    const admin = this.admin();
    try {
      await until(
        `redis-server on port ${this.port} answers`,
        async () => {
          if (server.exitCode !== null) throw new ExitedAtStart(this.port);
          try {
            await admin.ping();
            return true;
          } catch {
            return false;
          }
        },
        START_DEADLINE_MS,
      );
    } finally {
      admin.disconnect();
    }
  }

  /** A plain client of the server (the caller closes it). */
  admin(): Redis {
    const client = new Redis({
      host: "127.0.0.1",
      port: this.port,
      lazyConnect: true,
      maxRetriesPerRequest: 1,
      protocol: 2,
    });
    client.on("error", () => undefined); // refused while the server starts: the failed call says so
    return client;
  }

  async flush(): Promise<void> {
    const admin = this.admin();
    try {
      await admin.flushall();
    } finally {
      admin.disconnect();
    }
  }

  async stop(): Promise<void> {
    const child = this.process;
    this.process = undefined;
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
