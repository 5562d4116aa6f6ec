"""PNG plots for the report. Uses matplotlib's Agg canvas directly (no pyplot, no global
backend switch), so it works headless and does not disturb a caller's matplotlib state."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from alcheck.references.tables import hard_mismatches
from alcheck.report.dataset_views import meta_views
from alcheck.report.table import reference_label

MAX_TICKS = 12  # beyond this many integer positions, let matplotlib pick a readable subset
MAX_LEGEND_LINES = 10  # beyond this many K curves, colour by K with a colour bar instead


def _integer_ticks(ax, values):
    values = sorted(set(values))
    if len(values) <= MAX_TICKS:
        ax.set_xticks(values)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=MAX_TICKS, integer=True, min_n_ticks=2))


def _figure() -> Figure:
    fig = Figure(figsize=(6.4, 4.2), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plot_al_vs_k(meta: dict, path) -> Path:
    """AL vs K with 95% CI error bars, and every reference table drawn as a curve."""
    path = Path(path)
    al_vs_k_figure(meta).savefig(path)
    return path


def _al_curve(ax, summary: list[dict], **style) -> list[int]:
    """One run's AL per K with its 95% CI as error bars; returns the Ks drawn."""
    summary = sorted(summary, key=lambda e: int(e["k"]))
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
        ax.errorbar(ks, means, yerr=[lower, upper], capsize=4, **style)
    return ks


def al_vs_k_figure(meta: dict) -> Figure:
    """A reference measured with other settings (the table's `not comparable`) is drawn dotted,
    faded and grey, and its legend entry says so: it is not a curve to read this run against.
    A run of several datasets draws each dataset's curve beside the pooled one."""
    fig = _figure()
    ax = fig.add_subplot()
    views = meta_views(meta, pooled=True)
    several = views[0][0] is not None
    ks = _al_curve(
        ax,
        meta.get("summary") or [],
        fmt="o-",
        color="black",
        linewidth=2,
        label=f"{'all datasets pooled' if several else 'this run'} (95% CI)",
        zorder=3,
    )
    for label, view in views[:-1] if several else []:
        _al_curve(ax, view.get("summary") or [], fmt="o--", linewidth=1, alpha=0.8, label=label)
    # each reference is judged against its own dataset's settings (report/dataset_views.py)
    judged = {id(ref): view.get("config") or {} for _, view in views for ref in view.get("references") or []}
    for i, ref in enumerate(meta.get("references") or []):
        values = sorted((int(k), float(v)) for k, v in (ref.get("values") or {}).items() if v is not None)
        if not values:
            continue
        name = reference_label(ref, i)
        if hard_mismatches(
            ref, judged.get(id(ref), {})
        ):  # the same test as the table's `not comparable` verdict
            ax.plot(
                [k for k, _ in values],
                [v for _, v in values],
                "s:",
                color="0.6",
                alpha=0.7,
                label=f"{name} (not comparable: other settings)",
            )
        else:
            ax.plot([k for k, _ in values], [v for _, v in values], "s-", alpha=0.9, label=name)
    ax.set_xlabel("K (drafted tokens per step)")
    ax.set_ylabel("AL (tokens per verification step, incl. bonus)")
    ax.set_title("Acceptance length vs K")
    all_ks = sorted(set(ks) | {int(k) for r in meta.get("references") or [] for k in (r.get("values") or {})})
    if all_ks:
        _integer_ticks(ax, all_ks)
    ax.grid(True, alpha=0.3)
    if ks or meta.get("references"):
        ax.legend(fontsize=7)
    return fig


def plot_per_position(meta: dict, path) -> Path:
    """Per-position acceptance P(a >= i) against position i, one line per K."""
    path = Path(path)
    per_position_figure(meta).savefig(path)
    return path


def per_position_figure(meta: dict) -> Figure:
    fig = _figure()
    ax = fig.add_subplot()
    curves = []
    for e in sorted(meta.get("summary") or [], key=lambda e: int(e["k"])):
        values = [v for v in (e.get("per_position") or []) if v is not None]
        if values:
            curves.append((int(e["k"]), values))
    max_pos = max((len(v) for _, v in curves), default=0)
    many = len(curves) > MAX_LEGEND_LINES
    colors = None
    if many:
        from matplotlib import colormaps
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        norm = Normalize(curves[0][0], curves[-1][0])
        colors = ScalarMappable(norm=norm, cmap=colormaps["viridis"])
        fig.colorbar(colors, ax=ax, label="K")
    for k, values in curves:
        style = "o-" if max_pos <= 30 else "-"  # markers smear into a band at large K
        ax.plot(
            range(1, len(values) + 1),
            values,
            style,
            label=f"K={k}",
            color=colors.to_rgba(k) if colors else None,
        )
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(at least i drafts accepted)")
    ax.set_ylim(0, 1.02)
    if max_pos:
        _integer_ticks(ax, range(1, max_pos + 1))
        if not many:
            ax.legend(fontsize=7)
    ax.set_title("Per-position acceptance")
    ax.grid(True, alpha=0.3)
    return fig
