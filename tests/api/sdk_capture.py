"""Capture what the official SDKs really send.

`capture_server()` runs a tiny HTTP server in a thread that records every request and answers
with a canned JSON response; `dlc_client()` / `studio_client()` build the real SDK clients
pointed at it (endpoint '127.0.0.1:PORT', protocol 'http'), exactly as a user would.

    with capture_server() as server:
        dlc_client(server.port).get_job("dlc-1", GetJobRequest())
        req = server.requests[-1]          # CapturedRequest: method, path, query, headers, body
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlsplit

AK = "LTAI-alice"
SECRET = "alice-secret-0123456789"


@dataclass
class CapturedRequest:
    method: str
    raw_target: str  # request-target as sent on the wire: path?query
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.raw_target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.raw_target).query, keep_blank_values=True)

    @property
    def header_map(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers}

    def json(self):
        return json.loads(self.body) if self.body else None


Reply = tuple[int, dict[str, str], bytes]


def json_reply(body: dict, status: int = 200) -> Reply:
    return status, {"Content-Type": "application/json;charset=utf-8"}, json.dumps(body).encode()


@dataclass
class CaptureServer:
    port: int = 0
    requests: list[CapturedRequest] = field(default_factory=list)
    # Called with each request; returns (status, headers, body). Replace to script answers.
    respond: Callable[[CapturedRequest], Reply] = lambda req: json_reply({"RequestId": "req-1"})


@contextlib.contextmanager
def capture_server():
    state = CaptureServer()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like the SDK's requests session expects

        def _handle(self):
            length = int(self.headers.get("Content-Length") or 0)
            captured = CapturedRequest(
                method=self.command,
                raw_target=self.path,
                headers=list(self.headers.items()),
                body=self.rfile.read(length) if length else b"",
            )
            state.requests.append(captured)
            status, headers, body = state.respond(captured)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        def log_message(self, *args):  # keep pytest output clean
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def _config(port: int, access_key_id: str, secret: str):
    from alibabacloud_tea_openapi.models import Config

    return Config(
        access_key_id=access_key_id,
        access_key_secret=secret,
        region_id="cn-hangzhou",
        endpoint=f"127.0.0.1:{port}",
        protocol="http",
        read_timeout=5000,
        connect_timeout=2000,
    )


def dlc_client(port: int, access_key_id: str = AK, secret: str = SECRET):
    from alibabacloud_pai_dlc20201203.client import Client

    return Client(_config(port, access_key_id, secret))


def studio_client(port: int, access_key_id: str = AK, secret: str = SECRET):
    from alibabacloud_paistudio20220112.client import Client

    return Client(_config(port, access_key_id, secret))
