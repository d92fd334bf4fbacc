import pytest


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # The demo seed creates three users; the default PBKDF2 hasher makes that most of a test's time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
