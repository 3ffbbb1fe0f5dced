// The reference task of `make bench` for the Node workers (taskfleet-node and BullMQ):
// exactly one Redis write, `RPUSH bench:done <pid>`, through one ioredis client per
// process, as every other system's handler does.
import { Redis } from "ioredis";

const DONE_KEY = "bench:done";
const PID = String(process.pid);
let client;

export async function noop() {
  client ??= new Redis(process.env.BENCH_REDIS_URL);
  await client.rpush(DONE_KEY, PID);
}
