"""Flask-RESTX, on waitress: every error body here is Flask-RESTX's own.

Error shape: flask_restx/api.py, Api.handle_error (`{"message": ...}` for an HTTPException,
with the 404 "You have requested this URI [...] but did you mean ..." hint,
ERROR_404_HELP); request parsing: flask_restx/reqparse.py, RequestParser.parse_args
(`{"errors": {ARG: HELP}, "message": "Input payload validation failed"}`); model validation:
flask_restx/namespace.py with validate=True (jsonschema messages under `errors`).
"""

import sys

from flask import Flask
from flask_restx import Api, Resource, abort, fields, reqparse
from waitress import serve

app = Flask(__name__)
api = Api(app)
item_model = api.model("Item", {"name": fields.String(required=True), "qty": fields.Integer})
ITEMS = {1: {"id": 1, "name": "apple", "qty": 3}}

search_args = reqparse.RequestParser()
search_args.add_argument("limit", type=int, required=True, help="How many items, an integer")


@api.route("/items")
class Items(Resource):
    def get(self) -> dict[str, object]:
        args = search_args.parse_args()
        return {"items": list(ITEMS.values())[: args["limit"]]}

    @api.expect(item_model, validate=True)
    def post(self) -> tuple[dict[str, object], int]:
        name = api.payload["name"]
        if any(item["name"] == name for item in ITEMS.values()):
            abort(409, f"An item named '{name}' already exists")
        return {"id": 2, "name": name}, 201


@api.route("/items/<int:item_id>")
class Item(Resource):
    def get(self, item_id: int) -> dict[str, object]:
        if item_id not in ITEMS:
            abort(404, f"Item {item_id} doesn't exist")
        return ITEMS[item_id]


@api.route("/quota")
class Quota(Resource):
    def get(self) -> None:
        abort(429, "Daily quota of 100 calls used up; it resets at midnight UTC")


if __name__ == "__main__":
    serve(app, host="127.0.0.1", port=int(sys.argv[1]), _quiet=True)
