// A BullMQ worker as its guide writes one: the default options (concurrency 1 unless
// BENCH_BULLMQ_CONCURRENCY says otherwise), the reference task, and a close on SIGTERM.
import { Worker } from "bullmq";

import { noop } from "./tasks.mjs";

const url = new URL(process.env.BENCH_REDIS_URL);
const options = { connection: { host: url.hostname, port: Number(url.port || 6379) } };
if (process.env.BENCH_BULLMQ_CONCURRENCY) options.concurrency = Number(process.env.BENCH_BULLMQ_CONCURRENCY);

const worker = new Worker("bench", async () => noop(), options);
worker.on("error", (error) => console.error(error));

const stop = async () => {
  await worker.close();
  process.exit(0);
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
