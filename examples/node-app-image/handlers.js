// Handlers of the Node.js example image (examples/node-app-image/Dockerfile), used by
// e2e/test_node_fleet.py: the Node twin of the Python worker's
// taskfleet.samples:sleep_and_record. Each task sleeps payload.seconds, then appends one
// record of that execution to the Redis list payload.record_key, outside the queue's own
// bookkeeping, so a test can count how often each task really ran.
import { Redis } from "ioredis";

const EXECUTIONS_KEY = "taskfleet:samples:executions";
let client = null;

function redis() {
  // One connection per process, to the queue's own Redis (the operator sets the URL).
  client ??= new Redis(process.env.TASKFLEET_REDIS_URL ?? "redis://localhost:6379/0", {
    maxRetriesPerRequest: 3,
  });
  return client;
}

function seconds(payload) {
  const value = Number(payload.seconds ?? 0);
  if (!(value >= 0 && value <= 86400)) throw new Error(`seconds must be within 0..86400, got ${payload.seconds}`);
  return value;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/** Sleep `seconds` (reporting progress each second), then record this execution. Stops
 * early when the run is aborted (cancel, timeout, lost lease, drain deadline) and records
 * nothing then. */
export async function sleepAndRecord(payload, task) {
  const total = seconds(payload);
  const end = Date.now() + total * 1000;
  let reported = 0;
  while (Date.now() < end) {
    if (task.signal.aborted) return { aborted: task.signal.reason?.name ?? "aborted" };
    await sleep(Math.min(1000, end - Date.now()), task.signal);
    const elapsed = Math.floor(total - (end - Date.now()) / 1000);
    if (total >= 2 && elapsed > reported && Date.now() < end) {
      reported = elapsed;
      task.progress({ done: reported, total: Math.floor(total), message: "sleeping" });
    }
  }
  if (task.signal.aborted) return { aborted: task.signal.reason?.name ?? "aborted" };
  const record = {
    id: task.id,
    pod: task.pod,
    incarnation: task.incarnation,
    attempt: task.attempt,
    at: Date.now() / 1000,
    runtime: `node ${process.version}`,
  };
  await redis().rpush(String(payload.record_key ?? EXECUTIONS_KEY), JSON.stringify(record));
  return record;
}
