"""Schemathesis fuzzes every operation of /api/schema/ with requests signed by a member's AccessKey,
with inputs the schema allows and inputs it forbids: no answer may be a 5xx.

A fixed seed (derandomize) and a bounded number of examples per operation keep it deterministic
and within a minute; `OPENDLC_FUZZ_EXAMPLES` raises the bound for a longer hunt by hand.
"""

import json
import os

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode

from tests.api.signed import signed

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's threads see the test's rows
EXAMPLES = int(os.environ.get("OPENDLC_FUZZ_EXAMPLES", "12"))


def api_schema():
    """The schema the server serves at /api/schema/, generated in-process (JSON-normalised)."""
    raw = json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))
    loaded = schemathesis.openapi.from_dict(raw)
    loaded.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], allow_x00=True)
    return loaded


# Loaded as the module is collected (pytest-django has set Django up by then): schemathesis's lazy
# `from_fixture` does not run under pytest 9.
schema = api_schema()


@schema.parametrize()
@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case, live_server, alice_key):
    sent = case.as_transport_kwargs(base_url=live_server.url)
    body = sent["json"] if "json" in sent else sent.get("data")
    extra = {k: v for k, v in (case.headers or {}).items() if isinstance(v, str) and v.isascii()}
    response = signed(live_server, alice_key, case.method, case.formatted_path, query=sent.get("params"),
                      body=body, headers=extra)
    assert response.status_code < 500, (f"{case.method} {case.formatted_path} query={sent.get('params')!r} "
                                        f"body={body!r:.500} -> {response.status_code}: {response.text[:500]}")
