// The producer side of a Node system in `make bench`, driven by bench/systems/external.py:
// one command a line on stdin, `ok` (or `error <text>`) a line on stdout once it is done.
//
//   node producer.mjs bullmq
//   node producer.mjs taskfleet /path/to/clients/node/dist/src/index.js
//
// Commands: `single N` (N single enqueues, each awaited before the next), `batch N B`
// (N tasks in batches of B through the batch API), `one`, `purge`, `version`, `quit`.
import { createInterface } from "node:readline";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [system, entry] = process.argv.slice(2);
const redisUrl = process.env.BENCH_REDIS_URL;

async function bullmq() {
  const { Queue } = await import("bullmq");
  const url = new URL(redisUrl);
  const queue = new Queue("bench", { connection: { host: url.hostname, port: Number(url.port || 6379) } });
  await queue.waitUntilReady();
  const pkg = new URL(import.meta.resolve("bullmq/package.json"));
  return {
    version: JSON.parse(readFileSync(pkg, "utf8")).version,
    one: () => queue.add("noop", {}),
    many: (k) => queue.addBulk(Array.from({ length: k }, () => ({ name: "noop", data: {} }))),
    purge: () => queue.obliterate({ force: true }),
    close: () => queue.close(),
  };
}

async function taskfleet() {
  const { Queue } = await import(pathToFileURL(entry).href);
  const queue = new Queue("bench", { redisUrl });
  const pkg = new URL("../../package.json", pathToFileURL(entry));
  return {
    version: JSON.parse(readFileSync(pkg, "utf8")).version,
    one: () => queue.enqueue({}),
    many: (k) => queue.enqueueMany(Array.from({ length: k }, () => ({ payload: {} }))),
    purge: () => queue.purge(),
    close: () => queue.close(),
  };
}

const ops = system === "bullmq" ? await bullmq() : system === "taskfleet" ? await taskfleet() : null;
if (ops === null) {
  console.error(`producer.mjs: unknown system ${system}`);
  process.exit(2);
}

async function run(cmd, a, b) {
  switch (cmd) {
    case "single":
      for (let i = 0; i < a; i++) await ops.one();
      return "ok";
    case "batch":
      for (let start = 0; start < a; start += b) await ops.many(Math.min(b, a - start));
      return "ok";
    case "one":
      await ops.one();
      return "ok";
    case "purge":
      await ops.purge();
      return "ok";
    case "version":
      return `ok ${ops.version}`;
    default:
      throw new Error(`unknown command ${cmd}`);
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  const [cmd, a, b] = line.trim().split(/\s+/);
  if (cmd === "quit") break;
  let reply;
  try {
    reply = await run(cmd, Number(a), Number(b));
  } catch (error) {
    reply = `error ${String(error?.message ?? error).replace(/\s+/g, " ")}`;
  }
  process.stdout.write(`${reply}\n`);
}
await ops.close();
process.exit(0);
