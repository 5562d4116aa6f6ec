"""`alcheck serve`: the built-in SpecRunner behind HTTP, speaking vLLM's or SGLang's dialect.

| module | job |
|---|---|
| `config.py` | `ServeConfig`: the server's settings, checked before anything loads |
| `engine.py` | loads the pair once (the same loaders as `alcheck run`) and runs the runner on prompts |
| `counts.py` | the runner's per-request counts as each engine reports them (histograms, AL) |
| `scheduler.py` | one worker thread owns the runner: HTTP requests queue up and never race |
| `params.py` | request-body parsing shared by both dialects; `BadRequest` for HTTP 400 |
| `metrics.py` | Prometheus counters under vLLM's and SGLang's names, one registry per app |
| `dialect_vllm.py`, `dialect_sglang.py` | routes and response shapes of each engine |
| `app.py` | the FastAPI app that wires them together |
| `listen.py` | bind, serve with uvicorn, print the listening line, stop on SIGINT/SIGTERM |
"""
