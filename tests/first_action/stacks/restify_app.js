// restify 12: every error body here is restify's own (restify-errors).
// Error shape: restify-errors/lib/baseClasses/HttpError.js, toJSON (`{code, message}`); the
// router: restify/lib/router.js (ResourceNotFound "/x does not exist", MethodNotAllowed
// "DELETE is not allowed"); plugins: restify/lib/plugins/bodyReader.js (PayloadTooLarge,
// "Request body size exceeds 1024"), jsonBodyParser.js (InvalidContent), throttle.js
// (TooManyRequests, "You have exceeded your request rate of 0.1 r/s.").
"use strict";
const restify = require("restify");
const errors = require("restify-errors");

const items = { 1: { id: 1, name: "apple" } };
const server = restify.createServer({ handleUncaughtExceptions: true });
server.use(restify.plugins.bodyParser({ maxBodySize: 1024, mapParams: false }));
server.get("/items/:id", (req, res, next) => {
  const item = items[req.params.id];
  if (!item) return next(new errors.NotFoundError(`Item ${req.params.id} not found`));
  res.send(item);
  return next();
});
server.post("/items", (req, res, next) => {
  const name = req.body && req.body.name;
  if (!name) return next(new errors.UnprocessableEntityError("name is required"));
  if (Object.values(items).some((item) => item.name === name)) {
    return next(new errors.ConflictError(`An item named '${name}' already exists`));
  }
  res.send(201, { id: 2, name });
  return next();
});
server.get(
  "/search",
  restify.plugins.throttle({ burst: 1, rate: 0.1, ip: true }),
  (req, res, next) => {
    res.send({ results: [] });
    return next();
  },
);
server.listen(Number(process.argv[2]), "127.0.0.1");
