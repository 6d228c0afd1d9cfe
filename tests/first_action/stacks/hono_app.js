// Hono 4 on @hono/node-server: every error body here is Hono's own.
// Error shape: hono/dist/cjs/http-exception.js (HTTPException.getResponse: the message as
// text/plain) and hono-base.js (notFoundHandler "404 Not Found", errorHandler "Internal Server
// Error"); middleware: hono/body-limit (413 "Payload Too Large"), hono/timeout (504 HTTPException
// "Gateway Timeout"), hono/validator (400 with the validator's message), hono/basic-auth (401).
"use strict";
const { Hono } = require("hono");
const { serve } = require("@hono/node-server");
const { HTTPException } = require("hono/http-exception");
const { bodyLimit } = require("hono/body-limit");
const { timeout } = require("hono/timeout");
const { basicAuth } = require("hono/basic-auth");
const { validator } = require("hono/validator");

const items = { 1: { id: 1, name: "apple" } };
const app = new Hono();
app.get("/items/:id", (c) => {
  const item = items[c.req.param("id")];
  if (!item) throw new HTTPException(404, { message: `Item ${c.req.param("id")} not found` });
  return c.json(item);
});
app.post(
  "/items",
  bodyLimit({ maxSize: 1024 }),
  validator("json", (value, c) => {
    if (typeof value.name !== "string") return c.text("name must be a string", 400);
    return value;
  }),
  (c) => {
    const { name } = c.req.valid("json");
    if (Object.values(items).some((item) => item.name === name)) {
      throw new HTTPException(409, { message: `An item named '${name}' already exists` });
    }
    return c.json({ id: 2, name }, 201);
  },
);
app.get("/slow", timeout(500), async (c) => {
  await new Promise((resolve) => setTimeout(resolve, 3000));
  return c.json({ done: true });
});
app.use("/admin/*", basicAuth({ username: "admin", password: "secret" }));
app.get("/admin/report", (c) => c.json({ ok: true }));
app.get("/crash", () => {
  throw new Error("boom");
});
serve({ fetch: app.fetch, hostname: "127.0.0.1", port: Number(process.argv[2]) });
