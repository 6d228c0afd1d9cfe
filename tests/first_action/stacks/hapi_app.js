// hapi 21 with joi validation: every error body here is hapi's own (Boom).
// Error shape: @hapi/boom/lib/index.js, output.payload (`{statusCode, error, message}`);
// validation: @hapi/hapi/lib/validation.js (a failAction that rethrows keeps joi's message;
// `validation: {source, keys}`); payload limits: @hapi/subtext (413 "Payload content length
// greater than maximum allowed"); the route's server timeout: @hapi/hapi/lib/request.js
// (503 Service Unavailable); unsupported content type: @hapi/subtext (415).
"use strict";
const Hapi = require("@hapi/hapi");
const Boom = require("@hapi/boom");
const Joi = require("joi");

const items = { 1: { id: 1, name: "apple" } };

async function main() {
  const server = Hapi.server({
    host: "127.0.0.1",
    port: Number(process.argv[2]),
    routes: { validate: { failAction: (request, h, err) => { throw err; } } },
  });
  server.route({
    method: "GET",
    path: "/items/{id}",
    handler: (request) => {
      const item = items[request.params.id];
      if (!item) throw Boom.notFound(`Item ${request.params.id} not found`);
      return item;
    },
  });
  server.route({
    method: "POST",
    path: "/items",
    options: {
      payload: { maxBytes: 1024 },
      validate: { payload: Joi.object({ name: Joi.string().required(), qty: Joi.number() }) },
    },
    handler: (request, h) => {
      const { name } = request.payload;
      if (Object.values(items).some((item) => item.name === name)) {
        throw Boom.conflict(`An item named '${name}' already exists`);
      }
      return h.response({ id: 2, name }).code(201);
    },
  });
  server.route({
    method: "GET",
    path: "/slow",
    options: { timeout: { server: 500 } },
    handler: async () => {
      await new Promise((resolve) => setTimeout(resolve, 3000));
      return { done: true };
    },
  });
  server.route({
    method: "GET",
    path: "/admin",
    handler: (request) => {
      if (!request.headers.authorization) throw Boom.unauthorized("Missing token", "Bearer");
      throw Boom.forbidden("Only administrators may read /admin");
    },
  });
  server.route({
    method: "GET",
    path: "/quota",
    handler: () => {
      const error = Boom.tooManyRequests("You used all 50 calls of this hour");
      error.output.headers["Retry-After"] = "120";
      throw error;
    },
  });
  await server.start();
}

main();
