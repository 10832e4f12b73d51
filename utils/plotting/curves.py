"""Curves: named series against one x, measured cost on log-log axes, histograms."""
from __future__ import annotations
import math
from collections.abc import Mapping
import matplotlib as mpl
import numpy as np

from matplotlib import ticker as mticker
from matplotlib import transforms as mtransforms

from ._base import (  # noqa: F401
    SHOWN_WIDTH_IN,
    _FONT_SIZES,
    _label_width_pt,
    _min_text_pt,
    _text_width_em,
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
    XTICK_ROTATION,
    _xticks_fit_flat,
    COINCIDE_FRACTION,
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


class _LogTicks(mticker.Locator):
    """Major ticks of a log axis that can be read: at least three labelled values where the
    axis spans less than a couple of decades (1-2-5, every mantissa, or evenly spaced values
    within a decade), decades where it spans more, and never more labels than the axis holds
    at its tick label size (every k-th decade then)."""

    def __init__(self, which):
        self._which = which

    def __call__(self):
        vmin, vmax = self.axis.get_view_interval()
        return self.tick_values(vmin, vmax)

    def _holds(self, ticks):
        """How many of these tick labels the axis holds side by side (x) or stacked (y)."""
        axes = self.axis.axes
        fig = _root_figure(axes)
        box = axes.bbox
        length = (box.width if self._which == "x" else box.height) * 72.0 / fig.dpi
        size = _FONT_SIZES["xtick.labelsize"]
        if self._which == "x":
            texts = _LogLabels.texts(ticks)
            plain = [t.replace("$", "").replace("\\mathdefault", "").replace("\\times", "x")
                     .replace("{", "").replace("}", "").replace("^", "") for t in texts]
            per = max([_text_width_em(t) * size for t in plain] or [size]) + 1.2 * size
        else:
            per = 1.8 * size
        return max(1, int(length // per))

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((float(vmin), float(vmax)))
        if not hi > 0 or not np.isfinite(hi):
            return []
        lo = lo if lo > 0 and np.isfinite(lo) else hi / 10.0
        e0, e1 = int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi)))

        def ticks(subs, stride=1):
            out = [m * 10.0**e for e in range(e0, e1 + 1) if e % stride == 0 for m in subs]
            return [t for t in out if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]

        chosen = None
        for subs in ((1.0,), (1.0, 3.0), (1.0, 2.0, 5.0), tuple(range(1, 10))):
            t = ticks(subs)
            if chosen is not None and len(t) > self._holds(t):
                break
            chosen = t
            if len(t) >= 3:
                break
        if len(chosen) > self._holds(chosen):  # too many decades: every k-th one
            stride = 2
            while len(ticks((1.0,), stride)) > self._holds(ticks((1.0,), stride)) and stride < 64:
                stride += 1
            chosen = ticks((1.0,), stride)
        if len(chosen) < 3:  # less than a factor of ~3: evenly spaced values
            for nbins in (3, 4, 5, 6, 8, 10):
                t = [v for v in mticker.MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10])
                     .tick_values(lo, hi) if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9) and v > 0]
                if len(t) > self._holds(t):
                    break
                if len(t) > len(chosen):
                    chosen = t
                if len(chosen) >= 3:
                    break
        return np.asarray(chosen, dtype=float)


class _LogLabels(mticker.Formatter):
    """Labels of a log axis: plain numbers (0.2, 30, 1000) when every tick lies in [0.01, 10⁴),
    otherwise m×10ᵉ for all of them."""

    @staticmethod
    def texts(locs):
        locs = [v for v in locs if v > 0 and np.isfinite(v)]
        plain = all(0.01 <= v < 1e4 for v in locs)
        out = []
        for v in locs:
            if plain:
                out.append(f"{v:.6g}")
                continue
            e = int(np.floor(np.log10(v) + 1e-9))
            m = v / 10.0**e
            out.append(rf"$\mathdefault{{10^{{{e}}}}}$" if abs(m - 1) < 1e-6
                       else rf"$\mathdefault{{{m:.3g}\times10^{{{e}}}}}$")
        return out

    def set_locs(self, locs):
        super().set_locs(locs)
        shown = sorted({float(v) for v in locs if v > 0 and np.isfinite(v)})
        self._texts = dict(zip(shown, self.texts(shown)))

    def __call__(self, x, pos=None):
        if not (x > 0 and np.isfinite(x)):
            return ""
        text = getattr(self, "_texts", {}).get(float(x))
        return text if text is not None else self.texts([x])[0]


def _readable_log_axis(ax, which):
    """A log axis whose major ticks can be read (``_LogTicks``); minor ticks unlabelled."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(_LogTicks(which))
    axis.set_major_formatter(_LogLabels())
    axis.set_minor_locator(mticker.LogLocator(subs="auto"))
    axis.set_minor_formatter(mticker.NullFormatter())


def _integer_log_ticks(ax, x):
    """On a log x axis, label the actual sizes (64, 128, ...) instead of powers of ten; other
    log x axes get readable ticks (``_readable_log_axis``)."""
    xs = np.unique(x[np.isfinite(x) & (x > 0)])
    if not (1 < len(xs) <= 12 and np.allclose(xs, np.round(xs))):
        _readable_log_axis(ax, "x")
    else:
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
    """A legend outside the axes, where it cannot hide a curve, in a figure that stays within the
    width a notebook shows unscaled (SHOWN_WIDTH_IN):

    - on the right, the figure widened by the legend's width (the axes keep their size) while
      it fits, or taking the rest from the axes while they keep most of their width;
    - otherwise under the axes (under the figure for ``legend_of`` = the figure), in as many
      columns as fit, the figure made taller by the legend's height.

    ``legend_of``: draw it as ``legend_of.legend`` (the figure, for one legend of several
    panels) instead of ``ax.legend``.
    """
    fig = _root_figure(ax)
    owner = legend_of if legend_of is not None else ax
    if legend_of is None:
        legend = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                           labelspacing=0.7, **kw)
    else:
        legend = legend_of.legend(loc="outside right upper", labelspacing=0.7, **kw)
    try:  # a figure out of pyplot (panels) has a plain canvas: matplotlib still measures it
        renderer = fig._get_renderer()
        width_in = legend.get_window_extent(renderer).width / fig.dpi + 0.15
    except Exception:  # noqa: BLE001 - a backend without a renderer: keep the size
        return legend
    w, h = fig.get_size_inches()
    before = getattr(owner, "_course_legend_width", 0.0)  # a legend drawn again: widen once
    base = w - before
    room = max(0.0, SHOWN_WIDTH_IN - base)
    axes_w = ax.get_position().width * base
    squeeze = max(0.0, width_in - room)  # taken from the axes
    if squeeze == 0.0 or (legend_of is None and axes_w - squeeze >= max(3.0, 0.7 * axes_w)):
        fig.set_size_inches(base + min(width_in, room) if squeeze else base + width_in, h)
        owner._course_legend_width = fig.get_size_inches()[0] - base
        return legend
    # under the axes (or the figure), in columns
    handles = getattr(legend, "legend_handles", None) or legend.legendHandles
    texts = [t.get_text() for t in legend.get_texts()]
    legend.remove()
    if before:
        fig.set_size_inches(base, h)
        owner._course_legend_width = 0.0
    size = _FONT_SIZES["legend.fontsize"]
    handle_pt = (mpl.rcParams["legend.handlelength"] + mpl.rcParams["legend.handletextpad"]) * size
    entry = max(_label_width_pt(line, size) for t in texts for line in t.split("\n")) + handle_pt
    span_pt = (base if legend_of is not None else axes_w) * 72 - 0.3 * 72
    ncol = int(max(1, min(len(texts), (span_pt + 2.0 * size) // (entry + 2.0 * size))))
    kw = {k: v for k, v in kw.items() if k not in ("handles", "labels")}
    if legend_of is not None:
        legend = legend_of.legend(handles, texts, loc="outside lower center", ncol=ncol,
                                  columnspacing=2.0, **kw)
    else:
        below = _xaxis_depth_pt(ax) + 6.0
        anchor = ax.transAxes + mtransforms.ScaledTranslation(0.0, -below / 72.0, fig.dpi_scale_trans)
        legend = ax.legend(handles, texts, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                           bbox_transform=anchor, borderaxespad=0.0, ncol=ncol,
                           columnspacing=2.0, **kw)
    added = getattr(owner, "_course_legend_height", 0.0)
    height_in = legend.get_window_extent(renderer).height / fig.dpi + 0.1
    fig.set_size_inches(base, h - added + height_in)
    owner._course_legend_height = height_in
    return legend


def _xaxis_depth_pt(ax):
    """How far below the axes its x tick labels and x label reach (points), estimated."""
    size = _FONT_SIZES["xtick.labelsize"]
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    depth = mpl.rcParams["xtick.major.size"] + mpl.rcParams["xtick.major.pad"]
    if labels and round(labels[0].get_rotation()) % 360 == XTICK_ROTATION:
        s = math.sin(math.radians(XTICK_ROTATION))
        depth += max(_label_width_pt(t.get_text(), size) for t in labels) * s + size * s
    else:
        depth += 1.2 * size
    if ax.get_xlabel():
        depth += mpl.rcParams["axes.labelpad"] + 1.25 * _FONT_SIZES["axes.labelsize"]
    return depth


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
    ones and their markers, each with its own legend entry, in a colour and dashes no other
    line of the figure has (``REFERENCE_COLORS``). ``reference=None`` recognises them by name
    (a name starting with "theory", "uniform", "ideal" or "bound", e.g. "theory: d_k"); or pass
    their names, e.g. ``reference=["O(n²)"]`` (``()`` for none). Where a reference line lies on
    a measured curve, its name is also written on the line; where two measured curves lie on
    each other, the one drawn first is drawn wider, as an outline (see the package docstring).

    Colours go by group and stay the same in every figure of the session (``series_color``):
    ``groups`` maps a series name to a group name, e.g. ``{"var(q·k), measured": "unscaled"}``.
    Without it, "name: detail" series share the colour of "name" (a band's two edges
    "unscaled: 10th percentile" and "unscaled: 90th percentile"), and every other series is its
    own group. (Reference series keep their reference colour in any group.)

    The legend sits right of the axes, or under them when the figure would otherwise be wider
    than a notebook shows unscaled. A log axis gets readable ticks (at least three labelled
    values where it spans less than a couple of decades).

    ``logx`` / ``logy`` switch to log axes (integer x such as d_k = 16, 32, ... is labelled as
    is). If ``ax`` is given, draws there and returns ``ax.figure``. Returns the ``Figure``.
    """
    func = "plot_lines"
    xs = _vector(x, func, "x")
    ser = _series(series, len(xs), func, "x")
    _series_styles(ser, func, reference, groups)  # validate before drawing anything
    if logx:
        _check_positive(func, "the x axis", "x", xs)
    if logy:
        for name, y in ser.items():
            _check_positive(func, "the y axis", f"series {name!r}", y)
    with set_style():
        fig, ax, owned = _curve_axes(ax, figsize)
        styles = _series_styles(ser, func, reference, groups, figure=None if owned else fig)
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
            _readable_log_axis(ax, "y")
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
        _plot_series(ax, xs, y, label, styles[name], markers_of[name], name=_text(name))
    ax.set_xscale("log")
    ax.set_yscale("log")
    _integer_log_ticks(ax, xs)
    _readable_log_axis(ax, "y")
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
    ``plot_lines`` (e.g. a dashed "theory: S²" line, named on the line where it lies on a
    measured curve; a measured curve under another is outlined). With ``memory``, ``title`` is
    the figure's title, ``ax`` (if given) must be two axes, (time, memory), and one legend for
    both panels sits under them (the figure stays within the 7.8 in a notebook shows unscaled).
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
    _series_styles(names, func, reference, groups)  # validate before drawing anything
    if mem is not None and ax is not None:
        pair = list(np.ravel(np.asarray(ax, dtype=object)))
        if len(pair) != 2 or not all(isinstance(a, mpl.axes.Axes) for a in pair):
            raise ValueError(
                f"{func}: with memory=, ax must be two axes (time, memory), e.g. from "
                "plt.subplots(1, 2); or leave ax=None"
            )
    given = None
    if ax is not None:
        given = _root_figure(ax if mem is None else np.ravel(np.asarray(ax, dtype=object))[0])
    styles = None
    with set_style():
        styles = _series_styles(names, func, reference, groups, figure=given)
        markers_of, k = {}, 0
        for n in names:
            markers_of[n] = None if styles[n]["reference"] else _MARKERS[k % len(_MARKERS)]
            k += 0 if styles[n]["reference"] else 1
        if mem is None:
            fig, ax, owned = _curve_axes(ax, figsize, default=(6.6, 3.6))
            _cost_panel(ax, xs, ser, styles, markers_of, slopes, xlabel, ylabel)
            if title:
                ax.set_title(_text(title))
            _legend_outside(ax)
            return _finish(fig, owned)
        if ax is None:
            fig, axes = _new_figure(figsize or (SHOWN_WIDTH_IN, 3.6), 1, 2, sharex=True)
            ax_t, ax_m = axes[0]
            owned = True
        else:
            ax_t, ax_m = list(np.ravel(np.asarray(ax, dtype=object)))
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
    # An outline that a later histogram coincides with (equal heights over COINCIDE_FRACTION of
    # the bins where either has data) is drawn wider, under it: both stay visible.
    heights = {n: np.histogram(a, bins=edges, density=density)[0] for n, a in data.items()}
    names = list(data)
    outlined = {}
    for i, n in enumerate(names):
        k = 0
        for m in names[i + 1:]:
            a, b = heights[n], heights[m]
            used = (a > 0) | (b > 0)
            top = max(float(a.max()), float(b.max()), 1e-300)
            if used.any() and (np.abs(a - b)[used] <= 0.01 * top).mean() >= COINCIDE_FRACTION:
                k += 1
        outlined[n] = k
    with set_style():
        fig, ax, owned = _curve_axes(ax, figsize, default=(6.6, 3.6))
        for name, arr in data.items():
            label = _text(name)
            if stats:
                label = f"{label}\nmean {arr.mean():.3g}, std {arr.std():.3g}"
            kw = dict(bins=edges, density=density, color=styles[name]["color"])
            ax.hist(arr, histtype="stepfilled", alpha=0.35, edgecolor="none", **kw)  # fill
            ax.hist(arr, histtype="step", linewidth=1.3 + 2.4 * outlined[name], label=label,
                    zorder=1.5 - 0.01 * outlined[name], **kw)  # outline
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(_text(xlabel))
        ax.set_ylabel("density" if density else "count")
        if title:
            ax.set_title(_text(title))
        _legend_outside(ax)
    return _finish(fig, owned)


