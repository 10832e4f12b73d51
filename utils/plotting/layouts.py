"""Figures of several parts: masks side by side, a family tree of boxes, an empty grid of panels."""
from __future__ import annotations
from collections.abc import Mapping
import matplotlib.pyplot as plt

import math

from ._base import (  # noqa: F401
    SHOWN_WIDTH_IN,
    _FONT_SIZES,
    _label_width_pt,
    _finish,
    _matrix,
    _new_figure,
    _text,
    series_color,
    set_style,
)
from .heatmaps import _bool_mask, plot_mask

def _wrapped_grid(n, min_panel_in, max_cols=None):
    """(rows, cols) for n panels at least ``min_panel_in`` wide in a figure at most
    SHOWN_WIDTH_IN wide, rows as full as possible (2 + 2, not 3 + 1)."""
    fit = max(1, int(SHOWN_WIDTH_IN // min_panel_in))
    if max_cols is not None:
        fit = min(fit, max_cols)
    cols = min(n, fit)
    rows = math.ceil(n / cols)
    cols = math.ceil(n / rows)
    return rows, cols


def plot_masks(masks, tick_every=None, *, figsize=None):
    """Several bool masks side by side, one panel each, in the colours of ``plot_mask``, with one
    legend for all of them under the panels.

    Shapes:
        masks       {title: (S_q, S_k) bool}, one panel per entry, left to right (wrapping to a
                    second row when they do not fit in the 7.8 in a notebook shows unscaled)
        tick_every  label every k-th position (None: every position)

    Returns the ``Figure``.
    """
    func = "plot_masks"
    if not isinstance(masks, Mapping) or not masks:
        raise ValueError(f"{func}: masks must be a non-empty dict {{title: (S_q, S_k) bool mask}}")
    title_in = max(_label_width_pt(_text(str(t)), _FONT_SIZES["axes.titlesize"]) for t in masks) / 72
    rows, cols = _wrapped_grid(len(masks), max(2.6, title_in + 0.3))
    if figsize is None:
        panel = min(4.0, SHOWN_WIDTH_IN / cols)
        figsize = (panel * cols, (panel - 0.2) * rows + 0.5)
    with set_style():
        fig, axes = _new_figure(figsize, rows, cols)
        flat = [ax for row in axes for ax in row]
        for ax, (name, m) in zip(flat, masks.items()):
            S_q, S_k = _matrix(_bool_mask(m, func), func, "mask").shape
            plot_mask(m, title=name, ax=ax)
            legend = ax.get_legend()
            handles = legend.legend_handles
            legend.remove()  # one legend for the figure, below
            if tick_every:  # positions 0, k, 2k, ... on both axes
                ax.set_xticks(range(0, S_k, tick_every), [str(i) for i in range(0, S_k, tick_every)])
                ax.set_yticks(range(0, S_q, tick_every), [str(i) for i in range(0, S_q, tick_every)])
        for ax in flat[len(masks):]:
            ax.remove()
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles),
                   handlelength=1.2, handleheight=1.2)
    return _finish(fig, True)


def plot_tree(nodes, edges, *, note=None, title=None, box=(2.4, 0.86), figsize=(12.0, 6.6)):
    """A family tree of boxes and arrows, in the course's style (e.g. the attention variants).

    nodes  {name: (x, y, label, group, solid)}: the box's centre in data units, its text, a colour
           group (``series_color(group)``, the colour of that series in the other plots; None for
           grey) and whether its border is solid (True) or dashed (False)
    edges  [(parent, child, text)]: an arrow from the parent's right side to the child's left
           side, with ``text`` (may be "") written above the child's box
    note   a legend text written at the bottom left; ``title`` above the figure.

    Returns the ``Figure``.
    """
    from matplotlib.colors import to_rgba
    from matplotlib.patches import FancyBboxPatch

    func = "plot_tree"
    if not isinstance(nodes, Mapping) or not nodes:
        raise ValueError(f"{func}: nodes must be a non-empty dict {{name: (x, y, label, group, solid)}}")
    for parent, child, _ in edges:
        missing = [n for n in (parent, child) if n not in nodes]
        if missing:
            raise ValueError(f"{func}: edge ({parent!r}, {child!r}) names no node {missing[0]!r}")
    w, h = box
    xs = [v[0] for v in nodes.values()]
    ys = [v[1] for v in nodes.values()]
    with set_style():
        fig = plt.figure(figsize=figsize)
        ax = fig.add_axes((0.0, 0.0, 1.0, 0.93))
        ax.set_xlim(min(xs) - w / 2 - 0.8, max(xs) + w / 2 + 0.1)
        ax.set_ylim(min(ys) - h / 2 - 0.45, max(ys) + h / 2 + 0.35)
        ax.axis("off")
        for parent, child, what in edges:  # arrows first, boxes on top
            (x0, y0), (x1, y1) = nodes[parent][:2], nodes[child][:2]
            ax.annotate("", xy=(x1 - w / 2, y1), xytext=(x0 + w / 2, y0),
                        arrowprops=dict(arrowstyle="-|>", color="#6b6b6b", lw=1.0, shrinkA=2, shrinkB=2))
            if what:
                ax.text(x1 - w / 2, y1 + h / 2 + 0.05, _text(what), ha="left", va="bottom", fontsize=7.5,
                        style="italic", color="#4a4a4a")
        for x, y, label, group, solid in nodes.values():
            face = to_rgba(series_color(group), 0.3) if group else "#f2f2f2"
            ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                        facecolor=face, edgecolor="#3b3b3b", linewidth=1.0,
                                        linestyle="-" if solid else (0, (4, 2))))
            ax.text(x, y, _text(label), ha="center", va="center", fontsize=8)
        if note:
            ax.text(min(xs) - w / 2 - 0.75, min(ys), _text(note), ha="left", va="center", fontsize=7.5, color="#3b3b3b")
        if title:
            fig.suptitle(_text(title), y=0.985)
    return _finish(fig, True)


PANEL_MIN_WIDTH = 3.6  # inches: the narrowest panel ``panels`` makes by itself


def panels(ncols=2, nrows=1, *, figsize=None, title=None, wrap=None):
    """An empty figure of ``nrows × ncols`` panels in the course's style, to fill with the
    ``plot_*`` helpers through their ``ax=`` argument; make ``fig`` the cell's last expression.

    The figure is at most 7.8 in wide, what a notebook shows unscaled (800 px with its padding), so that its
    text and heatmap values stay readable there. Without ``figsize``, panels that would be
    narrower than ``PANEL_MIN_WIDTH`` wrap to the next row (``wrap=False`` keeps the grid as
    asked): ``panels(3)`` gives two panels in the first row and one in the second.

    Returns ``(fig, axes)``, ``axes`` a flat list of ``ncols * nrows`` axes (row by row). The
    figure is not kept by pyplot, so a notebook shows it once.
    """
    if int(ncols) < 1 or int(nrows) < 1:
        raise ValueError(f"panels: ncols and nrows must be >= 1; got {ncols}, {nrows}")
    ncols, nrows = int(ncols), int(nrows)
    n = ncols * nrows
    rows, cols = nrows, ncols
    if (figsize is None if wrap is None else wrap) and ncols * PANEL_MIN_WIDTH > SHOWN_WIDTH_IN:
        cols = max(1, int(SHOWN_WIDTH_IN // PANEL_MIN_WIDTH))
        rows = math.ceil(n / cols)
    with set_style():
        size = figsize or (min(5.2 * cols, SHOWN_WIDTH_IN), 3.8 * rows)
        fig, axes = _new_figure(size, rows, cols)
        flat = [ax for row in axes for ax in row]
        for ax in flat[n:]:
            ax.remove()
        if title:
            fig.suptitle(_text(title))
    return _finish(fig, True), flat[:n]
