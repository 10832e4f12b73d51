"""Plotting helpers shared by every chapter: attention heatmaps, head grids, masks, comparisons,
curves, cost plots and histograms, all in one style.

Shape legend used in the docstrings:
    H    number of heads              S_q  number of queries (rows of a weight matrix)
    B    batch size                   S_k  number of keys (columns of a weight matrix)
    N    number of points on a curve

Every function
- accepts torch tensors (any device or dtype, ``requires_grad`` is fine), numpy arrays and nested
  lists, and raises a ``ValueError`` that says what it expected when a shape or a label list is
  wrong;
- draws in the course style (``set_style``) without changing matplotlib's global settings;
- returns the matplotlib ``Figure``. A figure the function created itself is removed from
  pyplot's registry before it is returned, so in a notebook it is displayed exactly once: by
  being the cell's last expression, or by ``display(fig)``. Nothing calls ``plt.show()``.
  When you pass ``ax=``, the figure is yours: it is drawn on and returned, never closed.

Works headless (any backend, e.g. ``MPLBACKEND=Agg``); this module never selects a backend.
"""
from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Mapping

import matplotlib as mpl
import matplotlib.pyplot as plt
import matplotlib.text as mtext
import numpy as np
import seaborn as sns
import torch
from cycler import cycler
from matplotlib.colors import BoundaryNorm, ListedColormap, Normalize
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

__all__ = [
    "set_style",
    "plot_attention",
    "plot_heads",
    "plot_mask",
    "plot_compare",
    "plot_lines",
    "plot_cost",
    "plot_histograms",
    "WEIGHTS_CMAP",
    "DIFF_CMAP",
    "MAY_ATTEND_COLOR",
    "MASKED_COLOR",
]

# ----------------------------------------------------------------------------------------------
# Style
# ----------------------------------------------------------------------------------------------

WEIGHTS_CMAP = "viridis"  # sequential: attention weights and any other values
DIFF_CMAP = "vlag"  # diverging (blue - white - red): signed differences; its red half for |diff|
MAY_ATTEND_COLOR = "#0173b2"  # seaborn "colorblind" blue
MASKED_COLOR = "#e3e3e3"  # light grey
NAN_COLOR = "#bdbdbd"  # cells holding NaN / inf (never a colour of the colormaps above)

_FONT_SIZES = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "figure.titlesize": 12,
}
# Fonts that cover Chinese, used as fallbacks after DejaVu Sans when one is installed.
_CJK_FONTS = (
    "Noto Sans CJK SC",
    "Noto Sans SC",
    "Source Han Sans SC",
    "Microsoft YaHei",
    "PingFang SC",
    "Hiragino Sans GB",
    "SimHei",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Arial Unicode MS",
)
_STYLE_RC: dict | None = None


def _style_rc() -> dict:
    global _STYLE_RC
    if _STYLE_RC is None:
        from matplotlib import font_manager

        installed = {f.name for f in font_manager.fontManager.ttflist}
        rc = {}
        rc.update(sns.axes_style("ticks"))
        rc.update(sns.plotting_context("notebook"))
        rc.update(_FONT_SIZES)
        rc.update(
            {
                # DejaVu Sans ships with matplotlib: the same glyphs on every machine.
                "font.sans-serif": ["DejaVu Sans"]
                + [f for f in _CJK_FONTS if f in installed]
                + ["sans-serif"],
                "axes.prop_cycle": cycler(color=sns.color_palette("colorblind").as_hex()),
                "image.cmap": WEIGHTS_CMAP,
                "axes.spines.top": False,
                "axes.spines.right": False,
                "axes.titlepad": 6.0,
                "legend.frameon": False,
                "xtick.major.size": 3.5,
                "ytick.major.size": 3.5,
                "xtick.minor.size": 2.0,
                "ytick.minor.size": 2.0,
                "axes.linewidth": 1.0,
                "xtick.major.width": 1.0,
                "ytick.major.width": 1.0,
            }
        )
        _STYLE_RC = rc
    return dict(_STYLE_RC)


class set_style:
    """Apply the course's plotting style: seaborn "ticks", the colorblind palette, one font size
    scale, ``WEIGHTS_CMAP`` as the default colormap.

    Used two ways (like ``torch.set_grad_enabled``):

    - ``set_style()`` as a plain call: the style stays on for the session (matplotlib rcParams),
      for a notebook that wants it for its own figures too;
    - ``with set_style(): ...`` : the style holds inside the block only, and matplotlib's
      settings are restored on exit. Every function in this module draws this way, so calling
      them changes no global state.

    Colormaps: ``WEIGHTS_CMAP`` (sequential) for weights and values, ``DIFF_CMAP`` (diverging)
    for differences.
    """

    def __init__(self):
        rc = _style_rc()
        # Save and later restore only the keys the style sets. (Restoring everything, as
        # mpl.rc_context does, would undo what happens meanwhile, e.g. IPython's inline backend
        # turning on rcParams["interactive"] when pyplot is first used inside the block.)
        self._saved = {k: mpl.rcParams[k] for k in rc}
        mpl.rcParams.update(rc)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        update_raw = getattr(mpl.rcParams, "_update_raw", None)  # what mpl.rc_context uses
        if update_raw is not None:
            update_raw(self._saved)
        else:
            dict.update(mpl.rcParams, self._saved)
        return False


def _cmap(name_or_cmap, bad=NAN_COLOR):
    cmap = mpl.colormaps[name_or_cmap] if isinstance(name_or_cmap, str) else name_or_cmap
    return cmap.with_extremes(bad=bad)


def _abs_diff_cmap():
    """The positive (white -> red) half of DIFF_CMAP: zero difference is white."""
    div = mpl.colormaps[DIFF_CMAP]
    cmap = ListedColormap(div(np.linspace(0.5, 1.0, 256)), name=DIFF_CMAP + "_abs")
    return cmap.with_extremes(bad=NAN_COLOR)


# ----------------------------------------------------------------------------------------------
# Input conversion and validation
# ----------------------------------------------------------------------------------------------


def _plain(x):
    """Tensors (anywhere inside lists/tuples) -> numpy; leaves other things alone."""
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.layout != torch.strided:
            t = t.to_dense()
        if t.is_complex():
            raise ValueError(f"got a complex tensor (dtype {t.dtype}); plot its .abs() or .real")
        if t.dtype != torch.bool:
            t = t.to(torch.float64)  # also covers bfloat16 / float16, which numpy lacks
        return t.cpu().numpy()
    if isinstance(x, (list, tuple)):
        return [_plain(e) for e in x]
    return x


def _numbers(x, func: str, what: str) -> np.ndarray:
    """Any array-like -> float64 numpy array (None entries become NaN)."""
    if x is None:
        raise ValueError(f"{func}: {what} is None; expected a tensor, array or nested list")
    try:
        plain = _plain(x)
        arr = np.asarray(plain, dtype=np.float64)
    except ValueError as e:
        if "complex" in str(e):
            raise ValueError(f"{func}: {what}: {e}") from None
        if "inhomogeneous" in str(e) or "sequence" in str(e):
            raise ValueError(
                f"{func}: {what} is a nested list whose rows have different lengths; "
                "every row must have the same length"
            ) from None
        raise ValueError(f"{func}: {what} must hold numbers; could not convert it ({e})") from None
    except TypeError as e:
        raise ValueError(
            f"{func}: {what} must be a tensor, array or (nested) list of numbers; "
            f"got {type(x).__name__} ({e})"
        ) from None
    return arr


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _index_hint(name: str, ndim: int) -> str:
    return f"{name}[{', '.join(['0'] * (ndim - 2))}]"


def _matrix(x, func: str, what: str, legend: str = "(S_q, S_k)", allow_1d=False) -> np.ndarray:
    """Validate a 2-D matrix (or 1-D row when allow_1d), with a hint for other ranks."""
    arr = _numbers(x, func, what)
    if arr.ndim == 2 or (allow_1d and arr.ndim == 1):
        if arr.size == 0:
            raise ValueError(f"{func}: {what} is empty (shape {_fmt_shape(arr.shape)})")
        return arr.reshape(1, -1) if arr.ndim == 1 else arr
    kind = "2-D weight matrix" if what == "weights" else "2-D matrix"
    msg = f"{func} expects {what} as a {kind} {legend}; got shape {_fmt_shape(arr.shape)}"
    if arr.ndim > 2:
        lead = {3: "one head", 4: "one batch element and head"}.get(arr.ndim, "one 2-D slice")
        msg += f": pick {lead}, e.g. {_index_hint(what, arr.ndim)}"
        if func == "plot_attention" and arr.ndim in (3, 4):
            msg += " (or draw every head with plot_heads)"
    elif arr.ndim == 1:
        msg += (
            f": a single row? make it (1, {arr.shape[0]}), e.g. {what}[None] for a tensor or array"
        )
    else:
        msg += ": a single number is not a matrix"
    raise ValueError(msg)


def _clean_label(s: str) -> str:
    if s == "":
        return "''"
    if s.strip() == "":  # a pure-whitespace token: make it visible
        return s.replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    s = s.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return s.replace("$", r"\$")  # "$" would start matplotlib mathtext


def _labels(labels, n: int, func: str, which: str, axis_name: str, legend: str):
    """None, a str (one label per character), or a sequence of n labels -> list of str."""
    if labels is None:
        return None
    if isinstance(labels, str):
        seq = list(labels)
    elif isinstance(labels, torch.Tensor):  # e.g. token ids: keep ints as ints
        seq = labels.detach().cpu().reshape(-1).tolist()
    elif isinstance(labels, np.ndarray):
        seq = labels.reshape(-1).tolist()
    else:
        try:
            seq = list(labels)
        except TypeError:
            raise ValueError(
                f"{func}: {which} must be a list of labels (one per {axis_name}); "
                f"got {type(labels).__name__}"
            ) from None
    if len(seq) != n:
        plural = {"query": "queries"}.get(axis_name, axis_name + "s") if n != 1 else axis_name
        raise ValueError(
            f"{func}: {which} has {len(seq)} labels but there are {n} {plural} "
            f"({legend} = {n}); give exactly one label per {axis_name}"
        )
    return [_clean_label(str(s)) for s in seq]


def _warn(msg):
    """Warn, pointing at the caller's line (the first frame outside this module)."""
    level, frame = 2, sys._getframe(1)  # stacklevel 2 = the frame that called _warn
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    warnings.warn(msg, UserWarning, stacklevel=level)


def _report_nonfinite(arr, func, what):
    bad = ~np.isfinite(arr)
    if bad.any():
        _warn(
            f"{func}: {what} holds {int(bad.sum())} NaN/inf value(s), drawn in grey. "
            "(If a row is fully masked, the convention is zero weights, never NaN.)"
        )


# ----------------------------------------------------------------------------------------------
# Figure and axes helpers
# ----------------------------------------------------------------------------------------------


def _new_figure(figsize, nrows=1, ncols=1, **kw):
    fig, axes = plt.subplots(
        nrows, ncols, figsize=figsize, layout="constrained", squeeze=False, **kw
    )
    return fig, axes


def _finish(fig, owned: bool):
    """Remove a figure we created from pyplot's registry (so the inline backend does not show it
    a second time); its canvas still renders for display(), savefig() and _repr_png_."""
    if owned:
        plt.close(fig)
    return fig


def _root_figure(ax):
    try:
        return ax.get_figure(root=True)
    except TypeError:  # matplotlib < 3.10
        fig = ax.figure
        while getattr(fig, "figure", fig) is not fig:
            fig = fig.figure
        return fig


def _axes_size_in(ax):
    fig = _root_figure(ax)
    pos = ax.get_position()
    w, h = fig.get_size_inches()
    return max(pos.width * w, 0.1), max(pos.height * h, 0.1)


def _tick_fontsize(n: int) -> float:
    base = _FONT_SIZES["xtick.labelsize"]
    return base if n <= 24 else max(5.0, base * 24 / n)


def _set_matrix_ticks(ax, n_rows, n_cols, x_labels, y_labels, show_x=True, show_y=True):
    for axis, n, labels, show in (
        (ax.xaxis, n_cols, x_labels, show_x),
        (ax.yaxis, n_rows, y_labels, show_y),
    ):
        if labels is not None:
            step = max(1, math.ceil(n / 64))  # beyond 64 tokens show every step-th label
            idx = list(range(0, n, step))
            axis.set_ticks(idx)
            shown = [labels[i] for i in idx] if show else []
            axis.set_ticklabels(shown, fontsize=_tick_fontsize(len(idx)))
        else:
            if n <= 20:
                axis.set_ticks(range(n))
            else:
                axis.set_major_locator(MaxNLocator(nbins=8, integer=True))
            if not show:
                axis.set_ticklabels([])
    ax.tick_params(length=2, pad=2)


def _rotate_if_crowded(ax, x_labels):
    """Rotate the key labels when they would not fit side by side under their columns."""
    w_in, _ = _axes_size_in(ax)
    n_shown = len(ax.get_xticks())
    longest = max(len(s) for s in x_labels)
    text_w = longest * 0.62 * _tick_fontsize(n_shown) / 72
    if text_w > 0.9 * w_in / max(n_shown, 1):
        ax.tick_params(axis="x", labelrotation=90 if longest <= 2 else 45)
        if longest > 2:
            for t in ax.get_xticklabels():
                t.set_horizontalalignment("right")
                t.set_rotation_mode("anchor")


class _CellText(mtext.Text):
    """A value written in a heatmap cell. Its font size is fitted to the cell at draw time, when
    the layout (constrained layout, colorbars, the figure's final size) is known."""

    def __init__(self, x, y, text, n_rows, n_cols, longest, **kw):
        super().__init__(x, y, text, ha="center", va="center", **kw)
        self._grid = (n_rows, n_cols, longest)

    def draw(self, renderer):
        if self.axes is not None and self.get_visible():
            n_rows, n_cols, longest = self._grid
            bbox = self.axes.get_window_extent(renderer)
            to_pt = 72.0 / self.axes.figure.dpi
            cell_w, cell_h = bbox.width * to_pt / n_cols, bbox.height * to_pt / n_rows
            # Fit the longest text (a digit is ~0.64 em wide in DejaVu Sans), between 5 and 9 pt.
            size = float(np.clip(min(cell_h * 0.45, cell_w * 0.8 / (0.66 * longest)), 5, 9))
            if size != self.get_fontsize():  # changes on the first draw or after a resize only
                self.set_fontsize(size)
        super().draw(renderer)


def _annotate_cells(ax, data, cmap, norm, fmt):
    n_rows, n_cols = data.shape
    texts = [[format(v, fmt) if np.isfinite(v) else str(v) for v in row] for row in data]
    longest = max(len(t) for row in texts for t in row)
    for i in range(n_rows):
        for j in range(n_cols):
            v = data[i, j]
            color = "black"
            if np.isfinite(v):
                r, g, b, _ = cmap(norm(v))
                color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            cell = _CellText(j, i, texts[i][j], n_rows, n_cols, longest, color=color, fontsize=9)
            ax.add_artist(cell)


def _heatmap(
    ax,
    data,
    *,
    cmap,
    norm,
    x_labels=None,
    y_labels=None,
    annotate=False,
    fmt=".2f",
    xlabel="key",
    ylabel="query",
    title=None,
    show_x=True,
    show_y=True,
):
    im = ax.imshow(data, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    for spine in ax.spines.values():
        spine.set_visible(False)
    _set_matrix_ticks(ax, data.shape[0], data.shape[1], x_labels, y_labels, show_x, show_y)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if x_labels is not None and show_x:
        _rotate_if_crowded(ax, x_labels)
    if annotate:
        _annotate_cells(ax, data, cmap, norm, fmt)
    return im


def _auto_annotate(annotate, shape, limit=10):
    if annotate is None:
        return shape[0] <= limit and shape[1] <= limit
    return bool(annotate)


def _value_range(arrays, vmin, vmax, func, what):
    finite = np.concatenate([a[np.isfinite(a)].ravel() for a in arrays])
    lo = float(finite.min()) if finite.size else 0.0
    hi = float(finite.max()) if finite.size else 1.0
    if vmin is not None and lo < vmin - 1e-6 * max(1.0, abs(hi - lo)):  # not rounding noise
        _warn(
            f"{func}: {what} go down to {lo:.3g}, below vmin={vmin:g}; those cells are drawn "
            "as vmin. Pass vmin=None to scale to the data (e.g. for raw scores)."
        )
    vmin = lo if vmin is None else float(vmin)
    vmax = hi if vmax is None else float(vmax)
    if not vmax > vmin:
        vmax = vmin + (abs(vmin) if vmin else 1.0)
    return vmin, vmax


def _matrix_figsize(n_rows, n_cols, extra_w=1.9):
    w = float(np.clip(0.42 * n_cols + extra_w, 3.4, 9.0))
    h = float(np.clip(0.42 * n_rows + 1.1, 2.2, 8.0))
    return w, h


# ----------------------------------------------------------------------------------------------
# Heatmaps
# ----------------------------------------------------------------------------------------------


def plot_attention(
    weights,
    x_labels=None,
    y_labels=None,
    title=None,
    ax=None,
    annotate=None,
    vmin=0.0,
    vmax=None,
    cmap=None,
    *,
    xlabel="key",
    ylabel="query",
    cbar_label="weight",
    fmt=".2f",
    figsize=None,
):
    """Heatmap of one attention map: rows are queries, columns are keys.

    Shapes:
        weights   (S_q, S_k)   one batch element and one head, e.g. ``weights[0, 0]``
        x_labels  S_k labels   one per key (a str gives one label per character)
        y_labels  S_q labels   one per query

    ``annotate=None`` writes each value in its cell when the matrix is at most 10 x 10.
    ``vmin=0.0`` suits weights; pass ``vmin=None`` for raw scores. ``vmax=None`` is the data max.
    NaN/inf cells are drawn grey (with a warning). If ``ax`` is given, draws there and returns
    ``ax.figure``. Returns the ``Figure``.
    """
    data = _matrix(weights, "plot_attention", "weights")
    S_q, S_k = data.shape
    xl = _labels(x_labels, S_k, "plot_attention", "x_labels", "key", "S_k")
    yl = _labels(y_labels, S_q, "plot_attention", "y_labels", "query", "S_q")
    _report_nonfinite(data, "plot_attention", "weights")
    with set_style():
        owned = ax is None
        if owned:
            fig, axes = _new_figure(figsize or _matrix_figsize(S_q, S_k))
            ax = axes[0, 0]
        else:
            fig = _root_figure(ax)
        lo, hi = _value_range([data], vmin, vmax, "plot_attention", "weights")
        cm = _cmap(cmap or WEIGHTS_CMAP)
        norm = Normalize(lo, hi)
        im = _heatmap(
            ax, data, cmap=cm, norm=norm, x_labels=xl, y_labels=yl,
            annotate=_auto_annotate(annotate, data.shape), fmt=fmt,
            xlabel=xlabel, ylabel=ylabel, title=title,
        )
        cbar = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.03)
        cbar.set_label(cbar_label)
        cbar.outline.set_visible(False)
    return _finish(fig, owned)


def plot_heads(
    weights,
    x_labels=None,
    y_labels=None,
    titles=None,
    ncols=4,
    suptitle=None,
    *,
    vmin=0.0,
    vmax=None,
    cmap=None,
    annotate=False,
    fmt=".2f",
    xlabel="key",
    ylabel="query",
    cbar_label="weight",
    figsize=None,
):
    """All heads of one example in a grid, on one shared colour scale (one colorbar).

    Shapes:
        weights   (H, S_q, S_k), or (1, H, S_q, S_k) for a batch of one
        x_labels  S_k labels,  y_labels  S_q labels (shared by every panel)
        titles    H titles, default "head 0", "head 1", ...

    ``vmin=0.0`` / ``vmax=None`` (the max over all heads) set the shared scale.
    Returns the ``Figure`` (H panels + 1 colorbar).
    """
    func = "plot_heads"
    arr = _numbers(weights, func, "weights")
    if arr.ndim == 4:
        if arr.shape[0] != 1:
            raise ValueError(
                f"{func} draws the heads of one example: weights (B, H, S_q, S_k) need B = 1; "
                f"got shape {_fmt_shape(arr.shape)} (B = {arr.shape[0]}): pick one example, "
                "e.g. weights[0]"
            )
        arr = arr[0]
    elif arr.ndim == 2:
        raise ValueError(
            f"{func} expects weights (H, S_q, S_k) or (1, H, S_q, S_k); got one map of shape "
            f"{_fmt_shape(arr.shape)}: draw it with plot_attention, or pass weights[None] for a "
            "single head"
        )
    elif arr.ndim != 3:
        raise ValueError(
            f"{func} expects weights (H, S_q, S_k) or (1, H, S_q, S_k); got shape "
            f"{_fmt_shape(arr.shape)}"
        )
    if arr.size == 0:
        raise ValueError(f"{func}: weights are empty (shape {_fmt_shape(arr.shape)})")
    H, S_q, S_k = arr.shape
    xl = _labels(x_labels, S_k, func, "x_labels", "key", "S_k")
    yl = _labels(y_labels, S_q, func, "y_labels", "query", "S_q")
    if titles is None:
        titles = [f"head {h}" for h in range(H)]
    else:
        titles = [str(t) for t in titles]
        if len(titles) != H:
            raise ValueError(
                f"{func}: titles has {len(titles)} entries but there are H = {H} heads"
            )
    if isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)) or ncols < 1:
        raise ValueError(f"{func}: ncols must be a positive int; got {ncols!r}")
    _report_nonfinite(arr, func, "weights")
    ncols = min(int(ncols), H)
    nrows = math.ceil(H / ncols)
    panel = float(np.clip(0.24 * max(S_q, S_k) + 1.3, 2.2, 3.4))
    with set_style():
        size = (ncols * panel + 1.0, nrows * panel + (0.4 if suptitle else 0.1))
        fig, grid = _new_figure(figsize or size, nrows, ncols)
        lo, hi = _value_range([arr], vmin, vmax, func, "weights")
        cm = _cmap(cmap or WEIGHTS_CMAP)
        norm = Normalize(lo, hi)
        used = []
        for h in range(H):
            r, c = divmod(h, ncols)
            below = h + ncols < H  # another panel under this one: it carries the x labels
            ax = grid[r, c]
            im = _heatmap(
                ax, arr[h], cmap=cm, norm=norm, x_labels=xl, y_labels=yl,
                annotate=bool(annotate), fmt=fmt,
                xlabel=None if below else xlabel, ylabel=ylabel if c == 0 else None,
                title=titles[h], show_x=not below, show_y=c == 0,
            )
            used.append(ax)
        for h in range(H, nrows * ncols):
            grid[divmod(h, ncols)].remove()
        cbar = fig.colorbar(
            im, ax=used, fraction=0.05 / ncols**0.5, pad=0.02, shrink=min(1.0, 0.5 + 0.25 * nrows)
        )
        cbar.set_label(cbar_label)
        cbar.outline.set_visible(False)
        if suptitle:
            fig.suptitle(suptitle)
    return _finish(fig, True)


def _bool_mask(mask, func):
    try:
        plain = _plain(mask)
        arr = np.asarray(plain)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"{func}: mask must be a bool tensor, array or nested list ({e})"
        ) from None
    if arr.dtype == np.bool_:
        return arr
    try:
        num = arr.astype(np.float64)
    except (ValueError, TypeError):
        raise ValueError(
            f"{func}: mask must hold bools (True = may attend); got dtype {arr.dtype}"
        ) from None
    if num.size and np.isin(num, (0.0, 1.0)).all():
        return num.astype(bool)
    if num.size and (np.isneginf(num) | (num <= -1e4) | (num == 0)).all():
        raise ValueError(
            f"{func}: this looks like an additive mask (0 = attend, -inf or a large negative = "
            "masked). plot_mask draws the course's bool convention, True = may attend: "
            "pass (mask == 0)"
        )
    raise ValueError(
        f"{func}: mask must be bool (True = may attend), or 0/1; got dtype {arr.dtype} with "
        f"values other than 0 and 1"
    )


def plot_mask(
    mask, x_labels=None, y_labels=None, title=None, ax=None, *, xlabel="key", ylabel="query",
    figsize=None,
):
    """A bool attention mask in two colours: True = "may attend" (blue), False = "masked" (grey).

    Shapes:
        mask      (S_q, S_k) bool (0/1 accepted); e.g. ``causal_mask(4)`` or
                  ``padding_mask(lengths, L)[0]`` which is (1, L)
        x_labels  S_k labels,  y_labels  S_q labels

    A legend names the two colours. An additive mask (0 / -inf) is refused with a hint.
    If ``ax`` is given, draws there and returns ``ax.figure``. Returns the ``Figure``.
    """
    func = "plot_mask"
    arr = _bool_mask(mask, func)
    data = _matrix(arr, func, "mask")
    S_q, S_k = data.shape
    xl = _labels(x_labels, S_k, func, "x_labels", "key", "S_k")
    yl = _labels(y_labels, S_q, func, "y_labels", "query", "S_q")
    with set_style():
        owned = ax is None
        if owned:
            fig, axes = _new_figure(figsize or _matrix_figsize(S_q, S_k, extra_w=2.3))
            ax = axes[0, 0]
        else:
            fig = _root_figure(ax)
        cm = ListedColormap([MASKED_COLOR, MAY_ATTEND_COLOR], name="course_mask")
        norm = BoundaryNorm([-0.5, 0.5, 1.5], cm.N)
        _heatmap(
            ax, data, cmap=cm, norm=norm, x_labels=xl, y_labels=yl,
            xlabel=xlabel, ylabel=ylabel, title=title,
        )
        if max(S_q, S_k) <= 48:  # thin white lines between cells, so cells can be counted
            ax.set_xticks(np.arange(-0.5, S_k, 1.0), minor=True)
            ax.set_yticks(np.arange(-0.5, S_q, 1.0), minor=True)
            ax.grid(which="minor", color="white", linewidth=1.0 if max(S_q, S_k) <= 24 else 0.5)
            ax.tick_params(which="minor", length=0)
        handles = [
            Patch(facecolor=MAY_ATTEND_COLOR, edgecolor="none", label="may attend (True)"),
            Patch(facecolor=MASKED_COLOR, edgecolor="none", label="masked (False)"),
        ]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  handlelength=1.2, handleheight=1.2)
    return _finish(fig, owned)


def plot_compare(
    expected,
    got,
    x_labels=None,
    y_labels=None,
    title=None,
    *,
    annotate=None,
    signed=False,
    cmap=None,
    xlabel="key",
    ylabel="query",
    figsize=None,
):
    """Three panels: expected, yours, and |yours - expected| with its max (and where) in the title.

    Shapes:
        expected, got  (S_q, S_k), both the same shape; (N,) is drawn as one row
        x_labels  S_k labels,  y_labels  S_q labels

    Expected and yours share one colour scale. The difference panel uses the red half of
    ``DIFF_CMAP`` (white = equal); ``signed=True`` draws yours - expected on the full diverging
    map instead. Cells that are NaN in only one of the two count as different (grey).
    ``annotate=None`` writes values when the matrices are at most 8 x 8. Returns the ``Figure``.
    """
    func = "plot_compare"
    e = _numbers(expected, func, "expected")
    g = _numbers(got, func, "got")
    if e.shape != g.shape:
        hint = ""
        if e.ndim == 2 and g.shape == e.shape[::-1]:
            hint = " (got looks transposed)"
        raise ValueError(
            f"{func}: expected has shape {_fmt_shape(e.shape)} but got has shape "
            f"{_fmt_shape(g.shape)}{hint}; the shapes must match"
        )
    one_d = e.ndim == 1
    e = _matrix(e, func, "expected", allow_1d=True)
    g = _matrix(g, func, "got", allow_1d=True)
    S_q, S_k = e.shape
    xl = _labels(x_labels, S_k, func, "x_labels", "key", "S_k")
    yl = _labels(y_labels, S_q, func, "y_labels", "query", "S_q")

    with np.errstate(invalid="ignore"):
        diff = g - e
    same = (e == g) | (np.isnan(e) & np.isnan(g))  # equal infs and matching NaNs are no difference
    diff[same] = 0.0
    diff[np.isnan(e) != np.isnan(g)] = np.nan
    absdiff = np.abs(diff)
    n_bad = int(np.isnan(absdiff).sum())
    finite = np.where(np.isnan(absdiff), -np.inf, absdiff)
    flat = int(np.argmax(finite))
    max_diff = float(finite.flat[flat]) if np.isfinite(finite).any() else float("nan")
    where = np.unravel_index(flat, absdiff.shape)
    where_s = f"[{where[1]}]" if one_d else f"[{where[0]}, {where[1]}]"
    diff_title = "yours − expected" if signed else "|yours − expected|"
    if max_diff > 0:
        diff_title += f"\nmax {max_diff:.3g} at {where_s}"
    elif np.isfinite(max_diff):
        diff_title += "\nmax 0 (identical)"
    if n_bad:
        diff_title += f"\n{n_bad} NaN mismatch" + ("es" if n_bad > 1 else "")
        _warn(f"{func}: {n_bad} cell(s) are NaN in one matrix but not the other (drawn grey)")

    ann = _auto_annotate(annotate, e.shape, limit=8)
    with set_style():
        if figsize is None:
            pw, ph = _matrix_figsize(S_q, S_k, extra_w=0.9)
            figsize = (3 * pw + 1.6, ph + 0.3)
        fig, axes = _new_figure(figsize, 1, 3)
        ax_e, ax_g, ax_d = axes[0]
        lo, hi = _value_range([e, g], None, None, func, "values")
        cm = _cmap(cmap or WEIGHTS_CMAP)
        norm = Normalize(lo, hi)
        common = dict(x_labels=xl, y_labels=yl, annotate=ann, xlabel=xlabel)
        im = _heatmap(ax_e, e, cmap=cm, norm=norm, ylabel=ylabel, title="expected", **common)
        _heatmap(ax_g, g, cmap=cm, norm=norm, ylabel=None, title="yours", show_y=False, **common)
        cbar = fig.colorbar(im, ax=[ax_e, ax_g], fraction=0.04, pad=0.02)
        cbar.outline.set_visible(False)
        big = absdiff[np.isfinite(absdiff)]
        top = float(big.max()) if big.size and big.max() > 0 else 1.0  # inf is drawn as the top
        if signed:
            dcm, dnorm, shown = _cmap(DIFF_CMAP), Normalize(-top, top), diff
        else:
            dcm, dnorm, shown = _abs_diff_cmap(), Normalize(0.0, top), absdiff
        dim = _heatmap(
            ax_d, shown, cmap=dcm, norm=dnorm, fmt=".2g", ylabel=None, title=diff_title,
            show_y=False, **common,
        )
        dbar = fig.colorbar(dim, ax=ax_d, fraction=0.05, pad=0.03)
        dbar.outline.set_visible(False)
        if title:
            fig.suptitle(title)
    return _finish(fig, True)


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
        ax.set_xticks(xs)
        ax.set_xticklabels([str(int(round(v))) for v in xs])
        ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
        # Rotate only when neighbouring labels would touch (positions are even in log(x)).
        lens = np.array([len(str(int(round(v)))) for v in xs])
        pos = np.log(xs) / (np.log(xs[-1]) - np.log(xs[0])) * 0.9 * _axes_size_in(ax)[0]
        char_w = 0.62 * _FONT_SIZES["xtick.labelsize"] / 72
        if (np.diff(pos) < (lens[1:] + lens[:-1]) / 2 * char_w + 0.08).any():
            ax.tick_params(axis="x", labelrotation=45)


def _check_positive(func, which, name, values):
    v = values[np.isfinite(values)]
    if v.size and (v <= 0).any():
        _warn(f"{func}: {which} is logarithmic but {name} has values <= 0 (min {v.min():.3g}); "
              "those points are not drawn")


def _legend_outside(ax):
    """Legend to the right of the axes, where it cannot hide a curve."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, labelspacing=0.7)


def _curve_axes(ax, figsize, default=(5.2, 3.6)):
    if ax is None:
        fig, axes = _new_figure(figsize or default)
        return fig, axes[0, 0], True
    return _root_figure(ax), ax, False


def plot_lines(
    x, series, xlabel="", ylabel="", title=None, logx=False, logy=False, ax=None, markers=True,
    *, figsize=None,
):
    """Curves of several named series against one x, e.g. variance of q·k vs d_k.

    Shapes:
        x       (N,)
        series  dict name -> (N,) values (lists, arrays or tensors; None / NaN leaves a gap)

    ``logx`` / ``logy`` switch to log axes (integer x such as d_k = 16, 32, ... is labelled as
    is). If ``ax`` is given, draws there and returns ``ax.figure``. Returns the ``Figure``.
    """
    func = "plot_lines"
    xs = _vector(x, func, "x")
    ser = _series(series, len(xs), func, "x")
    if logx:
        _check_positive(func, "the x axis", "x", xs)
    if logy:
        for name, y in ser.items():
            _check_positive(func, "the y axis", f"series {name!r}", y)
    with set_style():
        fig, ax, owned = _curve_axes(ax, figsize)
        for i, (name, y) in enumerate(ser.items()):
            marker = _MARKERS[i % len(_MARKERS)] if markers else None
            ax.plot(xs, y, marker=marker, markersize=4.5, label=name)
        if logx:
            ax.set_xscale("log")
            _integer_log_ticks(ax, xs)
        if logy:
            ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.35, linewidth=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        if len(ser) > 1 or list(ser)[0]:
            ax.legend()
    return _finish(fig, owned)


def _loglog_slope(sizes, costs):
    """Least-squares slope of log(cost) vs log(size) on the finite positive points (NaN if < 2)."""
    ok = np.isfinite(sizes) & np.isfinite(costs) & (sizes > 0) & (costs > 0)
    if ok.sum() < 2 or np.unique(sizes[ok]).size < 2:
        return float("nan")
    A = np.stack([np.log(sizes[ok]), np.ones(int(ok.sum()))], axis=1)
    (slope, _), *_ = np.linalg.lstsq(A, np.log(costs[ok]), rcond=None)
    return float(slope)


def plot_cost(
    sizes, costs, ylabel="time (s)", title=None, slopes=True, ax=None,
    *, xlabel="sequence length", figsize=None,
):
    """Measured cost vs sequence length on log-log axes, one curve per method.

    Shapes:
        sizes  (N,)  sequence lengths
        costs  dict name -> (N,) costs (seconds, bytes, ...); None / NaN for a size not measured

    With ``slopes=True`` each legend entry carries the least-squares slope of log(cost) against
    log(size), e.g. "full (slope 2.0)": 1 means linear, 2 quadratic. Returns the ``Figure``.
    """
    func = "plot_cost"
    xs = _vector(sizes, func, "sizes")
    ser = _series(costs, len(xs), func, "sizes")
    _check_positive(func, "the x axis", "sizes", xs)
    for name, y in ser.items():
        _check_positive(func, "the y axis", f"costs {name!r}", y)
    with set_style():
        fig, ax, owned = _curve_axes(ax, figsize, default=(6.6, 3.6))
        for i, (name, y) in enumerate(ser.items()):
            label = name
            if slopes:
                s = _loglog_slope(xs, y)
                label = f"{name} (slope {s:.1f})" if np.isfinite(s) else f"{name} (slope n/a)"
            ax.plot(xs, y, marker=_MARKERS[i % len(_MARKERS)], markersize=4.5, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _integer_log_ticks(ax, xs)
        ax.grid(True, which="major", alpha=0.35, linewidth=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        _legend_outside(ax)
    return _finish(fig, owned)


def plot_histograms(
    samples, bins=50, xlabel="", title=None, ax=None,
    *, density=False, stats=True, logy=False, figsize=None,
):
    """Overlaid histograms of named samples on shared bins, e.g. q·k with and without scaling.

    Shapes:
        samples  dict name -> values of any shape (flattened), e.g. (n_samples,)
        bins     an int (shared edges over all samples) or a sequence of edges

    NaN/inf values are dropped with a warning. ``stats=True`` adds the mean and std to each
    legend entry; ``density=True`` normalises each histogram (for unequal sample sizes).
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
    with set_style():
        fig, ax, owned = _curve_axes(ax, figsize, default=(6.6, 3.6))
        colors = sns.color_palette("colorblind").as_hex()
        for i, (name, arr) in enumerate(data.items()):
            label = f"{name}\nmean {arr.mean():.3g}, std {arr.std():.3g}" if stats else name
            c = colors[i % len(colors)]
            kw = dict(bins=edges, density=density, color=c)
            ax.hist(arr, histtype="stepfilled", alpha=0.35, edgecolor="none", **kw)  # fill
            ax.hist(arr, histtype="step", linewidth=1.3, label=label, **kw)  # outline
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("density" if density else "count")
        if title:
            ax.set_title(title)
        _legend_outside(ax)
    return _finish(fig, owned)
