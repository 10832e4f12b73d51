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

One look for the same thing everywhere:
- theory / reference curves are dashed, without markers, drawn on top of the measured ones and
  their markers with a white halo, and listed in the legend (``reference=``; names such as
  "theory: d_k" are recognised). Two reference lines of one figure differ in colour and in
  dashes (``REFERENCE_COLORS``, ``REFERENCE_DASH_STYLES``; neither is a measured series' look).
  Where a reference line coincides with a measured curve (within ``COINCIDE_PT`` over a
  quarter of its length or more, as laid out), the curve shows between its dashes and its name
  is written on the line, where it covers the fewest other curves. A measured curve that
  another drawn after it coincides with is drawn wider, as an outline around it; markers too
  close to tell apart are thinned. A reader always sees both curves;
- colours go by group, and a group keeps its colour in every figure of the session ("scaled"
  is one colour in the whole notebook; ``groups=``, ``series_color``, ``set_colors``);
- tick labels sit on positional ticks (repeated tokens such as "<pad>" each keep their own), and
  crowded x labels follow one rule in every function: all rotated by ``XTICK_ROTATION`` degrees;
- masked cells of an attention map (``mask=``) are grey and hatched, never a colormap colour;
- text is readable as the notebook shows the figure. A notebook (and the website) shows a
  figure at most ``SHOWN_WIDTH_PX`` = 800 px wide, scaled down if it is wider, so figures made
  here are at most ``SHOWN_WIDTH_IN`` = 7.8 in wide at 100 dpi (800 px with the notebook's
  padding): legends move under the axes when they do not fit beside them, ``panels`` and
  ``plot_masks`` wrap to a new row, ``plot_heads`` and ``plot_compare`` use more rows
  (``plot_tree`` draws a diagram at the size its caller laid it out for). Values
  written in heatmap cells and tick labels are never smaller than a digit ``MIN_TEXT_PX`` = 8 px
  tall there: a heatmap whose cells are too small leaves its values out, an axis with more
  labels than it can hold labels every k-th, a log axis shows at least three labelled values
  where it spans less than a couple of decades;
- text is cleaned before it is drawn: no emoji, and characters that no installed font can draw
  are left out (Chinese renders through a CJK font when one is installed), so matplotlib never
  prints a "Glyph ... missing" warning.

Works headless (any backend, e.g. ``MPLBACKEND=Agg``); this module never selects a backend.
"""

from __future__ import annotations

from . import _base  # noqa: F401  (tests patch its font state)
from ._base import (  # noqa: F401
    set_style,
    series_color,
    set_colors,
    reset_colors,
    WEIGHTS_CMAP,
    DIFF_CMAP,
    MAY_ATTEND_COLOR,
    MASKED_COLOR,
    REFERENCE_COLOR,
    _FONT_SIZES,
    MISSING_GLYPH,
    NAN_COLOR,
    _font_chain,
    _is_emoji,
    _label_width_pt,
    _text,
    MASKED_HATCH,
    MASKED_HATCH_COLOR,
    XTICK_ROTATION,
    ALL_LABELS,
    MIN_TICK_SIZE,
    REFERENCE_DASH_STYLES,
    REFERENCE_COLORS,
    COINCIDE_PT,
    COINCIDE_FRACTION,
    SHOWN_WIDTH_PX,
    SHOWN_DPI,
    SHOWN_WIDTH_IN,
    MIN_TEXT_PX,
    MIN_TEXT_PT,
    _shown_scale,
    _min_text_pt,
    _CourseLine,
    _CellText,
)
from .heatmaps import plot_attention, plot_heads, plot_mask, plot_compare  # noqa: F401
from .curves import plot_lines, plot_cost, plot_histograms, _loglog_slope  # noqa: F401
from .layouts import plot_masks, plot_tree, panels  # noqa: F401

__all__ = [
    "set_style",
    "plot_attention",
    "plot_heads",
    "plot_mask",
    "plot_compare",
    "plot_lines",
    "plot_cost",
    "plot_histograms",
    "plot_masks",
    "plot_tree",
    "panels",
    "series_color",
    "set_colors",
    "reset_colors",
    "WEIGHTS_CMAP",
    "DIFF_CMAP",
    "MAY_ATTEND_COLOR",
    "MASKED_COLOR",
    "REFERENCE_COLOR",
    "REFERENCE_COLORS",
]
