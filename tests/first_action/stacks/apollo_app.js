// Apollo Server 5 (startStandaloneServer): every error body here is Apollo's own.
// A held-out stack (docs/packs/corpus.md).
// Error shape: GraphQL-over-HTTP `{"errors": [{message, extensions: {code}}]}`;
// @apollo/server/src/errors (GRAPHQL_PARSE_FAILED, GRAPHQL_VALIDATION_FAILED,
// BAD_USER_INPUT, BAD_REQUEST), the CSRF prevention plugin
// (@apollo/server/src/preventCsrf.ts), runHttpQuery.ts (405 for a mutation over GET);
// a resolver's GraphQLError with `extensions.http.status` sets the status.
"use strict";
const { ApolloServer } = require("@apollo/server");
const { startStandaloneServer } = require("@apollo/server/standalone");
const { GraphQLError } = require("graphql");

const items = { 1: { id: 1, name: "apple" } };

const typeDefs = `
  type Item { id: Int!, name: String! }
  type Query { item(id: Int!): Item, secret: String }
  type Mutation { addItem(name: String!): Item }
`;

const resolvers = {
  Query: {
    item: (_, { id }) => {
      if (!items[id]) {
        throw new GraphQLError(`No item with id ${id}`, {
          extensions: { code: "NOT_FOUND", http: { status: 404 } },
        });
      }
      return items[id];
    },
    secret: (_, __, context) => {
      if (!context.user) {
        throw new GraphQLError("Send a bearer token to read secrets", {
          extensions: { code: "UNAUTHENTICATED", http: { status: 401 } },
        });
      }
      return "s3";
    },
  },
  Mutation: {
    addItem: (_, { name }) => {
      if (Object.values(items).some((item) => item.name === name)) {
        throw new GraphQLError(`An item named '${name}' already exists`, {
          extensions: { code: "CONFLICT", http: { status: 409 } },
        });
      }
      return { id: 2, name };
    },
  },
};

async function main() {
  const server = new ApolloServer({ typeDefs, resolvers, introspection: false });
  await startStandaloneServer(server, {
    listen: { host: "127.0.0.1", port: Number(process.argv[2]) },
    context: async ({ req }) => ({ user: req.headers.authorization ? "someone" : null }),
  });
}
main();
