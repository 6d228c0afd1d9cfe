// Fastify 5: every error body here is Fastify's own.
// Error shape: fastify/lib/error-serializer.js and lib/error-handler.js
// (`{statusCode, code, error, message}`); schema validation: lib/validation.js (ajv messages,
// FST_ERR_VALIDATION, "body must have required property 'name'"); the 404 handler:
// lib/fourOhFour.js ("Route METHOD:URL not found", also for a method the route lacks); body
// limits and content types: lib/contentTypeParser.js (FST_ERR_CTP_BODY_TOO_LARGE 413,
// FST_ERR_CTP_INVALID_MEDIA_TYPE 415, FST_ERR_CTP_INVALID_JSON_BODY 400).
"use strict";
const fastify = require("fastify")({ logger: false, bodyLimit: 1024 });

const items = { 1: { id: 1, name: "apple" } };
fastify.get("/items/:id", async (request, reply) => {
  const item = items[request.params.id];
  if (!item) {
    const error = new Error(`Item ${request.params.id} not found`);
    error.statusCode = 404;
    throw error;
  }
  return item;
});
fastify.post(
  "/items",
  {
    schema: {
      body: {
        type: "object",
        required: ["name"],
        properties: { name: { type: "string" }, qty: { type: "integer", minimum: 1 } },
      },
    },
  },
  async (request, reply) => {
    const { name } = request.body;
    if (Object.values(items).some((item) => item.name === name)) {
      const error = new Error(`An item named '${name}' already exists`);
      error.statusCode = 409;
      throw error;
    }
    reply.code(201);
    return { id: 2, name };
  },
);
fastify.get("/crash", async () => {
  throw new Error("boom");
});
fastify.listen({ host: "127.0.0.1", port: Number(process.argv[2]) });
