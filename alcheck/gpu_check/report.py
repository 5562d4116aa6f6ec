"""summary.md for a gpu-check result (summary.json holds every number)."""

from __future__ import annotations

GIB = float(1 << 30)


def _table(header, rows) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
        "",
    ]


def _f(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def markdown(result: dict) -> str:
    env = result["environment"]
    title = "alcheck gpu-check" + (" (dry run: CPU, tiny shapes)" if result["dry_run"] else "")
    lines = [
        f"# {title}",
        "",
        f"- date: {env['date']}",
        f"- device: {env['device_name']} ({env['device']}"
        + (f", {env['device_memory_bytes'] / GIB:.1f} GiB" if env.get("device_memory_bytes") else "")
        + ")",
        f"- software: torch {env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}, "
        f"python {env['python']}; flash-attn {'installed' if env['flash_attn'] else 'not installed'}, triton "
        f"{'installed' if env.get('triton') else 'not installed'}, so bfloat16 with block size 16 runs "
        f"`{env['attention_backend_bf16_block16']}` attention in the eager runner's chains and "
        f"`{env.get('attention_backend_bf16_block16_static', '-')}` in static batches and trees",
        f"- result: **{result['status']}** in {result['seconds']} s",
        "",
    ]
    lines += _table(
        ("piece", "what", "status", "seconds", "notes"),
        [
            (p["key"], p["title"], p["status"], _f(p["seconds"], 1), "; ".join(p["notes"]))
            for p in result["pieces"]
        ],
    )
    for p in result["pieces"]:
        if p["status"] == "skip" and not p["data"]:
            continue
        lines += [f"## {p['key']}. {p['title']}", ""]
        if p["checks"]:
            bad = [c for c in p["checks"] if not c["ok"]]
            lines.append(f"{len(p['checks']) - len(bad)} of {len(p['checks'])} checks pass.")
            lines += [f"- FAILED: {c['name']}: {c['detail']}" for c in bad]
            lines += [f"- {c['name']}: {c['detail']}" for c in p["checks"] if c["ok"] and c["detail"]]
            lines.append("")
        lines += SECTIONS.get(p["key"], lambda d: [])(p["data"])
        if "traceback" in p["data"]:
            lines += ["```", p["data"]["traceback"].rstrip(), "```", ""]
    return "\n".join(lines) + "\n"


def _tests(d):
    return (
        [f"`{d.get('command', '')}`: {d.get('summary_line', '')} (log: {d.get('log', '')})", ""] if d else []
    )


def _fp32(d):
    if "rows" not in d:
        return []
    head = (
        f"{d['questions']} MT-Bench questions, {d['max_tokens']} new tokens, block size {d['block_size']}, "
        "float32."
    )
    return [head, ""] + _table(
        ("K", "AL here", "AL, CPU run", "questions differing", "lossless", "seconds"),
        [
            (
                r["k"],
                _f(r["al"], 4),
                _f(r.get("al_cpu"), 4),
                r.get("questions_differing", "-"),
                _f(r["lossless"], 3),
                _f(r["seconds"], 1),
            )
            for r in d["rows"]
        ],
    )


def _bf16(d):
    if "rows" not in d:
        return []
    head = f"{d['questions']} questions, {d['max_tokens']} new tokens, {d['repeats']} repeats, bfloat16."
    return [head, ""] + _table(
        ("K", "AL per repeat", "mean", "spread (max-min)", "AL float32", "lossless per repeat"),
        [
            (
                r["k"],
                " / ".join(_f(a, 4) for a in r["al_repeats"]),
                _f(r["al_mean"], 4),
                _f(r["al_spread"], 4),
                _f(r.get("al_fp32"), 4),
                " / ".join(_f(x, 3) for x in r["lossless_repeats"]),
            )
            for r in d["rows"]
        ],
    )


def _llama(d):
    if "rows" not in d:
        return []
    lines = [
        f"{d['model']}, {d['dtype']}: target {d['target_weight_bytes'] / GIB:.2f} GiB, head "
        f"{d['head_weight_bytes'] / GIB:.2f} GiB, built on the device in {d['load_s']:.1f} s; copy bandwidth "
        f"{d['bandwidth_bytes_per_s'] / 1e9:.0f} GB/s, matmul "
        f"peak {d['peak_flops'] / 1e12:.1f} TFLOP/s; prompts of "
        f"{d['prompt_tokens']} tokens, {d['new_tokens']} new tokens; step = median over the steady steps "
        f"(the first {d['warm_steps']} left out), spread = 10th-90th percentile.",
    ]
    if "peak_memory_bytes" in d:
        lines.append(
            f"Peak GPU memory {d['peak_memory_bytes'] / GIB:.1f} "
            f"GiB of {d['device_memory_bytes'] / GIB:.1f} GiB "
            "(transformers' model and ours share most tensors)."
        )
    if "graphs" in d:
        g = d["graphs"]
        lines.append(
            f"CUDA graphs: {g['captured']} captured, {g['replays']} replays, failed captures: "
            f"{g['failed'] or 'none'}; "
            f"fused half-precision kernels (static and graphs rows): "
            f"{'fell back: ' + str(d['fused_failed']) if d.get('fused_failed') else 'compiled'}."
        )
    lines.append("")
    order = {"transformers generate()": 0, "alcheck eager": 1, "alcheck static": 2, "alcheck graphs": 3}
    rows = sorted(
        d["rows"],
        key=lambda r: (r["shape"] != "chain", r["batch"], r["k"], r["shape"], order.get(r["runner"], 9)),
    )
    lines += _table(
        (
            "runner",
            "batch",
            "K",
            "drafting",
            "attention",
            "step ms",
            "spread ms",
            "steps",
            "launches/step",
            "syncs/step",
            "floor ms",
            "step / floor",
            "AL",
            "tokens/s",
            "vs generate()",
        ),
        [
            (
                r["runner"],
                r["batch"],
                r["k"],
                r["shape"],
                r.get("attention", "-"),
                _f(r["step_ms"]),
                f"{_f(r['p10_ms'])}-{_f(r['p90_ms'])}",
                r["steady_steps"],
                _f(r.get("launches_per_step"), 0),
                _f(r.get("syncs_per_step"), 1),
                _f(r["floor_ms"], 3),
                _f(r["step_over_floor"], 1),
                _f(r["al"]),
                _f(r["tokens_per_s"], 0),
                _f(r.get("vs_generate")),
            )
            for r in rows
        ],
    )
    sweep = d.get("sweep", {})
    if "measured_s" in sweep:
        lines += [
            f"Sweep ({sweep['runner']}, {sweep['questions']} "
            f"questions, {sweep['max_tokens']} tokens, K=1..5, 3 "
            f"repeats): measured {sweep['measured_s']:.0f} s (one repeat, times 3), projected "
            f"{sweep['projected_s']:.0f} s; {sweep['note']}.",
            "",
        ]
    if d.get("targets"):
        lines += _table(
            ("target", "value", "limit", "result"),
            [(t["target"], _f(t["value"]), _f(t["limit"]), t["result"]) for t in d["targets"]],
        )
    return lines


def _static(d):
    if "rows" not in d:
        return []
    lines = [f"{d['questions']} MT-Bench questions, {d['max_tokens']} new tokens, float32 on {d['device']}."]
    if "graphs" in d:
        g = d["graphs"]
        lines.append(
            f"CUDA graphs: {g['captured']} captured, {g['replays']} replays, {g['mismatches']} differing "
            f"from the eager step, failed captures: {g['failed'] or 'none'}."
        )
    return (
        lines
        + [""]
        + _table(
            ("shape", "AL", "questions equal to the CPU", "static steps", "seconds"),
            [
                (
                    r["shape"],
                    _f(r["al"], 4),
                    f"{r['equal']}/{r['questions']}",
                    r["static_steps"],
                    _f(r["seconds"], 1),
                )
                for r in d["rows"]
            ],
        )
    )


def _attention(d):
    if "rows" not in d:
        return []
    rows = [
        (
            r["shape"],
            r["batch"],
            r["context"],
            r["q_len"],
            _f(r["gather_ms"], 3),
            _f(r.get("flex_ms"), 3),
            _f(r.get("flex_mask_ms"), 3),
            r.get("faster", "-"),
            r.get("flex_error", ""),
        )
        for r in d["rows"]
    ]
    out = [
        f"{d['dtype']}; flex {'compiled' if d['compiled'] else 'eager'}; keep **{d['keep']}**.",
        "",
    ] + _table(
        (
            "shape",
            "batch",
            "context",
            "q_len",
            "gather ms/layer",
            "flex ms/layer",
            "flex mask ms",
            "faster",
            "note",
        ),
        rows,
    )
    if d.get("triton"):
        out += [
            "The static runner's batches, Llama-8B attention (32 heads / 8 KV heads, dim 128), bfloat16, "
            "block size 16, one attention call:",
            "",
        ]
        out += _table(
            (
                "batch",
                "context",
                "queries",
                "tree",
                "gather ms",
                "triton ms",
                "gather / triton",
                "max abs diff",
            ),
            [
                (
                    r["batch"],
                    r["context"],
                    r["queries"],
                    "yes" if r["tree"] else "no",
                    _f(r["torch_ms"], 3),
                    _f(r["triton_ms"], 3),
                    _f(r["torch_ms"] / r["triton_ms"]),
                    f"{r['max_abs_diff']:.2e}",
                )
                for r in d["triton"]
            ],
        )
    return out


def _tree(d):
    if not d.get("rows"):
        return []
    out = [
        f"{d['questions']} questions, {d['max_tokens']} new "
        "tokens, float32; tree vs the chain of the same depth.",
        "",
    ]
    out += _table(
        ["K", "topk", "T", "AL tree", "AL chain", "lossless", "seconds"],
        [
            [
                r["k"],
                r["topk"],
                r["t"],
                _f(r["al_tree"], 4),
                _f(r["al_chain"], 4),
                _f(r["lossless"], 3),
                _f(r["seconds"], 1),
            ]
            for r in d["rows"]
        ],
    )
    if "al_tree_bf16" in d:
        out += [
            "",
            f"K=3 topk 4 T 16: AL {_f(d['al_tree_bf16'], 4)} in bfloat16, {_f(d['al_tree_t1'], 4)} at "
            "temperature 1.0 (measured).",
        ]
    return out


def _real(d):
    if "rows" not in d:
        return []
    head = (
        f"SmolLM2-135M-Instruct with its layer-skip draft, {d['questions']} questions, "
        f"{d['max_tokens']} tokens."
    )
    return [head, ""] + _table(
        (
            "K",
            "AL float32",
            "float32 rows differing from the CPU",
            "AL bfloat16",
            "bf16 - fp32",
            "questions moved",
        ),
        [
            (
                r["k"],
                _f(r["al_fp32"], 4),
                len(r["fp32_questions_differing_from_cpu"])
                if "fp32_questions_differing_from_cpu" in r
                else "-",
                _f(r.get("al_bf16"), 4),
                _f(r.get("al_bf16_minus_fp32"), 4),
                r.get("questions_moved", "-"),
            )
            for r in d["rows"]
        ],
    )


SECTIONS = {
    "a": _tests,
    "b": _fp32,
    "c": _bf16,
    "d": _llama,
    "e": _attention,
    "f": _tree,
    "g": _static,
    "h": _real,
}
