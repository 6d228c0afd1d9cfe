// GraphQL Yoga 5 on node:http: every error body here is Yoga's own.
// Error shape: graphql-yoga/cjs/error.js and plugins/result-processor (`{"errors": [{message,
// locations, extensions}]}`); per GraphQL over HTTP, a request that fails before execution
// (a syntax or validation error, no query, a mutation over GET) is answered with a 4xx:
// graphql-yoga/cjs/plugins/request-validation/ (use-check-method-for-graphql: 405,
// use-http-validation-error: 400) and request-parser/ (400 "Must provide query string.").
"use strict";
const { createServer } = require("node:http");
const { createYoga, createSchema, createGraphQLError } = require("graphql-yoga");

const items = { 1: { id: 1, name: "apple" } };
const schema = createSchema({
  typeDefs: `
    type Item { id: Int!, name: String! }
    type Query { item(id: Int!): Item }
    type Mutation { addItem(name: String!): Item }
  `,
  resolvers: {
    Query: { item: (_, { id }) => items[id] || null },
    Mutation: {
      addItem: (_, { name }) => {
        if (Object.values(items).some((item) => item.name === name)) {
          throw createGraphQLError(`An item named '${name}' already exists`, {
            extensions: { code: "CONFLICT", http: { status: 409 } },
          });
        }
        return { id: 2, name };
      },
    },
  },
});
const yoga = createYoga({ schema, logging: false, maskedErrors: true });
createServer(yoga).listen(Number(process.argv[2]), "127.0.0.1");
