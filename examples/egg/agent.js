"use strict";

// Egg's agent process is one per application (the master starts it before the app
// workers), so one taskfleet worker runs here with `concurrency` slots: the app workers
// only enqueue. On stop (egg-scripts stop, SIGTERM to the master, app.close() in tests)
// Egg calls beforeClose: the worker stops claiming, lets running tasks finish within
// drainTimeoutMs, hands the rest back to the queue (no attempt spent) and resolves.
const { Worker } = require("taskfleet");
const handlers = require("./lib/handlers");

class AgentBoot {
  constructor(agent) {
    this.agent = agent;
    this.worker = null;
    this.running = null;
  }

  async didReady() {
    const { redisUrl, queue, concurrency, drainTimeoutMs } = this.agent.config.taskfleet;
    this.worker = new Worker(queue, {
      redisUrl,
      handlers,
      concurrency,
      drainTimeoutMs,
      pod: `egg-agent-${process.pid}`,
      fireSchedules: false,
    });
    this.worker.on("failed", (task, error) => this.agent.logger.warn("task %s failed: %s", task.id, error));
    this.running = this.worker.run();
    this.running.then((code) => {
      if (code !== 0) this.agent.logger.error("taskfleet worker stopped with %d", code);
    });
  }

  async beforeClose() {
    if (this.worker === null) return;
    this.worker.drain();
    const code = await this.running;
    this.agent.logger.info("taskfleet worker drained (%d)", code);
  }
}

module.exports = AgentBoot;
