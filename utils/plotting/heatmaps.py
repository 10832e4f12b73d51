"""Heatmaps: one attention map, all heads of one example, a boolean mask, expected vs got."""
from __future__ import annotations
import math
import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap, Normalize
from matplotlib.patches import Patch

from ._base import (  # noqa: F401
    ANNOTATION_SIZE,
    MIN_TEXT_PT,
    SHOWN_WIDTH_IN,
    _annotation_cell_in,
    _bool_mask,
    ALL_LABELS,
    DIFF_CMAP,
    MASKED_COLOR,
    MAY_ATTEND_COLOR,
    WEIGHTS_CMAP,
    _abs_diff_cmap,
    _auto_annotate,
    _check_masked_weights,
    _cmap,
    _finish,
    _fmt_shape,
    _heatmap,
    _labels,
    _mask_for,
    _masked_legend_handle,
    _matrix,
    _matrix_figsize,
    _new_figure,
    _numbers,
    _plain,
    _report_nonfinite,
    _root_figure,
    _text,
    _value_range,
    _warn,
    set_style,
)

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
    mask=None,
):
    """Heatmap of one attention map: rows are queries, columns are keys.

    Shapes:
        weights   (S_q, S_k)   one batch element and one head, e.g. ``weights[0, 0]``
        x_labels  S_k labels   one per key (a str gives one label per character)
        y_labels  S_q labels   one per query

    ``annotate=None`` writes each value in its cell when the matrix is at most 10 x 10. Values
    are written only where they can be read as the notebook shows the figure (a digit at least
    8 px tall at 800 px wide): the figure is made large enough for them when it can be (at most
    7.8 in wide), and when the cells are still too small (many cells, or a narrow ``ax``) the
    values are left out and the colours alone show them.
    ``vmin=0.0`` suits weights; pass ``vmin=None`` for raw scores. ``vmax=None`` is the data max.
    NaN/inf cells are drawn grey (with a warning).

    ``mask`` (bool, True = may attend, broadcastable to (S_q, S_k), e.g. (1, S_k) for padding)
    draws the masked cells light grey and hatched, never in a colour of the colormap, with a
    legend entry, so that "masked" and "a small weight" look different. A masked cell holding a
    non-zero weight keeps its colour under the hatching (with a warning).

    If ``ax`` is given, draws there and returns ``ax.figure``. Returns the ``Figure``.
    """
    data = _matrix(weights, "plot_attention", "weights")
    S_q, S_k = data.shape
    xl = _labels(x_labels, S_k, "plot_attention", "x_labels", "key", "S_k")
    yl = _labels(y_labels, S_q, "plot_attention", "y_labels", "query", "S_q")
    m = _mask_for(mask, data.shape, "plot_attention", "weights")
    _report_nonfinite(data, "plot_attention", "weights")
    _check_masked_weights(data, m, "plot_attention")
    ann = _auto_annotate(annotate, data.shape)
    with set_style():
        owned = ax is None
        if owned:
            cell = _annotation_cell_in(data, fmt) if ann else None
            fig, axes = _new_figure(figsize or _matrix_figsize(S_q, S_k, cell=cell))
            ax = axes[0, 0]
        else:
            fig = _root_figure(ax)
        lo, hi = _value_range([data], vmin, vmax, "plot_attention", "weights")
        cm = _cmap(cmap or WEIGHTS_CMAP)
        norm = Normalize(lo, hi)
        im = _heatmap(
            ax, data, cmap=cm, norm=norm, x_labels=xl, y_labels=yl,
            annotate=ann, fmt=fmt,
            xlabel=xlabel, ylabel=ylabel, title=title, mask=m,
        )
        cbar = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.03)
        cbar.set_label(_text(cbar_label))
        cbar.outline.set_visible(False)
        if m is not None and not m.all():
            _mask_legend(fig, cbar.ax, owned)
    return _finish(fig, owned)


def _mask_legend(fig, cbar_ax, owned, label=None):
    """The legend entry of masked cells: under the figure when we own it; on a given ax, a short
    entry on top of the colorbar (the only free place that we know of in someone else's
    figure)."""
    handle = _masked_legend_handle()
    if label:
        handle.set_label(label)
    kw = dict(handlelength=1.6, handleheight=1.2, borderaxespad=0.0)
    if owned:
        fig.legend(handles=[handle], loc="outside lower right", **kw)
    else:
        handle.set_label("masked")
        legend = cbar_ax.legend(handles=[handle], loc="lower right", bbox_to_anchor=(1.0, 1.02),
                                handletextpad=0.4, **kw)
        legend.set_in_layout(False)  # the colorbar stays beside its heatmap


def plot_heads(
    weights,
    x_labels=None,
    y_labels=None,
    titles=None,
    ncols=None,
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
    mask=None,
    mask_label=None,
):
    """All heads of one example in a grid, on one shared colour scale (one colorbar).

    Shapes:
        weights   (H, S_q, S_k), or (1, H, S_q, S_k) for a batch of one
        x_labels  S_k labels,  y_labels  S_q labels (shared by every panel)
        titles    H titles, default "head 0", "head 1", ...

    ``ncols=None`` puts up to 4 panels in a row (2 when a labelled axis has more than 16 tokens),
    as many as fit in the width a notebook shows unscaled (7.8 in), so that labels stay readable
    there; panels grow with the tokens, and an axis with more tokens than it can label readably
    labels every k-th. ``annotate=True`` writes the values where they can be read (see
    ``plot_attention``), and leaves them out where the cells are too small.
    ``vmin=0.0`` / ``vmax=None`` (the max over all heads) set the shared scale.
    ``mask`` (bool, True = may attend; (S_q, S_k), (H, S_q, S_k) or anything that broadcasts
    to them) draws masked cells hatched grey in every panel, as in ``plot_attention``, with one
    legend entry for the figure (``mask_label`` renames it, e.g. "never computed").
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
        titles = [_text(t) for t in titles]
        if len(titles) != H:
            raise ValueError(
                f"{func}: titles has {len(titles)} entries but there are H = {H} heads"
            )
    labelled = max(S_k if xl is not None else 0, S_q if yl is not None else 0)
    explicit_ncols = ncols is not None
    if ncols is None:
        ncols = 2 if labelled > 16 else 4
    if isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)) or ncols < 1:
        raise ValueError(f"{func}: ncols must be a positive int; got {ncols!r}")
    m = _mask_for(mask, arr.shape, func, "weights (H, S_q, S_k)")
    _report_nonfinite(arr, func, "weights")
    _check_masked_weights(arr, m, func)
    panel = float(np.clip(0.24 * max(S_q, S_k) + 1.3, 2.2, 3.4))
    room = SHOWN_WIDTH_IN - 1.0  # the colorbar and the y labels take about 1 in
    widest = room / min(2, H)  # panels grow up to two in a row, never fewer
    if 0 < labelled <= ALL_LABELS:  # y labels at MIN_TICK_SIZE: 0.135 in per token
        panel = max(panel, min(0.135 * labelled + 0.9, widest))
    if annotate:
        cw, ch = _annotation_cell_in(arr, fmt)
        panel = max(panel, min(max(cw * S_k, ch * S_q) + 0.9, widest))
    if explicit_ncols:
        panel = max(1.5, min(panel, room / min(int(ncols), H)))
    else:
        if not (labelled or annotate):  # plain images: panels may shrink to keep the row
            panel = max(1.7, min(panel, room / min(int(ncols), H)))
        fit = max(1, min(int(ncols), int(room // panel)))
        ncols = math.ceil(H / math.ceil(H / fit))  # rows as full as possible: 2 + 2, not 3 + 1
    ncols = min(int(ncols), H)
    nrows = math.ceil(H / ncols)
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
                mask=None if m is None else m[h],
            )
            used.append(ax)
        for h in range(H, nrows * ncols):
            grid[divmod(h, ncols)].remove()
        cbar = fig.colorbar(
            im, ax=used, fraction=0.05 / ncols**0.5, pad=0.02, shrink=min(1.0, 0.5 + 0.25 * nrows)
        )
        cbar.set_label(_text(cbar_label))
        cbar.outline.set_visible(False)
        if suptitle:
            fig.suptitle(_text(suptitle))
        if m is not None and not m.all():
            _mask_legend(fig, None, True, mask_label)
    return _finish(fig, True)


def plot_mask(
    mask, x_labels=None, y_labels=None, title=None, ax=None, *, xlabel="key", ylabel="query",
    figsize=None, legend=("may attend (True)", "masked (False)"),
):
    """A bool attention mask in two colours: True = "may attend" (blue), False = "masked" (grey).

    Shapes:
        mask      (S_q, S_k) bool (0/1 accepted); e.g. ``causal_mask(4)`` or
                  ``padding_mask(lengths, L)[0]`` which is (1, L)
        x_labels  S_k labels,  y_labels  S_q labels

    A legend names the two colours: ``legend`` = (the words for True, the words for False), e.g.
    ``("reads (True)", "does not read (False)")`` for a bool map that is not an attention mask.
    An additive mask (0 / -inf) is refused with a hint.
    If ``ax`` is given, draws there and returns ``ax.figure``. Returns the ``Figure``.
    """
    func = "plot_mask"
    if len(legend) != 2 or not all(isinstance(s, str) for s in legend):
        raise ValueError(f"{func}: legend must be two strings, (True's words, False's words); got {legend!r}")
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
            Patch(facecolor=MAY_ATTEND_COLOR, edgecolor="none", label=legend[0]),
            Patch(facecolor=MASKED_COLOR, edgecolor="none", label=legend[1]),
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
    ``annotate=None`` writes values when the matrices are at most 8 x 8, where they can be read
    as the notebook shows the figure (see ``plot_attention``): the figure stays within 7.8 in, in
    two rows when written values need it, and values that would still be too small are left
    out. Returns the ``Figure``.
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
    # One row of three panels, at most 7.8 in wide (what a notebook shows unscaled); when written
    # values need wider cells than a row allows, two rows: expected and yours, then the
    # difference.
    _, ph = _matrix_figsize(S_q, S_k, extra_w=0.9)
    per = (SHOWN_WIDTH_IN - 1.6) / 3
    pw = float(np.clip(0.42 * S_k + 0.9, 2.0, per))
    grid = False
    if ann:
        def need(size):  # the panels of expected and yours (the difference's may drop them)
            return S_k * _annotation_cell_in(np.concatenate([e.ravel(), g.ravel()]), ".2f", size)[0] + 0.9

        if need(MIN_TEXT_PT) > per and 2 * need(MIN_TEXT_PT) + 1.3 <= SHOWN_WIDTH_IN:
            grid, pw = True, min(max(pw, need(ANNOTATION_SIZE)), (SHOWN_WIDTH_IN - 1.3) / 2)
    with set_style():
        if figsize is None:
            figsize = (2 * pw + 1.3, 2 * ph + 0.6) if grid else (3 * pw + 1.6, ph + 0.3)
        if grid:
            fig, axes = _new_figure(figsize, 2, 2)
            (ax_e, ax_g), (ax_d, spare) = axes
            spare.remove()
        else:
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
            ax_d, shown, cmap=dcm, norm=dnorm, fmt=".2g", ylabel=ylabel if grid else None,
            title=diff_title, show_y=grid, **common,
        )
        dbar = fig.colorbar(dim, ax=ax_d, fraction=0.05, pad=0.03)
        dbar.outline.set_visible(False)
        if title:
            fig.suptitle(_text(title))
    return _finish(fig, True)


