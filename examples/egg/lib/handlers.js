"use strict";

const { setTimeout: sleep } = require("node:timers/promises");

// The tasks the agent's worker runs, by name. A real one would resize an image; this one
// takes `ms` milliseconds (aborted with the run: a cancel, a timeout, a drain's deadline).
module.exports = {
  async thumbnail(payload, task) {
    await sleep(payload.ms ?? 10, undefined, { signal: task.signal });
    return { image: payload.image, width: 128 };
  },
};
