"use strict";

// The Egg.js recipe against a real redis-server: the application boots (egg-mock: agent
// and app in this process), an HTTP request enqueues and the agent's taskfleet worker
// runs it; with 200 tasks queued the application closes mid-way, the agent's beforeClose
// drains its worker (running tasks finish, the rest go back to the queue), and a second
// boot does the rest: every task done, each once, none lost. Nothing is skipped: a missing
// redis-server or package fails the test.
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const { mkdtempSync, rmSync } = require("node:fs");
const { createServer } = require("node:net");
const { tmpdir } = require("node:os");
const { join } = require("node:path");
const { after, before, test } = require("node:test");

const mm = require("egg-mock");
const { Queue } = require("taskfleet");

const BASE = join(__dirname, "..");
const QUEUE = "egg.test";
const N = 200;

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function until(what, check, deadlineMs = 30_000) {
  const end = Date.now() + deadlineMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`not within ${deadlineMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

let redis;
let dir;
let queue;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "taskfleet-egg-"));
  const port = await freePort();
  redis = spawn(process.env.REDIS_SERVER ?? "redis-server", [
    "--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
  ]);
  let output = "";
  const failed = new Promise((_, reject) => redis.once("error", reject));
  redis.stdout.on("data", (chunk) => (output += chunk));
  await Promise.race([failed, until("redis-server to start", () => output.includes("Ready to accept connections"), 15_000)]);
  process.env.TASKFLEET_REDIS_URL = `redis://127.0.0.1:${port}/0`;
  process.env.TASKFLEET_QUEUE = QUEUE;
  queue = new Queue(QUEUE, { redisUrl: process.env.TASKFLEET_REDIS_URL });
});

after(async () => {
  await queue?.close();
  redis?.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

/** The application booted (agent and app in this process), serving HTTP on a free port. */
async function boot() {
  const app = mm.app({ baseDir: BASE, cache: false });
  await app.ready();
  const server = app.listen(0, "127.0.0.1");
  await new Promise((resolve) => server.once("listening", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  const close = async () => {
    await new Promise((resolve) => server.close(resolve));
    await app.close(); // the agent's beforeClose: drain
  };
  return { url, close };
}

async function http(url, init) {
  const response = await fetch(url, init);
  return { status: response.status, body: await response.json() };
}

test("an Egg app enqueues over HTTP, its agent's worker runs the tasks, and a close drains with nothing lost", async () => {
  const app = await boot();
  let closed = false;
  try {
    const created = await http(`${app.url}/thumbnails`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ image: "cat.png" }),
    });
    assert.equal(created.status, 202);
    await until("the agent's worker does the request's task", async () => {
      return (await http(`${app.url}/thumbnails/${created.body.id}`)).body.state === "done";
    });
    const shown = await http(`${app.url}/thumbnails/${created.body.id}`);
    assert.deepEqual(shown.body.result, { image: "cat.png", width: 128 });
    assert.equal((await queue.workers()).length, 1);

    await queue.enqueueMany(
      Array.from({ length: N }, (_, i) => ({ payload: { image: `${i}.png`, ms: 40 }, name: "thumbnail" })),
    );
    await until("some of them done", async () => (await queue.stats()).done >= 20);
    closed = true;
    await app.close();
  } finally {
    if (!closed) await app.close();
  }
  const drained = await queue.stats();
  assert.equal(drained.running, 0, "the drain left nothing running");
  assert.equal(drained.dead + drained.lost, 0);
  assert.equal(drained.done + drained.pending, N + 1, JSON.stringify(drained));
  assert.ok(drained.pending > 0, "the close came mid-way: some tasks were handed back");
  assert.deepEqual(await queue.workers(), [], "the worker deregistered");

  const again = await boot();
  try {
    await until("the second boot does the rest", async () => (await queue.stats()).done === N + 1, 45_000);
  } finally {
    await again.close();
  }
  const stats = await queue.stats();
  assert.equal(stats.completed, N + 1, "each task completed once");
  assert.equal(stats.dead + stats.lost, 0);
});
