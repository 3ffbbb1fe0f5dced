// taskfleet-node workers under pm2: `pm2 start ecosystem.config.cjs`, then
// `pm2 reload ecosystem.config.cjs` to roll them (a new version, new settings) with
// nothing lost. clients/node/test/pm2.test.ts runs this file as it is.
//
// The worker takes its settings from TASKFLEET_* variables (or flags in `args`).
// pm2 stops a process with SIGINT, then SIGKILL after kill_timeout: the worker drains on
// SIGINT, so kill_timeout must be longer than its drain timeout, or pm2 kills it while
// tasks still run (they come back only when their lease expires, as from a lost worker).
const drainTimeoutS = Number(process.env.TASKFLEET_DRAIN_TIMEOUT ?? "30");

module.exports = {
  apps: [
    {
      name: process.env.TASKFLEET_PM2_NAME ?? "taskfleet-worker",
      // the bin of the taskfleet package (npm install taskfleet)
      script: process.env.TASKFLEET_NODE_BIN ?? "node_modules/taskfleet/dist/src/taskfleet-node.js",
      args: "worker",
      // cluster mode: pm2 reload starts the new process before it stops the old one
      exec_mode: "cluster",
      instances: Number(process.env.TASKFLEET_PM2_INSTANCES ?? "2"),
      kill_timeout: (drainTimeoutS + 10) * 1000,
      // a worker that exits 2 (bad settings) would fail the same way again
      stop_exit_codes: [2],
      env: {
        TASKFLEET_QUEUE: process.env.TASKFLEET_QUEUE ?? "emails",
        TASKFLEET_HANDLER: process.env.TASKFLEET_HANDLER ?? "./handlers.js:send",
        TASKFLEET_CONCURRENCY: process.env.TASKFLEET_CONCURRENCY ?? "8",
        TASKFLEET_DRAIN_TIMEOUT: String(drainTimeoutS),
        TASKFLEET_REDIS_URL: process.env.TASKFLEET_REDIS_URL ?? "redis://localhost:6379/0",
      },
    },
  ],
};
