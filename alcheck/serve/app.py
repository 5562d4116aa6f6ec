"""The FastAPI app: one served pair, one job queue, one metrics registry, and one dialect's routes.

Routes both dialects share: GET /health (200, empty body, as both engines answer) and GET /metrics
(Prometheus text, the dialect's own counter names). The rest is in dialect_vllm / dialect_sglang,
which import only serve/common.py: this module imports them, never the other way round.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Response

from alcheck import __version__
from alcheck.backends.engines.table import served_routes
from alcheck.serve.common import ServeContext
from alcheck.serve.config import ServeConfig
from alcheck.serve.jobs import JobQueue
from alcheck.serve.metrics import ServeMetrics


def create_app(pair, cfg: ServeConfig) -> FastAPI:
    """pair: alcheck.serve.pair.ServedPair (or a stand-in with the same attributes, in tests)."""
    metrics = ServeMetrics(cfg.served_name, pair.k, cfg.dialect)
    jobs = JobQueue(pair, on_finish=lambda job, result: metrics.observe(len(job.prompt_ids), result))
    ctx = ServeContext(pair, cfg, metrics, jobs)

    @asynccontextmanager
    async def lifespan(_app):
        jobs.start()
        try:
            yield
        finally:
            jobs.stop()

    app = FastAPI(
        title="alcheck serve", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None
    )
    app.state.ctx = ctx

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.exposition(), media_type=metrics.content_type)

    app.include_router(served_routes(cfg.dialect)(ctx))
    return app
