"use strict";

const { Controller } = require("egg");

class ThumbnailsController extends Controller {
  // POST /thumbnails { image }: 202 and the task's id; the agent's worker makes it
  async create() {
    const { image, ms } = this.ctx.request.body;
    const id = await this.app.taskfleet.enqueue({ image, ms }, { name: "thumbnail" });
    this.ctx.status = 202;
    this.ctx.body = { id };
  }

  // GET /thumbnails/:id: its state and, once done, its result
  async show() {
    const task = await this.app.taskfleet.get(this.ctx.params.id);
    if (task === null) {
      this.ctx.status = 404;
      return;
    }
    this.ctx.body = { state: task.state, result: task.result };
  }
}

module.exports = ThumbnailsController;
