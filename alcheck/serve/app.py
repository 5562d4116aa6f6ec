"""The FastAPI app: one engine, one scheduler, one metrics registry, and one dialect's routes.

Routes both dialects share: GET /health (200, empty body, as both engines answer) and GET /metrics
(Prometheus text, the dialect's own counter names). The rest is in dialect_vllm / dialect_sglang.
"""

from __future__ import annotations

import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI, Request, Response

from alcheck import __version__
from alcheck.serve.config import ServeConfig
from alcheck.serve.metrics import ServeMetrics
from alcheck.serve.params import BadRequest
from alcheck.serve.scheduler import Scheduler

VERSION = f"alcheck-serve {__version__}"


@dataclass
class ServeContext:
    engine: object  # alcheck.serve.engine.ServeEngine
    cfg: ServeConfig
    metrics: ServeMetrics
    scheduler: Scheduler
    started: float = field(default_factory=time.time)


async def read_body(request: Request) -> dict:
    """The JSON object a POST carries, or BadRequest."""
    raw = await request.body()
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the request body is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})") from None
    except RecursionError:  # a body nested deeper than Python's parser recurses: the client's error, not a 500
        raise BadRequest("the request body nests JSON too deeply to parse") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def create_app(engine, cfg: ServeConfig) -> FastAPI:
    metrics = ServeMetrics(cfg.served_name, engine.k, cfg.dialect)
    scheduler = Scheduler(engine, on_finish=lambda job, result: metrics.observe(len(job.prompt_ids), result))
    ctx = ServeContext(engine, cfg, metrics, scheduler)

    @asynccontextmanager
    async def lifespan(_app):
        scheduler.start()
        try:
            yield
        finally:
            scheduler.stop()

    app = FastAPI(title="alcheck serve", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.ctx = ctx

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.exposition(), media_type=metrics.content_type)

    if cfg.dialect == "vllm":
        from alcheck.serve.dialect_vllm import make_router
    else:
        from alcheck.serve.dialect_sglang import make_router
    app.include_router(make_router(ctx))
    return app
