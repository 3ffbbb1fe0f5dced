// The drain of the reference handler (one `RPUSH` a task, bench/node/tasks.mjs's write)
// side by side: builds of clients/node and BullMQ, at one concurrency, alternating, one
// fresh process per side and round, on one redis-server started here (no persistence).
//
//   node bench/node/drain_vs.mjs SIDE... [--rounds 4] [--n 20000] [--concurrency 8] [--cpu-prof DIR] [--commandstats]
//
// SIDE: the `dist/src` folder of a built clients/node (`npm run build`; for a base commit,
// `git archive BASE clients/node worker-image/taskfleet/protocol/bundle | tar -x -C
// /tmp/base`, link its node_modules, build), optionally `DIST@N` for a worker given
// `prefetch: N` (else its default; a build without prefetch ignores it), or `bullmq`
// (bench/node's pinned BullMQ: `npm ci` in bench/node). Each round, each side (the
// order rotating by round) enqueues --n tasks in batches of 1,000 through its own batch API,
// then drains them with one in-process worker of --concurrency slots whose handler awaits
// one `RPUSH bench:done <pid>` on an ioredis client of its own. Over the drain from its 10th
// percent to its end (counted as handlers return): tasks per second, the worker process's
// CPU per task (user + system) and redis-server's (INFO cpu). Medians by side at the end,
// with the load average before and after. Figures, never pass/fail.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { loadavg } from "node:os";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);

const redisCpu = async (client) => {
  const info = await client.info("cpu");
  const field = (name) =>
    Number(new RegExp(`${name}:([0-9.]+)`).exec(info)?.[1] ?? 0);
  return (field("used_cpu_user") + field("used_cpu_sys")) * 1e6; // µs
};

if (args[0] === "--child") {
  const [, side, url, n, concurrency, prefetch = ""] = args;
  const { Redis } = await import("ioredis");
  const total = Number(n);
  const slots = Number(concurrency);
  const writer = new Redis(url);
  const probe = new Redis(url);
  let handled = 0;
  const handler = async () => {
    await writer.rpush("bench:done", String(process.pid));
    handled += 1;
    return null;
  };
  let stop;
  if (side === "bullmq") {
    const { Queue, Worker } = await import("bullmq");
    const u = new URL(url);
    const connection = { host: u.hostname, port: Number(u.port) };
    const q = new Queue("bench", { connection });
    for (let i = 0; i < total; i += 1000) {
      const size = Math.min(1000, total - i);
      await q.addBulk(
        Array.from({ length: size }, (_, j) => ({
          name: "noop",
          data: { i: i + j },
        })),
      );
    }
    const w = new Worker("bench", handler, { connection, concurrency: slots });
    stop = async () => {
      await w.close();
      await q.close();
    };
  } else {
    const { Queue, Worker, configureLogging } = await import(
      pathToFileURL(`${side}/index.js`).href
    );
    configureLogging("kv", "warning");
    const q = new Queue("bench", { redisUrl: url });
    for (let i = 0; i < total; i += 1000) {
      const size = Math.min(1000, total - i);
      await q.enqueueMany(
        Array.from({ length: size }, (_, j) => ({ payload: { i: i + j } })),
      );
    }
    const w = new Worker("bench", {
      redisUrl: url,
      concurrency: slots,
      fireSchedules: false,
      handler,
      ...(prefetch === "" ? {} : { prefetch: Number(prefetch) }),
    });
    const running = w.run();
    stop = async () => {
      w.drain();
      await running;
      await q.close();
    };
  }
  const tenth = Math.ceil(total / 10);
  let t0 = 0;
  let cpu0 = null;
  let r0 = 0;
  for (;;) {
    if (cpu0 === null && handled >= tenth) {
      t0 = performance.now();
      cpu0 = process.cpuUsage();
      r0 = await redisCpu(probe);
    }
    if (handled >= total) break;
    await new Promise((r) => setTimeout(r, 2));
  }
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const redisUs = (await redisCpu(probe)) - r0;
  const tasks = total - tenth;
  await stop();
  writer.disconnect();
  probe.disconnect();
  console.log(
    JSON.stringify({
      rate: tasks / seconds,
      cpuUsPerTask: (cpu.user + cpu.system) / tasks,
      redisUsPerTask: redisUs / tasks,
    }),
  );
  process.exit(0);
}

const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at < 0 ? fallback : args[at + 1];
};
const valued = new Set(["--rounds", "--n", "--concurrency", "--cpu-prof"]);
const commandstats = args.includes("--commandstats");
const sides = args
  .filter((a, i) => !a.startsWith("--") && !valued.has(args[i - 1]))
  .map((s) => {
    if (s === "bullmq") return s;
    const at = /^(.*)@([0-9]+)$/.exec(s);
    return at === null ? resolve(s) : `${resolve(at[1])}@${at[2]}`;
  });
if (sides.length === 0) {
  console.error(
    "usage: node bench/node/drain_vs.mjs SIDE... [--rounds 4] [--n 20000] [--concurrency 8] [--cpu-prof DIR]",
  );
  process.exit(2);
}
const rounds = Number(option("--rounds", 4));
const n = Number(option("--n", 20000));
const concurrency = Number(option("--concurrency", 8));
const profDir = option("--cpu-prof", null);
if (profDir !== null) mkdirSync(profDir, { recursive: true });

const port = await new Promise((res) => {
  const s = createServer();
  s.listen(0, "127.0.0.1", () => {
    const p = s.address().port;
    s.close(() => res(p));
  });
});
const redis = spawn(
  "redis-server",
  ["--port", String(port), "--save", "", "--appendonly", "no"],
  {
    stdio: "ignore",
  },
);
const url = `redis://127.0.0.1:${port}/0`;
await new Promise((r) => setTimeout(r, 300));
const cli = (...command) =>
  spawnSync("redis-cli", ["-p", String(port), ...command], { encoding: "utf8" })
    .stdout;
const flush = () => {
  cli("FLUSHALL");
  cli("CONFIG", "RESETSTAT");
};
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");
const loadBefore = load();

const runSide = (side, i) => {
  flush();
  const prof =
    profDir === null
      ? []
      : [
          "--cpu-prof",
          "--cpu-prof-dir",
          resolve(profDir),
          "--cpu-prof-name",
          `side${i}-${Date.now()}.cpuprofile`,
        ];
  const out = spawnSync(
    process.execPath,
    [
      ...prof,
      process.argv[1],
      "--child",
      side.replace(/@[0-9]+$/, ""),
      url,
      String(n),
      String(concurrency),
      /@([0-9]+)$/.exec(side)?.[1] ?? "",
    ],
    { encoding: "utf8", cwd: import.meta.dirname },
  );
  if (out.status !== 0) throw new Error(`side ${side} failed: ${out.stderr}`);
  if (commandstats) {
    // per command: calls and CPU µs per task drained (the whole run: enqueue included)
    for (const line of cli("INFO", "commandstats").split("\n")) {
      const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
      if (m !== null && Number(m[2]) > 0)
        console.log(
          `  ${m[1]}: ${m[2]} calls, ${(Number(m[3]) / n).toFixed(1)} µs/task, ${(Number(m[3]) / Number(m[2])).toFixed(1)} µs/call`,
        );
    }
  }
  return JSON.parse(out.stdout.trim().split("\n").pop());
};

const results = sides.map(() => []);
for (let round = 0; round < rounds; round++) {
  const order = sides.map((_, i) => (i + round) % sides.length);
  for (const i of order) {
    const r = runSide(sides[i], i);
    results[i].push(r);
    console.log(
      `round ${round + 1} side ${i}: ${r.rate.toFixed(0)} tasks/s, worker ${r.cpuUsPerTask.toFixed(1)} µs/task, redis ${r.redisUsPerTask.toFixed(1)} µs/task`,
    );
  }
}
redis.kill();
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
console.log(
  `concurrency ${concurrency}, n ${n}, rounds ${rounds}; load average before ${loadBefore}, after ${load()}`,
);
sides.forEach((side, i) => {
  const rs = results[i];
  console.log(
    `side ${i} (${side}) median: ${median(rs.map((r) => r.rate)).toFixed(0)} tasks/s, ` +
      `worker ${median(rs.map((r) => r.cpuUsPerTask)).toFixed(1)} µs/task, ` +
      `redis ${median(rs.map((r) => r.redisUsPerTask)).toFixed(1)} µs/task; all: ${rs.map((r) => r.rate.toFixed(0)).join(" ")}`,
  );
});
