"""A Django project with Django REST Framework in one file, for the django pack's live tests.

`python django_app.py PORT` serves it with waitress on 127.0.0.1:PORT, DEBUG off as in
production. The error bodies are Django's and DRF's own: serializer field errors, DRF's
authentication and permission 403/401s, throttling with Retry-After, Django's HTML pages
(404, CSRF failure) and the parse error of a malformed JSON body.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="mendpoint-tests-only",
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
    ],
    INSTALLED_APPS=[
        "django.contrib.contenttypes",
        "django.contrib.auth",
        "rest_framework",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"burst": "1/min"}},
    TEMPLATES=[],
)
django.setup()

from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework import serializers  # noqa: E402
from rest_framework.authentication import BaseAuthentication  # noqa: E402
from rest_framework.exceptions import NotFound, ValidationError  # noqa: E402
from rest_framework.permissions import BasePermission, IsAuthenticated  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.throttling import ScopedRateThrottle  # noqa: E402
from rest_framework.views import APIView  # noqa: E402


class ItemSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=20)
    quantity = serializers.IntegerField(min_value=1)


class Items(APIView):
    """POST validates with a serializer: DRF answers 400 {field: [messages]}."""

    authentication_classes: ClassVar[list[type[BaseAuthentication]]] = []
    permission_classes: ClassVar[list[type[BasePermission]]] = []

    def post(self, request: Request) -> Response:
        serializer = ItemSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        if serializer.validated_data["name"] == "taken":
            raise ValidationError({"non_field_errors": ["An item with this name exists."]})
        return Response(serializer.data, status=201)


class Private(APIView):
    """DRF's default authentication (session, basic) and IsAuthenticated: anonymous → 403."""

    permission_classes: ClassVar = [IsAuthenticated]

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


class TokenUser:
    is_authenticated = True
    is_active = True


class TokenAuthentication(BaseAuthentication):
    """A token scheme: DRF then answers the anonymous caller 401 with WWW-Authenticate."""

    def authenticate(self, request: Request) -> tuple[TokenUser, str] | None:
        token = request.META.get("HTTP_AUTHORIZATION", "")
        return (TokenUser(), token) if token == "Token good" else None

    def authenticate_header(self, request: Request) -> str:
        return "Token"


class NoOne(BasePermission):
    def has_permission(self, request: Request, view: object) -> bool:
        return False


class Admin(APIView):
    authentication_classes: ClassVar = [TokenAuthentication]
    permission_classes: ClassVar = [IsAuthenticated, NoOne]

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


class Burst(APIView):
    authentication_classes: ClassVar[list[type[BaseAuthentication]]] = []
    permission_classes: ClassVar[list[type[BasePermission]]] = []
    throttle_classes: ClassVar = [ScopedRateThrottle]
    throttle_scope = "burst"

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


class Missing(APIView):
    authentication_classes: ClassVar[list[type[BaseAuthentication]]] = []
    permission_classes: ClassVar[list[type[BasePermission]]] = []

    def get(self, request: Request, item_id: int) -> Response:
        raise NotFound(f"No item {item_id}.")


def form(request: HttpRequest) -> HttpResponse:
    """A plain Django view: a POST without the CSRF cookie gets Django's 403 page."""
    return HttpResponse("ok")


urlpatterns = [
    path("api/items/", Items.as_view()),
    path("api/items/<int:item_id>/", Missing.as_view()),
    path("api/private/", Private.as_view()),
    path("api/admin/", Admin.as_view()),
    path("api/burst/", Burst.as_view()),
    path("form/", form),
]

if __name__ == "__main__":
    from django.core.wsgi import get_wsgi_application
    from waitress import serve

    serve(get_wsgi_application(), host="127.0.0.1", port=int(sys.argv[1]), _quiet=True)
