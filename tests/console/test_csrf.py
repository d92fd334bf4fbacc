"""The API is exempt from CSRF checks (its requests are signed); the console's forms are not: a
POST without a CSRF token to any console page is refused, whoever is logged in."""

import pytest
from django.test import Client
from django.urls import URLPattern, reverse

from console.urls import console_patterns

pytestmark = pytest.mark.django_db


def console_urls() -> list[str]:
    urls = [reverse("login"), reverse("logout")]
    for pattern in console_patterns:
        assert isinstance(pattern, URLPattern)
        args = {name: "x" for name in pattern.pattern.converters}
        urls.append(reverse(f"console:{pattern.name}", kwargs=args))
    return urls


def test_every_console_page_refuses_a_post_without_a_csrf_token(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    refused = {url: client.post(url, {"name": "x"}).status_code for url in console_urls()}
    assert set(refused.values()) == {403}, refused
    assert len(refused) == len(console_patterns) + 2


def test_the_same_post_with_its_token_gets_past_the_check(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    token = client.get(reverse("console:access-keys")).cookies["csrftoken"].value
    response = client.post(reverse("console:access-key-create"), {"csrfmiddlewaretoken": token})
    assert response.status_code != 403
