"""JSON over HTTP to an engine (httpx), every failure one line: unreachable, an HTTP error with the
server's own message, or an answer that is not JSON (not the dialect)."""

from __future__ import annotations

import json

from alcheck.errors import AlcheckError
from alcheck.options import DEFAULT_TIMEOUT_S

CONNECT_S = 5.0
READ_S = DEFAULT_TIMEOUT_S  # default --request-timeout: one request of max_tokens on a big model


class EngineError(AlcheckError):
    """Something between alcheck and the server failed (the CLI adds how to resume a partial run)."""


class EngineUnreachable(EngineError):
    """The server refused or dropped the connection, or stopped answering (also mid-run)."""


class EngineAnswer(EngineError):
    """The server answered, but not what the dialect answers (HTTP error, not JSON, wrong shape)."""


def import_httpx():
    try:
        import httpx
    except ImportError:
        raise AlcheckError(
            "--engine needs httpx and prometheus_client: pip install 'alcheck[serve]'"
        ) from None
    return httpx


class EngineHTTP:
    def __init__(self, base_url: str, flag: str = "--endpoint", read_timeout: float = READ_S):
        httpx = import_httpx()
        self.base_url, self.flag, self.read_timeout = base_url.rstrip("/"), flag, read_timeout
        self._httpx = httpx
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        self.client = httpx.Client(
            base_url=self.base_url, timeout=httpx.Timeout(read_timeout, connect=CONNECT_S), limits=limits
        )

    def close(self):
        self.client.close()

    def _send(self, method: str, path: str, **kw):
        httpx = self._httpx
        try:
            return self.client.request(method, path, **kw)
        except httpx.ConnectError as exc:
            raise EngineUnreachable(
                f"{self.flag} {self.base_url}: cannot connect ({_reason(exc)}): "
                "start the server, or check the host and port"
            ) from None
        except httpx.ConnectTimeout:
            raise EngineUnreachable(
                f"{self.flag} {self.base_url}: cannot connect within {CONNECT_S:g} s: "
                "check that the server is up, and the host and port"
            ) from None
        except httpx.TimeoutException:
            raise EngineUnreachable(
                f"{self.flag} {self.base_url}: {path} did not answer within {self.read_timeout:g} s "
                "(--request-timeout): check that the server is up and not hung, or raise "
                "--request-timeout for long generations"
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise EngineUnreachable(
                f"{self.flag} {self.base_url}: the connection broke during {path} "
                f"({_reason(exc)}): the server stopped or crashed; check its log"
            ) from None
        except httpx.HTTPError as exc:
            raise EngineUnreachable(f"{self.flag} {self.base_url}: {path} failed ({_reason(exc)})") from None

    def status(self, path: str) -> int | None:
        """The HTTP status of GET path, or None when nothing answers (used while a server starts)."""
        try:
            return self.client.get(path, timeout=CONNECT_S).status_code
        except self._httpx.HTTPError:
            return None

    def get_json(self, path: str, what: str, missing_ok: bool = False):
        response = self._send("GET", path)
        if missing_ok and response.status_code in (404, 405):
            return None
        return self._json(response, path, what)

    def get_text(self, path: str, what: str, missing_ok: bool = False) -> str | None:
        response = self._send("GET", path)
        if missing_ok and response.status_code in (404, 405):
            return None
        if response.status_code >= 400:
            raise self._http_error(response, path, what)
        return response.text

    def post_json(self, path: str, body: dict, what: str):
        return self._json(self._send("POST", path, json=body), path, what)

    def _json(self, response, path: str, what: str):
        if response.status_code >= 400:
            raise self._http_error(response, path, what)
        try:
            return response.json()
        except (json.JSONDecodeError, ValueError):
            raise EngineAnswer(
                f"{self.flag} {self.base_url}: {path} did not answer JSON: is this {what}?"
            ) from None

    def _http_error(self, response, path: str, what: str) -> EngineAnswer:
        if response.status_code == 404:
            return EngineAnswer(
                f"{self.flag} {self.base_url}: {path} is not found (HTTP 404): is this {what}?"
            )
        return EngineAnswer(
            f"{self.flag} {self.base_url}: {path} answered HTTP {response.status_code}: "
            f"{server_message(response)}"
        )


def server_message(response) -> str:
    """The server's own error text (vLLM: error.message; SGLang: error.message or message), one line."""
    try:
        body = response.json()
    except ValueError:
        body = None
    text = None
    if isinstance(body, dict):
        err = body.get("error")
        text = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
        text = text or body.get("message") or body.get("detail")
    text = str(text if text is not None else (response.text or response.reason_phrase or ""))
    return " ".join(text.split())[:300] or "(no message)"


def _reason(exc) -> str:
    text = " ".join(str(exc).split())
    return text[:160] or type(exc).__name__
