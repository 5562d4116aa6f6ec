"""PNG plots for the report. Uses matplotlib's Agg canvas directly (no pyplot, no global
backend switch), so it works headless and does not disturb a caller's matplotlib state."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from alcheck.report.table import protocol_mismatch, reference_label


def _figure() -> Figure:
    fig = Figure(figsize=(6.4, 4.2), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plot_al_vs_k(meta: dict, path) -> Path:
    """AL vs K with 95% CI error bars, and every reference table drawn as a curve."""
    path = Path(path)
    summary = sorted(meta.get("summary") or [], key=lambda e: int(e["k"]))
    fig = _figure()
    ax = fig.add_subplot()
    ks = [int(e["k"]) for e in summary if e.get("al_mean") is not None]
    means = [float(e["al_mean"]) for e in summary if e.get("al_mean") is not None]
    lower, upper = [], []
    for e in summary:
        if e.get("al_mean") is None:
            continue
        ci = e.get("al_ci95") or [None, None]
        lower.append(max(0.0, e["al_mean"] - ci[0]) if ci[0] is not None else 0.0)
        upper.append(max(0.0, ci[1] - e["al_mean"]) if ci[1] is not None else 0.0)
    if ks:
        ax.errorbar(ks, means, yerr=[lower, upper], fmt="o-", color="black", capsize=4,
                    linewidth=2, label="this run (95% CI)", zorder=3)
    for i, ref in enumerate(meta.get("references") or []):
        values = sorted((int(k), float(v)) for k, v in (ref.get("values") or {}).items()
                        if v is not None)
        if not values:
            continue
        mismatch = protocol_mismatch(meta, ref)
        label = reference_label(ref, i) + (f" (protocol {ref.get('protocol')})" if mismatch else "")
        ax.plot([k for k, _ in values], [v for _, v in values], "s--" if mismatch else "s-",
                alpha=0.6 if mismatch else 0.9, label=label)
    ax.set_xlabel("K (drafted tokens per step)")
    ax.set_ylabel("AL (tokens per verification step, incl. bonus)")
    ax.set_title("Acceptance length vs K")
    all_ks = sorted(set(ks) | {int(k) for r in meta.get("references") or []
                               for k in (r.get("values") or {})})
    if all_ks:
        ax.set_xticks(all_ks)
    ax.grid(True, alpha=0.3)
    if ks or meta.get("references"):
        ax.legend(fontsize=7)
    fig.savefig(path)
    return path


def plot_per_position(meta: dict, path) -> Path:
    """Per-position acceptance P(a >= i) against position i, one line per K."""
    path = Path(path)
    fig = _figure()
    ax = fig.add_subplot()
    max_pos = 0
    for e in sorted(meta.get("summary") or [], key=lambda e: int(e["k"])):
        values = [v for v in (e.get("per_position") or []) if v is not None]
        if not values:
            continue
        positions = list(range(1, len(values) + 1))
        max_pos = max(max_pos, len(values))
        ax.plot(positions, values, "o-", label=f"K={int(e['k'])}")
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(at least i drafts accepted)")
    ax.set_ylim(0, 1.02)
    if max_pos:
        ax.set_xticks(range(1, max_pos + 1))
        ax.legend(fontsize=7)
    ax.set_title("Per-position acceptance")
    ax.grid(True, alpha=0.3)
    fig.savefig(path)
    return path
