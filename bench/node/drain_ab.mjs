// The Node worker's drain with two builds of clients/node, alternating, one fresh process
// per side and round: the steady figure of a change to the Node worker's per-task path.
//
//   node bench/node/drain_ab.mjs DIST_A DIST_B [--rounds 6] [--n 20000] [--listeners]
//
// DIST_A, DIST_B: `dist/src` folders of built clients (`npm run build` in clients/node; for
// a base commit, `git archive BASE clients/node | tar -x -C /tmp/base` and build there).
// Each round, on one redis-server started here (no persistence) and flushed between runs,
// each side (the order alternating by round) enqueues --n tasks in batches of 1,000, then
// drains them with one in-process `Worker` (32 slots, a handler that returns at once, no
// schedules). Over the drain from its 10th percent to its end: tasks per second and the
// process's CPU per task (user + system). --listeners: side B's worker has a listener on
// completed, failed and progress. Medians by side at the end. Figures, never pass/fail.
import { spawn, spawnSync } from "node:child_process";
import { createServer } from "node:net";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);

if (args[0] === "--child") {
  const [, dist, url, n, listeners] = args;
  const { Queue, Worker, configureLogging } = await import(pathToFileURL(`${dist}/index.js`).href);
  configureLogging("kv", "warning");
  const total = Number(n);
  const q = new Queue("bench", { redisUrl: url });
  for (let i = 0; i < total; i += 1000) {
    const size = Math.min(1000, total - i);
    await q.enqueueMany(Array.from({ length: size }, (_, j) => ({ payload: { i: i + j } })));
  }
  const w = new Worker("bench", {
    redisUrl: url,
    concurrency: 32,
    fireSchedules: false,
    handler: () => null,
  });
  if (listeners === "1") {
    let seen = 0;
    for (const event of ["completed", "failed", "progress"]) w.on(event, () => (seen += 1));
  }
  const running = w.run();
  const tenth = Math.ceil(total / 10);
  let t0 = 0;
  let cpu0 = null;
  for (;;) {
    const done = w.counters.completed;
    if (cpu0 === null && done >= tenth) {
      t0 = performance.now();
      cpu0 = process.cpuUsage();
    }
    if (done >= total) break;
    await new Promise((r) => setTimeout(r, 2));
  }
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const tasks = total - tenth;
  w.drain();
  await running;
  await q.close();
  console.log(
    JSON.stringify({ rate: tasks / seconds, cpuUsPerTask: (cpu.user + cpu.system) / tasks }),
  );
  process.exit(0);
}

const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at < 0 ? fallback : Number(args[at + 1]);
};
const [distA, distB] = args.filter((a) => !a.startsWith("--")).slice(0, 2).map((d) => resolve(d));
if (distA === undefined || distB === undefined) {
  console.error("usage: node bench/node/drain_ab.mjs DIST_A DIST_B [--rounds 6] [--n 20000] [--listeners]");
  process.exit(2);
}
const rounds = option("--rounds", 6);
const n = option("--n", 20000);
const listenersB = args.includes("--listeners");

const port = await new Promise((res) => {
  const s = createServer();
  s.listen(0, "127.0.0.1", () => {
    const p = s.address().port;
    s.close(() => res(p));
  });
});
const redis = spawn("redis-server", ["--port", String(port), "--save", "", "--appendonly", "no"], {
  stdio: "ignore",
});
const url = `redis://127.0.0.1:${port}/0`;
await new Promise((r) => setTimeout(r, 300));
const flush = () => spawnSync("redis-cli", ["-p", String(port), "FLUSHALL"]);

const runSide = (dist, withListeners) => {
  flush();
  const out = spawnSync(
    process.execPath,
    [process.argv[1], "--child", dist, url, String(n), withListeners ? "1" : "0"],
    { encoding: "utf8" },
  );
  if (out.status !== 0) throw new Error(`side failed: ${out.stderr}`);
  return JSON.parse(out.stdout.trim().split("\n").pop());
};

const results = { A: [], B: [] };
for (let round = 0; round < rounds; round++) {
  const order = round % 2 === 0 ? ["A", "B"] : ["B", "A"];
  for (const side of order) {
    const r = runSide(side === "A" ? distA : distB, side === "B" && listenersB);
    results[side].push(r);
    console.log(`round ${round + 1} ${side}: ${r.rate.toFixed(0)} tasks/s, ${r.cpuUsPerTask.toFixed(1)} µs CPU/task`);
  }
}
redis.kill();
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
for (const side of ["A", "B"]) {
  const rs = results[side];
  console.log(
    `${side} median: ${median(rs.map((r) => r.rate)).toFixed(0)} tasks/s, ` +
      `${median(rs.map((r) => r.cpuUsPerTask)).toFixed(1)} µs CPU/task`,
  );
}
const ratio = median(results.B.map((r) => r.rate)) / median(results.A.map((r) => r.rate));
console.log(`B/A drain rate: ${ratio.toFixed(3)}; load average ${(await import("node:os")).loadavg().map((x) => x.toFixed(2)).join(" ")}`);
