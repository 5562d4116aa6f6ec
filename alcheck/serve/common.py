"""What both dialects share: the server's context, its version string, and the request body reader.

A leaf of serve/: it imports no dialect and no app, so app.py can import the dialects directly.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from fastapi import Request

from alcheck import __version__
from alcheck.serve.config import ServeConfig
from alcheck.serve.jobs import JobQueue
from alcheck.serve.metrics import ServeMetrics
from alcheck.serve.params import BadRequest

VERSION = f"alcheck-serve {__version__}"


@dataclass
class ServeContext:
    pair: object  # alcheck.serve.pair.ServedPair: the loaded pair and its runner settings
    cfg: ServeConfig
    metrics: ServeMetrics
    jobs: JobQueue
    started: float = field(default_factory=time.time)


async def read_body(request: Request) -> dict:
    """The JSON object a POST carries, or BadRequest."""
    raw = await request.body()
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(
            f"the request body is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})"
        ) from None
    except (
        RecursionError
    ):  # a body nested deeper than Python's parser recurses: the client's error, not a 500
        raise BadRequest("the request body nests JSON too deeply to parse") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body
