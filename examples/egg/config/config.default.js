"use strict";

// The queue this application enqueues to and its agent works. TASKFLEET_REDIS_URL and
// TASKFLEET_QUEUE override them (the test sets its own redis-server).
module.exports = () => ({
  keys: "taskfleet-example-egg",
  taskfleet: {
    redisUrl: process.env.TASKFLEET_REDIS_URL ?? "redis://localhost:6379/0",
    queue: process.env.TASKFLEET_QUEUE ?? "egg.thumbnails",
    // the agent's worker: its slots, and how long a drain lets running tasks finish
    concurrency: 4,
    drainTimeoutMs: 10_000,
  },
  security: { csrf: { enable: false } },
});
