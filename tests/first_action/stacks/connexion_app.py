"""Connexion 3 (AsyncApp on uvicorn), API-first from an OpenAPI 3 document: every error body
here is Connexion's own problem+json.

Error shape: connexion/problem.py and connexion/exceptions.py (ProblemException,
BadRequestProblem, ExtraParameterProblem, UnsupportedMediaTypeProblem, OAuthProblem);
request validation: connexion/validators/ (jsonschema's messages); routing:
connexion/middleware/routing.py (404, 405). A held-out stack (docs/packs/corpus.md).
"""

import sys

import connexion
from connexion.resolver import Resolver

ITEMS = {1: {"id": 1, "name": "apple", "qty": 3}}
ETAG = '"v1"'

OPENAPI = {
    "openapi": "3.0.3",
    "info": {"title": "items", "version": "1"},
    "components": {
        "securitySchemes": {
            "key": {
                "type": "apiKey",
                "in": "header",
                "name": "X-API-Key",
                "x-apikeyInfoFunc": "__main__.check_key",
            }
        },
        "schemas": {
            "Item": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "qty": {"type": "integer", "minimum": 0},
                },
            }
        },
    },
    "paths": {
        "/items": {
            "get": {
                "operationId": "list_items",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                    }
                ],
                "responses": {"200": {"description": "items"}},
            },
            "post": {
                "operationId": "create_item",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Item"}}
                    },
                },
                "responses": {"201": {"description": "created"}},
            },
        },
        "/items/{item_id}": {
            "parameters": [
                {"name": "item_id", "in": "path", "required": True, "schema": {"type": "integer"}}
            ],
            "get": {"operationId": "read_item", "responses": {"200": {"description": "item"}}},
            "put": {
                "operationId": "update_item",
                "parameters": [
                    {
                        "name": "If-Match",
                        "in": "header",
                        "required": True,
                        "schema": {"type": "string"},
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Item"}}
                    },
                },
                "responses": {"200": {"description": "updated"}},
            },
        },
        "/secure": {
            "get": {
                "operationId": "secure",
                "security": [{"key": []}],
                "responses": {"200": {"description": "secret"}},
            },
        },
    },
}


def check_key(key: str, required_scopes: object = None) -> dict[str, str] | None:
    return {"sub": "admin"} if key == "secret" else None


async def list_items(limit: int) -> dict[str, object]:
    return {"items": list(ITEMS.values())[:limit]}


async def read_item(item_id: int) -> object:
    if item_id not in ITEMS:
        return connexion.problem(404, "Not Found", f"No item with id {item_id}")
    return ITEMS[item_id]


async def create_item(body: dict[str, object]) -> object:
    if any(item["name"] == body["name"] for item in ITEMS.values()):
        return connexion.problem(409, "Conflict", f"An item named {body['name']!r} already exists")
    return {"id": 2, **body}, 201


async def update_item(item_id: int, body: dict[str, object]) -> object:
    if item_id not in ITEMS:
        return connexion.problem(404, "Not Found", f"No item with id {item_id}")
    if connexion.request.headers.get("if-match") != ETAG:
        return connexion.problem(412, "Precondition Failed", "The item changed since it was read")
    return {**ITEMS[item_id], **body}


async def secure() -> dict[str, str]:
    return {"secret": "s3"}


HANDLERS = (list_items, read_item, create_item, update_item, secure, check_key)
FUNCTIONS = {f.__name__: f for f in HANDLERS}

app = connexion.AsyncApp(__name__)
app.add_api(
    OPENAPI, resolver=Resolver(function_resolver=lambda op: FUNCTIONS[op.rsplit(".", 1)[-1]])
)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
