"use strict";

module.exports = (app) => {
  app.router.post("/thumbnails", app.controller.thumbnails.create);
  app.router.get("/thumbnails/:id", app.controller.thumbnails.show);
};
