// Express apps that fail the way Express apps do, for the express pack's live tests.
//
// `node express_app.js DEV_PORT PROD_PORT` serves the same app twice on 127.0.0.1: once as
// in development (finalhandler's HTML page shows the error's stack) and once with
// env=production (the page shows only the status text). The error bodies are Express's,
// body-parser's and express-validator's own.
"use strict";

const express = require("express");
const { body, validationResult } = require("express-validator");

function build(env) {
  const app = express();
  app.set("env", env);
  app.use(express.json({ limit: "1kb" }));

  app.post(
    "/orders",
    body("name").isString().notEmpty().withMessage("name is required"),
    body("quantity").isInt({ min: 1 }).withMessage("quantity must be a positive integer"),
    (req, res) => {
      const errors = validationResult(req);
      if (!errors.isEmpty()) {
        return res.status(400).json({ errors: errors.array() });
      }
      res.status(201).json({ ok: true });
    },
  );

  app.get("/orders/:id", (req, res, next) => {
    const err = new Error(`Order "${req.params.id}" can't be read`);
    err.status = 409;
    next(err);
  });

  app.get("/crash", () => {
    throw new Error("connect ECONNREFUSED 10.0.0.5:5432 (password=hunter2)");
  });

  return app;
}

const [devPort, prodPort] = process.argv.slice(2).map(Number);
build("development").listen(devPort, "127.0.0.1");
build("production").listen(prodPort, "127.0.0.1");
