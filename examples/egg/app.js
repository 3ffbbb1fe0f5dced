"use strict";

// Each app worker enqueues through one Queue (`app.taskfleet`), closed with the worker.
const { Queue } = require("taskfleet");

class AppBoot {
  constructor(app) {
    this.app = app;
  }

  async didLoad() {
    const { redisUrl, queue } = this.app.config.taskfleet;
    this.app.taskfleet = new Queue(queue, { redisUrl });
  }

  async beforeClose() {
    await this.app.taskfleet?.close();
  }
}

module.exports = AppBoot;
