"""Curves: named series against one x, measured cost on log-log axes, histograms."""
from __future__ import annotations
from collections.abc import Mapping
import matplotlib as mpl
import numpy as np

from ._base import (  # noqa: F401
    _FONT_SIZES,
    _axes_size_in,
    _finish,
    _fmt_shape,
    _new_figure,
    _numbers,
    _orient_xticklabels,
    _plot_series,
    _root_figure,
    _series_styles,
    _text,
    _warn,
    _xticks_fit_flat,
    set_style,
)

# ----------------------------------------------------------------------------------------------
# Curves
# ----------------------------------------------------------------------------------------------

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def _vector(x, func, what):
    arr = _numbers(x, func, what)
    if arr.ndim != 1:
        if arr.ndim == 0:
            raise ValueError(f"{func}: {what} must be 1-D (N,); got a single number")
        raise ValueError(f"{func}: {what} must be 1-D (N,); got shape {_fmt_shape(arr.shape)}")
    return arr


def _series(series, n, func, xname):
    if not isinstance(series, Mapping):
        raise ValueError(
            f"{func}: series must be a dict name -> values, e.g. {{'scaled': ys}}; "
            f"got {type(series).__name__}"
        )
    if len(series) == 0:
        raise ValueError(f"{func}: series is empty; give at least one name -> values")
    out = {}
    for name, ys in series.items():
        y = _vector(ys, func, f"series {name!r}")
        if len(y) != n:
            raise ValueError(
                f"{func}: series {name!r} has {len(y)} values but {xname} has {n}; "
                f"every series needs one value per {xname} (N = {n})"
            )
        out[str(name)] = y
    return out


def _integer_log_ticks(ax, x):
    """On a log x axis, label the actual sizes (64, 128, ...) instead of powers of ten."""
    xs = np.unique(x[np.isfinite(x) & (x > 0)])
    if 1 < len(xs) <= 12 and np.allclose(xs, np.round(xs)):
        texts = [str(int(round(v))) for v in xs]
        ax.set_xticks(xs, labels=texts)
        ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
        # positions are even in log(x); before layout, assume 85% of the axes is usable
        span = np.log(xs[-1]) - np.log(xs[0])
        pos_pt = np.log(xs) / span * 0.85 * _axes_size_in(ax)[0] * 72
        size = _FONT_SIZES["xtick.labelsize"]
        _orient_xticklabels(ax, not _xticks_fit_flat(texts, np.diff(pos_pt), size))


def _check_positive(func, which, name, values):
    v = values[np.isfinite(values)]
    if v.size and (v <= 0).any():
        _warn(f"{func}: {which} is logarithmic but {name} has values <= 0 (min {v.min():.3g}); "
              "those points are not drawn")


def _legend_outside(ax, legend_of=None, **kw):
    """Legend to the right of the axes, where it cannot hide a curve; the figure is widened by
    the legend's width, so the axes keep their size instead of being squeezed.

    ``legend_of``: draw it as ``legend_of.legend`` (e.g. the figure) instead of ``ax.legend``.
    """
    fig = _root_figure(ax)
    if legend_of is None:
        legend = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                           labelspacing=0.7, **kw)
    else:
        legend = legend_of.legend(loc="outside right upper", labelspacing=0.7, **kw)
    try:
        renderer = fig.canvas.get_renderer()
        width_in = legend.get_window_extent(renderer).width / fig.dpi
    except Exception:  # noqa: BLE001 - a backend without a renderer: keep the size
        return legend
    owner = legend_of if legend_of is not None else ax
    before = getattr(owner, "_course_legend_width", 0.0)  # a legend drawn again: widen once
    w, h = fig.get_size_inches()
    fig.set_size_inches(w + width_in + 0.15 - before, h)
    owner._course_legend_width = width_in + 0.15
    return legend


def _curve_axes(ax, figsize, default=(5.2, 3.6)):
    if ax is None:
        fig, axes = _new_figure(figsize or default)
        return fig, axes[0, 0], True
    return _root_figure(ax), ax, False


def plot_lines(
    x, series, xlabel="", ylabel="", title=None, logx=False, logy=False, ax=None, markers=True,
    *, figsize=None, reference=None, groups=None,
):
    """Curves of several named series against one x, e.g. variance of q·k vs d_k.

    Shapes:
        x       (N,)
        series  dict name -> (N,) values (lists, arrays or tensors; None / NaN leaves a gap)

    Theory and reference series are drawn dashed, without markers and on top of the measured
    ones, each with its own legend entry. ``reference=None`` recognises them by name (a name
    starting with "theory", "uniform", "ideal" or "bound", e.g. "theory: d_k"); or pass their
    names, e.g. ``reference=["O(n²)"]`` (``()`` for none).

    Colours go by group and stay the same in every figure of the session (``series_color``):
    ``groups`` maps a series name to a group name, e.g. ``{"theory: d_k": "unscaled"}`` to draw
    a theory line in its measurement's colour (a darker shade). Without it, "name: detail"
    series share the colour of "name" (a band's two edges "unscaled: 10th percentile" and
    "unscaled: 90th percentile"), and every other series is its own group.

    ``logx`` / ``logy`` switch to log axes (integer x such as d_k = 16, 32, ... is labelled as
    is). If ``ax`` is given, draws there and returns ``ax.figure``. Returns the ``Figure``.
    """
    func = "plot_lines"
    xs = _vector(x, func, "x")
    ser = _series(series, len(xs), func, "x")
    styles = _series_styles(ser, func, reference, groups)
    if logx:
        _check_positive(func, "the x axis", "x", xs)
    if logy:
        for name, y in ser.items():
            _check_positive(func, "the y axis", f"series {name!r}", y)
    with set_style():
        fig, ax, owned = _curve_axes(ax, figsize)
        k = 0
        for name, y in ser.items():
            marker = None
            if not styles[name]["reference"]:
                marker, k = _MARKERS[k % len(_MARKERS)], k + 1
            _plot_series(ax, xs, y, _text(name), styles[name], marker, markers)
        if logx:
            ax.set_xscale("log")
            _integer_log_ticks(ax, xs)
        if logy:
            ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.35, linewidth=0.8)
        # on an ax that already has labels (a second call on the same axes), empty ones keep them
        if xlabel or owned:
            ax.set_xlabel(_text(xlabel))
        if ylabel or owned:
            ax.set_ylabel(_text(ylabel))
        if title:
            ax.set_title(_text(title))
        handles, _ = ax.get_legend_handles_labels()
        if len(handles) > 1 or (handles and list(ser)[0]):
            old = ax.get_legend()
            if old is not None:
                old.remove()
            _legend_outside(ax)
    return _finish(fig, owned)


def _loglog_slope(sizes, costs):
    """Least-squares slope of log(cost) vs log(size) on the finite positive points (NaN if < 2)."""
    ok = np.isfinite(sizes) & np.isfinite(costs) & (sizes > 0) & (costs > 0)
    if ok.sum() < 2 or np.unique(sizes[ok]).size < 2:
        return float("nan")
    A = np.stack([np.log(sizes[ok]), np.ones(int(ok.sum()))], axis=1)
    (slope, _), *_ = np.linalg.lstsq(A, np.log(costs[ok]), rcond=None)
    return float(slope)


def _bytes_unit(series):
    """The binary unit in which the largest value of a dict of byte counts reads best."""
    finite = np.concatenate([v[np.isfinite(v)] for v in series.values()])
    top = float(np.abs(finite).max()) if finite.size else 0.0
    for unit, factor in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if top >= factor:
            return unit, factor
    return "bytes", 1.0


def _slope_text(xs, y) -> str:
    s = _loglog_slope(xs, y)
    return f"{s:.1f}" if np.isfinite(s) else "n/a"


def _cost_panel(ax, xs, ser, styles, markers_of, slopes, xlabel, ylabel, labels=None):
    """One log-log panel. ``labels``: name -> legend text (default: the name and its slope);
    "_nolegend_" leaves a curve out of the legend."""
    for name, y in ser.items():
        if labels is not None:
            label = labels.get(name, "_nolegend_")
        else:
            label = _text(name) + (f" (slope {_slope_text(xs, y)})" if slopes else "")
        _plot_series(ax, xs, y, label, styles[name], markers_of[name])
    ax.set_xscale("log")
    ax.set_yscale("log")
    _integer_log_ticks(ax, xs)
    ax.grid(True, which="major", alpha=0.35, linewidth=0.8)
    ax.set_xlabel(_text(xlabel))
    ax.set_ylabel(_text(ylabel))


def plot_cost(
    sizes, costs, ylabel="time (s)", title=None, slopes=True, ax=None,
    *, xlabel="sequence length", figsize=None, memory=None, memory_ylabel=None,
    reference=None, groups=None,
):
    """Measured cost vs sequence length on log-log axes, one curve per method; with ``memory``,
    time and peak memory side by side.

    Shapes:
        sizes   (N,)  sequence lengths
        costs   dict name -> (N,) costs (seconds, ...); None / NaN for a size not measured
        memory  dict name -> (N,) peak memory in bytes (optional); drawn in a second panel
                on the right, in KiB / MiB / GiB as suits the largest value (or, with
                ``memory_ylabel``, as given, unscaled)

    With ``slopes=True`` each legend entry carries the least-squares slope of log(cost) against
    log(size), e.g. "full (slope 2.0)": 1 means linear, 2 quadratic; in both panels. A method
    has the same colour and marker in both panels. ``reference`` and ``groups`` work as in
    ``plot_lines`` (e.g. a dashed "theory: S²" line). With ``memory``, ``title`` is the
    figure's title and ``ax`` (if given) must be two axes, (time, memory).
    Returns the ``Figure``.
    """
    func = "plot_cost"
    xs = _vector(sizes, func, "sizes")
    ser = _series(costs, len(xs), func, "sizes")
    mem = None
    if memory is not None:
        mem = _series(memory, len(xs), func, "sizes")
        if memory_ylabel is None:
            unit, factor = _bytes_unit(mem)
            mem = {k: v / factor for k, v in mem.items()}
            memory_ylabel = f"peak memory ({unit})"
    _check_positive(func, "the x axis", "sizes", xs)
    for what, data in (("costs", ser), ("memory", mem or {})):
        for name, y in data.items():
            _check_positive(func, "the y axis", f"{what} {name!r}", y)
    names = list(ser) + [n for n in (mem or {}) if n not in ser]
    styles = _series_styles(names, func, reference, groups)
    markers_of, k = {}, 0
    for n in names:
        markers_of[n] = None if styles[n]["reference"] else _MARKERS[k % len(_MARKERS)]
        k += 0 if styles[n]["reference"] else 1
    with set_style():
        if mem is None:
            fig, ax, owned = _curve_axes(ax, figsize, default=(6.6, 3.6))
            _cost_panel(ax, xs, ser, styles, markers_of, slopes, xlabel, ylabel)
            if title:
                ax.set_title(_text(title))
            _legend_outside(ax)
            return _finish(fig, owned)
        if ax is None:
            fig, axes = _new_figure(figsize or (10.4, 4.0), 1, 2, sharex=True)
            ax_t, ax_m = axes[0]
            owned = True
        else:
            pair = list(np.ravel(np.asarray(ax, dtype=object)))
            if len(pair) != 2 or not all(isinstance(a, mpl.axes.Axes) for a in pair):
                raise ValueError(
                    f"{func}: with memory=, ax must be two axes (time, memory), e.g. from "
                    "plt.subplots(1, 2); or leave ax=None"
                )
            ax_t, ax_m = pair
            fig, owned = _root_figure(ax_t), False
        # One legend for both panels (a method has one colour and marker in both), on the right,
        # each entry with its slope in each panel.
        labels_t, labels_m = {}, {}
        for n in names:
            parts = []
            if slopes and n in ser:
                parts.append(f"time {_slope_text(xs, ser[n])}")
            if slopes and n in mem:
                parts.append(f"memory {_slope_text(xs, mem[n])}")
            text = _text(n) + (f" (slope: {', '.join(parts)})" if parts else "")
            (labels_t if n in ser else labels_m)[n] = text
        _cost_panel(ax_t, xs, ser, styles, markers_of, slopes, xlabel, ylabel, labels=labels_t)
        _cost_panel(ax_m, xs, mem, styles, markers_of, slopes, xlabel, memory_ylabel, labels=labels_m)
        ax_t.set_title("time")
        ax_m.set_title("peak memory")
        handles, texts = [], []
        for a in (ax_t, ax_m):
            for h, t in zip(*a.get_legend_handles_labels()):
                if t not in texts:
                    handles.append(h)
                    texts.append(t)
        _legend_outside(ax_m, legend_of=fig, handles=handles, labels=texts)
        if title:
            fig.suptitle(_text(title))
    return _finish(fig, owned)


def plot_histograms(
    samples, bins=50, xlabel="", title=None, ax=None,
    *, density=False, stats=True, logy=False, figsize=None, groups=None,
):
    """Overlaid histograms of named samples on shared bins, e.g. q·k with and without scaling.

    Shapes:
        samples  dict name -> values of any shape (flattened), e.g. (n_samples,)
        bins     an int (shared edges over all samples) or a sequence of edges

    NaN/inf values are dropped with a warning. ``stats=True`` adds the mean and std to each
    legend entry; ``density=True`` normalises each histogram (for unequal sample sizes).
    Colours go by group as in ``plot_lines`` (``groups`` maps a name to a group, e.g.
    ``{"q·k/√d_k": "scaled"}`` to match the "scaled" curves elsewhere).
    If ``ax`` is given, draws there and returns ``ax.figure``. Returns the ``Figure``.
    """
    func = "plot_histograms"
    if not isinstance(samples, Mapping):
        raise ValueError(
            f"{func}: samples must be a dict name -> values, "
            f"e.g. {{'unscaled': s1, 'scaled': s2}}; "
            f"got {type(samples).__name__}"
        )
    if len(samples) == 0:
        raise ValueError(f"{func}: samples is empty; give at least one name -> values")
    data = {}
    for name, v in samples.items():
        arr = _numbers(v, func, f"samples {name!r}").ravel()
        ok = np.isfinite(arr)
        if not ok.all():
            _warn(f"{func}: samples {name!r} has {int((~ok).sum())} NaN/inf value(s), left out")
            arr = arr[ok]
        if arr.size == 0:
            raise ValueError(f"{func}: samples {name!r} has no finite values")
        data[str(name)] = arr
    if isinstance(bins, (int, np.integer)):
        if bins < 1:
            raise ValueError(f"{func}: bins must be >= 1; got {bins}")
        edges = np.histogram_bin_edges(np.concatenate(list(data.values())), bins=int(bins))
    else:
        edges = _vector(bins, func, "bins")
    styles = _series_styles(data, func, reference=(), groups=groups)
    with set_style():
        fig, ax, owned = _curve_axes(ax, figsize, default=(6.6, 3.6))
        for name, arr in data.items():
            label = _text(name)
            if stats:
                label = f"{label}\nmean {arr.mean():.3g}, std {arr.std():.3g}"
            kw = dict(bins=edges, density=density, color=styles[name]["color"])
            ax.hist(arr, histtype="stepfilled", alpha=0.35, edgecolor="none", **kw)  # fill
            ax.hist(arr, histtype="step", linewidth=1.3, label=label, **kw)  # outline
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(_text(xlabel))
        ax.set_ylabel("density" if density else "count")
        if title:
            ax.set_title(_text(title))
        _legend_outside(ax)
    return _finish(fig, owned)


