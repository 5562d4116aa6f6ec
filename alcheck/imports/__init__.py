"""`alcheck import FORMAT FILE`: other tools' output files as alcheck runs and references.

One module per format (FORMATS), each with `NAME`, `KIND` ("run": per-question counts, written
as a run directory; "reference": whole-run counts, written as reference tables) and
`read(path, given)`. importer.py puts reading, settings, conversion and writing together.
"""

FORMATS = {
    "eagle-answers": "alcheck.imports.eagle_answers",
    "spec-bench": "alcheck.imports.spec_bench",
    "vllm-spec-decode": "alcheck.imports.vllm_spec_decode",
    "vllm-bench-serve": "alcheck.imports.vllm_bench_serve",
    "sglang-bench-speculative": "alcheck.imports.sglang_bench_speculative",
    "aiperf": "alcheck.imports.aiperf",
}
