"""A Django REST Framework API described by drf-spectacular, for `mendpoint init`'s tests.

`python drf_schema.py` prints the OpenAPI 3 document drf-spectacular generates for it (JSON),
the same document `manage.py spectacular` would write. Its own process: Django's settings are
global, and the django pack's live app configures them differently.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="mendpoint-tests-only",
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=[
        "django.contrib.contenttypes",
        "django.contrib.auth",
        "rest_framework",
        "drf_spectacular",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    REST_FRAMEWORK={"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"},
    SPECTACULAR_SETTINGS={"TITLE": "Shop", "VERSION": "2.0.0"},
)
django.setup()

from django.urls import path  # noqa: E402
from drf_spectacular.generators import SchemaGenerator  # noqa: E402
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema  # noqa: E402
from rest_framework import serializers  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402


class OrderSerializer(serializers.Serializer[Any]):
    sku = serializers.CharField()
    quantity = serializers.IntegerField(min_value=1)


class ErrorSerializer(serializers.Serializer[Any]):
    code = serializers.CharField()
    detail = serializers.CharField()


class Orders(APIView):
    @extend_schema(
        operation_id="orders_create",
        request=OrderSerializer,
        responses={
            201: OrderSerializer,
            400: OpenApiResponse(description="Bad Request"),
            409: OpenApiResponse(
                response=ErrorSerializer,
                description="An order for this SKU is already open",
                examples=[
                    OpenApiExample(
                        "duplicate",
                        value={"code": "order_open", "detail": "Order for sku-1 is open"},
                        response_only=True,
                        status_codes=["409"],
                    )
                ],
            ),
        },
    )
    def post(self, request: Request) -> Response:
        return Response(status=201)


urlpatterns = [path("orders/", Orders.as_view())]

if __name__ == "__main__":
    schema = SchemaGenerator().get_schema(request=None, public=True)
    json.dump(schema, sys.stdout, default=str)
