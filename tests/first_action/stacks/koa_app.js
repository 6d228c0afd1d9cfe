// Koa 3 with @koa/router and @koa/bodyparser: every error body here is Koa's own.
// Error shape: koa/lib/context.js, ctx.onerror: a thrown http-errors error is answered with
// its message as text/plain when `expose` (4xx) and with the status's reason phrase when not
// (5xx); 405 and 501 from @koa/router's allowedMethods(); body errors from @koa/bodyparser
// (co-body/raw-body: 400 for malformed JSON, 413 past jsonLimit).
"use strict";
const Koa = require("koa");
const Router = require("@koa/router");
const { bodyParser } = require("@koa/bodyparser");

const items = { 1: { id: 1, name: "apple" } };
const router = new Router();
router.get("/items/:id", (ctx) => {
  const item = items[ctx.params.id];
  if (!item) ctx.throw(404, `Item ${ctx.params.id} not found`);
  ctx.body = item;
});
router.post("/items", (ctx) => {
  const name = ctx.request.body && ctx.request.body.name;
  if (!name) ctx.throw(422, "name is required");
  if (Object.values(items).some((item) => item.name === name)) {
    ctx.throw(409, `An item named '${name}' already exists`);
  }
  ctx.status = 201;
  ctx.body = { id: 2, name };
});
router.get("/admin", (ctx) => {
  if (!ctx.get("Authorization")) ctx.throw(401, "Authentication required for /admin");
  ctx.throw(403, "Only administrators may read /admin");
});
router.get("/crash", () => {
  throw new Error("boom");
});

const app = new Koa();
app.silent = true;
app.use(bodyParser({ jsonLimit: "1kb" }));
app.use(router.routes());
app.use(router.allowedMethods());
app.listen(Number(process.argv[2]), "127.0.0.1");
