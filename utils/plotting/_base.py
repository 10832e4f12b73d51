"""The course style and what every kind of figure shares: fonts and drawable text, colours by
group and reference lines, input conversion and validation, figure and axes helpers."""
from __future__ import annotations
import functools
import math
import re
import sys
import unicodedata
import warnings
from collections.abc import Mapping
import matplotlib as mpl
import matplotlib.pyplot as plt
import matplotlib.lines as mlines
import matplotlib.text as mtext
import numpy as np
import seaborn as sns
import torch
from cycler import cycler
from matplotlib import patheffects
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, PathPatch
from matplotlib.path import Path as MplPath
from matplotlib.ticker import MaxNLocator

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
        rc = {}
        rc.update(sns.axes_style("ticks"))
        rc.update(sns.plotting_context("notebook"))
        rc.update(_FONT_SIZES)
        rc.update(
            {
                # DejaVu Sans ships with matplotlib: the same glyphs on every machine.
                # Installed CJK fonts follow as per-glyph fallbacks (see _text). The family is
                # named, not "sans-serif", so that a figure drawn later, outside this style,
                # still falls back to them.
                "font.family": _font_chain(),
                "font.sans-serif": _font_chain() + ["sans-serif"],
                "legend.handlelength": 2.6,  # long enough to show a dashed line as dashed
                "hatch.linewidth": 0.7,
                "axes.prop_cycle": cycler(color=_PALETTE),
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
# Text that every machine can draw: no emoji, no missing glyphs
# ----------------------------------------------------------------------------------------------

# Emoji are never drawn (STYLE: no emoji in plot text): the planes of pictographs, and the
# characters of the Basic Multilingual Plane that display as emoji by default
# (Unicode's Emoji_Presentation), plus the joiners and selectors that build emoji sequences.
_EMOJI_RANGES = (
    (0x1F000, 0x1FAFF), (0x1FC00, 0x1FFFD), (0xE0020, 0xE007F), (0xFE00, 0xFE0F),
    (0x200D, 0x200D), (0x20E3, 0x20E3), (0x231A, 0x231B), (0x23E9, 0x23EC), (0x23F0, 0x23F0),
    (0x23F3, 0x23F3), (0x25FD, 0x25FE), (0x2614, 0x2615), (0x2648, 0x2653), (0x267F, 0x267F),
    (0x2693, 0x2693), (0x26A1, 0x26A1), (0x26AA, 0x26AB), (0x26BD, 0x26BE), (0x26C4, 0x26C5),
    (0x26CE, 0x26CE), (0x26D4, 0x26D4), (0x26EA, 0x26EA), (0x26F2, 0x26F3), (0x26F5, 0x26F5),
    (0x26FA, 0x26FA), (0x26FD, 0x26FD), (0x2705, 0x2705), (0x270A, 0x270B), (0x2728, 0x2728),
    (0x274C, 0x274C), (0x274E, 0x274E), (0x2753, 0x2755), (0x2757, 0x2757), (0x2795, 0x2797),
    (0x27B0, 0x27B0), (0x27BF, 0x27BF), (0x2B1B, 0x2B1C), (0x2B50, 0x2B50), (0x2B55, 0x2B55),
)
MISSING_GLYPH = "□"  # stands for a label that no installed font can draw (DejaVu Sans has it)
_EMPTY_BRACKETS = re.compile(r"\s*(\(\s*\)|（\s*）|\[\s*\]|【\s*】|「\s*」)")
_DRAWABLE: frozenset | None = None


def _is_emoji(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _EMOJI_RANGES)


def _font_chain() -> list:
    """The fonts text is drawn with, in fallback order: DejaVu Sans, then installed CJK fonts."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    return ["DejaVu Sans"] + [f for f in _CJK_FONTS if f in installed]


def _drawable() -> frozenset:
    """Code points that some font of ``_font_chain()`` has a glyph for (computed once)."""
    global _DRAWABLE
    if _DRAWABLE is None:
        from matplotlib import font_manager, ft2font

        cps = set()
        for name in _font_chain():
            try:
                path = font_manager.findfont(
                    font_manager.FontProperties(family=name), fallback_to_default=False
                )
                cps.update(ft2font.FT2Font(path).get_charmap())
            except (ValueError, RuntimeError, OSError):  # listed but unreadable: skip it
                continue
        _DRAWABLE = frozenset(cps)
    return _DRAWABLE


def _drawable_part(s: str) -> str:
    drawable = _drawable()
    kept, dropped = [], False
    for ch in s:
        cp = ord(ch)
        if _is_emoji(cp) or (cp >= 32 and cp not in drawable and ch not in "\n\t"):
            dropped = True
        else:
            kept.append(ch)
    if not dropped:
        return s
    out = _EMPTY_BRACKETS.sub("", "".join(kept))  # "variance（方差）" -> "variance"
    out = re.sub(r"[ \t]{2,}", " ", out).strip()
    return out


def _text(s) -> str:
    """Text as the figure will show it: emoji removed, characters that no installed font can draw
    removed (a label left empty becomes MISSING_GLYPH), so that matplotlib never writes a
    "Glyph ... missing" warning to stderr. Mathtext between $...$ is left to matplotlib."""
    if s is None:
        return None
    s = str(s)
    if s == "":
        return s
    dollars = s.count("$") - s.count(r"\$")
    if dollars > 0 and dollars % 2 == 0:  # matplotlib draws this as mathtext: clean outside $..$
        parts = re.split(r"(?<!\\)\$", s)
        out = "$".join(p if i % 2 else _drawable_part(p) for i, p in enumerate(parts))
    else:
        out = _drawable_part(s)
    return out if out.strip() or not s.strip() else MISSING_GLYPH


# ----------------------------------------------------------------------------------------------
# Colours by group, reference (theory) lines
# ----------------------------------------------------------------------------------------------

# Okabe & Ito's colour-blind-safe palette (2008), ordered so that the first colours of a figure
# are the easiest to tell apart (no two oranges or two pinks among the first five); its yellow is
# replaced by an olive that reads on white; black is kept for reference lines.
_PALETTE = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#8c6d31", "#999933"]
# Theory / reference lines take colours that no measured series has (near-black first, then a mid
# grey, a deep violet and a dark red) and dashes of their own: the i-th reference line of a figure
# gets REFERENCE_COLORS[i] and REFERENCE_DASH_STYLES[i], so two reference lines in one figure
# differ in colour and in dashes (beyond four, in at least one of the two).
REFERENCE_COLORS = ("#111111", "#6e6e6e", "#5b3a96", "#8e2323")
REFERENCE_COLOR = REFERENCE_COLORS[0]
REFERENCE_DASH_STYLES = ((0, (5.0, 2.5)), (0, (1.2, 1.6)), (0, (7.0, 2.0, 2.0, 2.0)), (0, (10.0, 3.0)))
REFERENCE_DASHES = REFERENCE_DASH_STYLES[0]
# A series whose name starts with one of these words is a reference line unless reference= says
# otherwise. ("reference" is not one: in this course it also names measured reference code.)
_REFERENCE_WORDS = ("theory", "theoretical", "uniform", "ideal", "bound")
_COLORS: dict = {}  # group -> colour, for the whole session (every figure of a notebook)


def series_color(group) -> str:
    """The colour of a group (or series name) in every figure of this session.

    The first group drawn gets the palette's first colour, the next group the next one, and so
    on; a group keeps its colour in every later figure (so "scaled" has one colour in the whole
    notebook). Pin colours with ``set_colors``; start over with ``reset_colors``.
    """
    key = str(group)
    if key not in _COLORS:
        used = set(_COLORS.values())
        free = [c for c in _PALETTE if c not in used]
        _COLORS[key] = free[0] if free else _PALETTE[len(_COLORS) % len(_PALETTE)]
    return _COLORS[key]


def set_colors(mapping=None, **colors):
    """Pin colours by group name, e.g. ``set_colors({"unscaled": "C0", "scaled": "C1"})`` at the
    top of a notebook. Any matplotlib colour works. Returns the current group -> colour dict."""
    for key, c in {**dict(mapping or {}), **colors}.items():
        _COLORS[str(key)] = mpl.colors.to_hex(c)
    return dict(_COLORS)


def reset_colors():
    """Forget every group's colour (the next figure starts from the palette's first colour)."""
    _COLORS.clear()


def _darker(color, amount=0.35):
    r, g, b = mpl.colors.to_rgb(color)
    return mpl.colors.to_hex((r * (1 - amount), g * (1 - amount), b * (1 - amount)))


def _auto_group(name: str) -> str:
    """"unscaled: 90th percentile" belongs to group "unscaled"; a name without ": " is its own."""
    head, sep, _ = name.partition(": ")
    return head.strip() if sep and head.strip() else name


def _is_reference_name(name: str) -> bool:
    m = re.match(r"[A-Za-z]+", name.strip().lower())
    return bool(m) and m.group(0) in _REFERENCE_WORDS


def _reference_style(i: int):
    """(colour, dashes) of the i-th reference line of a figure: distinct in both for i < 4, and
    in at least one of the two for any two of the first 16."""
    nc, nd = len(REFERENCE_COLORS), len(REFERENCE_DASH_STYLES)
    return REFERENCE_COLORS[i % nc], REFERENCE_DASH_STYLES[(i + i // nc) % nd]


def _references_in(fig) -> dict:
    """name -> reference slot of the reference lines already drawn in ``fig`` (any of its axes)."""
    slots = {}
    if fig is None:
        return slots
    for ax in fig.axes:
        for ln in ax.lines:
            if isinstance(ln, _CourseLine) and ln._course_role == "reference":
                slots.setdefault(ln._course_name, ln._course_slot)
    return slots


def _series_styles(names, func, reference=None, groups=None, figure=None):
    """name -> dict(color, reference, group, dashes, slot) for the series of one plot.

    reference: None finds theory / reference series by name ("theory: d_k", "uniform: 1/32",
      see _REFERENCE_WORDS); or the exact names (an iterable of str; () for none).
    groups: None, or a dict name -> group. Series of one group share a colour (a band's two
      edges, a measurement and its theory). By default "group: detail" names are grouped by
      the text before ": " and every other name is its own group. Theory / reference series
      never take a measured colour: the i-th reference line of the figure gets
      ``REFERENCE_COLORS[i]`` and ``REFERENCE_DASH_STYLES[i]`` (``_reference_style``).
    figure: the figure drawn into, when it may already hold reference lines (a second call on
      the same axes, or panels of one figure): a reference of the same name keeps its style,
      a new one takes the next free style, so no two references of one figure look alike.
    """
    names = list(names)
    if reference is None:
        ref = {n for n in names if _is_reference_name(n)}
    else:
        if isinstance(reference, str):
            reference = [reference]
        ref = {str(n) for n in reference}
        unknown = sorted(ref - set(names))
        if unknown:
            raise ValueError(
                f"{func}: reference names {unknown} are not series; the series are {names}"
            )
    if groups is None:
        groups = {}
    if not isinstance(groups, Mapping):
        raise ValueError(
            f"{func}: groups must be a dict series name -> group name, e.g. "
            f"{{'var(q·k), measured': 'unscaled', 'theory: d_k': 'unscaled'}}; "
            f"got {type(groups).__name__}"
        )
    groups = {str(k): str(v) for k, v in groups.items()}
    unknown = sorted(set(groups) - set(names))
    if unknown:
        raise ValueError(f"{func}: groups names {unknown} are not series; the series are {names}")
    slots = _references_in(figure)
    taken = set(slots.values())
    styles, used = {}, {}
    for n in names:
        group = groups.get(n, _auto_group(n))
        is_ref = n in ref
        slot = None
        if is_ref:
            # a colour and dashes of its own (never a measured series' colour), drawn above
            slot = slots.get(_text(n))
            if slot is None:
                slot = next(i for i in range(len(taken) + 1) if i not in taken)
                taken.add(slot)
            color, dashes = _reference_style(slot)
        else:
            color = series_color(group)
            # a group beyond the palette may repeat a colour: never twice in one figure
            if used.get(color, group) != group:
                free = [c for c in _PALETTE if c not in used]
                color = free[0] if free else color
            used[color] = group
            dashes = None
        styles[n] = {"color": color, "reference": is_ref, "group": group, "dashes": dashes,
                     "slot": slot}
    return styles


# How a reference line and a curve that coincide with it are drawn (see _CourseLine).
COINCIDE_PT = 3.0  # two curves closer than this (points) are drawn on top of each other there
COINCIDE_FRACTION = 0.25  # ... and over this share of a curve's length, they "coincide"
REFERENCE_ZORDER = 3.0  # above every measured series (2.0) and its markers
MEASURED_ZORDER = 2.0
_HALO = 0.9  # points of white on each side of a reference line (twice that around its label)


def _display_points(line):
    """A line's vertices in display pixels (NaN where a value is missing or off a log axis).
    A curve with more vertices than pixel columns keeps, per column, the ones that reach
    lowest and highest (and its first and last): the ink it leaves, in far fewer vertices."""
    xy = np.asarray(line.get_xydata(), dtype=float)
    if xy.size == 0:
        return np.zeros((0, 2))
    with np.errstate(all="ignore"):
        d = np.asarray(line.get_transform().transform(xy), dtype=float)
    bad = ~np.isfinite(d).all(axis=1)
    d[bad] = np.nan
    ok = ~bad
    if ok.sum() > 3 * max(1.0, np.ptp(d[ok, 0])) and len(d) > 64:
        col = np.where(ok, np.floor(np.nan_to_num(d[:, 0])), np.nan)
        keep = bad.copy()  # gaps stay gaps
        idx = np.flatnonzero(ok)
        order = idx[np.lexsort((d[idx, 1], col[idx]))]  # by column, then by y
        cols = col[order]
        first = np.r_[True, cols[1:] != cols[:-1]]
        last = np.r_[cols[1:] != cols[:-1], True]
        keep[order[first]] = True  # lowest in its column
        keep[order[last]] = True  # highest
        keep[idx[0]] = keep[idx[-1]] = True
        d = d[keep]
    return d


def _along(d, step, weights=False):
    """Points every ``step`` pixels along the finite segments of a polyline ``d`` (N, 2), and its
    isolated finite points; with ``weights``, also the horizontal extent each point stands for
    (a share of a curve is a share of the x range it covers, not of its wiggles)."""
    ok = np.isfinite(d).all(axis=1)
    if len(d) == 0 or not ok.any():
        return (np.zeros((0, 2)), np.zeros(0)) if weights else np.zeros((0, 2))
    seg = ok[:-1] & ok[1:]
    a, b = d[:-1][seg], d[1:][seg]
    parts, w = [], []
    if len(a):
        n = np.maximum(1, np.ceil(np.hypot(*(b - a).T) / step).astype(int))
        idx = np.repeat(np.arange(len(a)), n)
        t = (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)) / np.repeat(n, n)
        parts.append(a[idx] + t[:, None] * (b[idx] - a[idx]))
        w.append(np.abs(b[idx, 0] - a[idx, 0]) / n[idx])
    in_seg = np.zeros(len(d), bool)
    in_seg[:-1] |= seg
    in_seg[1:] |= seg
    lone = d[ok & ~in_seg]  # points without a finite neighbour
    parts.append(lone)
    w.append(np.full(len(lone), step))
    if len(a):
        parts.append(b[-1:])
        w.append(np.zeros(1))
    pts, wt = np.concatenate(parts), np.concatenate(w)
    return (pts, wt) if weights else pts


def _distance_to(points, d, reach=np.inf):
    """Distance (pixels) from each of ``points`` (M, 2) to the polyline ``d`` (N, 2); distances
    beyond ``reach`` may come back as inf. Points are taken in chunks along x, each against the
    segments (and points) of ``d`` within ``reach`` of its x range, so a long curve costs about
    as much as its length."""
    if len(points) == 0:
        return np.zeros(0)
    ok = np.isfinite(d).all(axis=1)
    seg = ok[:-1] & ok[1:] if len(d) > 1 else np.zeros(0, bool)
    a, b = d[:-1][seg], d[1:][seg]
    lone = d[ok]
    seg_lo, seg_hi = np.minimum(a[:, 0], b[:, 0]), np.maximum(a[:, 0], b[:, 0])
    order = np.argsort(points[:, 0], kind="stable")
    best = np.full(len(points), np.inf)
    for lo in range(0, len(points), 128):
        idx = order[lo:lo + 128]
        p = points[idx]
        x0, x1 = p[:, 0].min() - reach, p[:, 0].max() + reach
        near_seg = (seg_hi >= x0) & (seg_lo <= x1)
        sa, sb = a[near_seg], b[near_seg]
        out = np.full(len(p), np.inf)
        if len(sa):
            ab = sb - sa
            denom = np.maximum((ab**2).sum(1), 1e-12)
            t = np.clip(((p[:, None, :] - sa[None]) * ab[None]).sum(-1) / denom[None], 0.0, 1.0)
            near = sa[None] + t[..., None] * ab[None]
            out = np.hypot(*(p[:, None, :] - near).transpose(2, 0, 1)).min(1)
        pts = lone[(lone[:, 0] >= x0) & (lone[:, 0] <= x1)]
        if len(pts):
            out = np.minimum(out, np.hypot(*(p[:, None, :] - pts[None]).transpose(2, 0, 1)).min(1))
        best[idx] = out
    return best


def _coincidence(line, other, renderer, within=None):
    """Share of ``line``'s visible length (inside the axes) that lies within COINCIDE_PT of
    ``other``, as drawn now."""
    tol = renderer.points_to_pixels(COINCIDE_PT)
    d, e = _display_points(line), _display_points(other)
    if not np.isfinite(d).any() or not np.isfinite(e).any():
        return 0.0
    samples, w = _along(d, max(1.0, tol / 2), weights=True)
    if within is not None:
        keep = ((samples[:, 0] >= within.x0 - 1) & (samples[:, 0] <= within.x1 + 1)
                & (samples[:, 1] >= within.y0 - 1) & (samples[:, 1] <= within.y1 + 1))
        samples, w = samples[keep], w[keep]
    if len(samples) == 0:
        return 0.0
    if len(samples) > 1500:  # long curves: an even subsample is enough for a share
        pick = np.linspace(0, len(samples) - 1, 1500).astype(int)
        samples, w = samples[pick], w[pick]
    if w.sum() <= 0:  # a vertical curve: its length
        w = np.ones(len(samples))
    close = _distance_to(samples, e, reach=tol) <= tol
    return float((w * close).sum() / w.sum())


def _is_above(a, b, lines):
    """Is line ``a`` drawn after (on top of) line ``b``?"""
    za, zb = a.get_zorder(), b.get_zorder()
    return za > zb or (za == zb and lines.index(a) > lines.index(b))


class _CourseLine(mlines.Line2D):
    """A curve of the course's plots. What it must look like depends on where the other curves
    lie once the figure is laid out, so it is decided when it is drawn:

    - a reference (theory) line is drawn above every measured curve with a white halo; where
      it coincides with a measured curve (within COINCIDE_PT over COINCIDE_FRACTION of its
      length), its dashes let the curve show through, and its name is written on the line, at
      the place along it where the label covers the fewest other curves;
    - a measured curve that another measured curve drawn after it coincides with is drawn wider,
      with bigger markers, as an outline around the one on top (both stay visible);
    - markers closer together than about two marker widths are thinned (``markevery``), so a
      dense curve stays a line with markers instead of a row of discs that would bury a line
      drawn along it.
    """

    def __init__(self, *args, course_role="measured", course_name="", course_slot=None, **kw):
        super().__init__(*args, **kw)
        self._course_role = course_role
        self._course_name = course_name
        self._course_slot = course_slot
        self._end_label = None  # the reference's name written on it, when it coincides
        self._outlined = 0  # how many measured curves on top coincide with this one
        self._coincides_with = []

    def _others(self):
        lines = list(self.axes.lines) if self.axes is not None else []
        return lines, [ln for ln in lines if ln is not self and ln.get_visible()
                       and len(ln.get_xydata()) > 0]

    def draw(self, renderer):
        if not self.get_visible() or self.axes is None:
            return super().draw(renderer)
        lines, others = self._others()
        box = self.axes.bbox
        saved = (self._linewidth, self._markersize, self._markevery)
        self._coincides_with, self._outlined, self._end_label = [], 0, None
        if self._course_role == "reference":
            self._coincides_with = [
                ln for ln in others
                if getattr(ln, "_course_role", "measured") == "measured"
                and _coincidence(self, ln, renderer, box) >= COINCIDE_FRACTION
            ]
        else:
            above = [
                ln for ln in others
                if getattr(ln, "_course_role", "measured") == "measured"
                and _is_above(ln, self, lines)
                and _coincidence(self, ln, renderer, box) >= COINCIDE_FRACTION
            ]
            self._coincides_with, self._outlined = above, len(above)
            if above:  # an outline around the curves on top of it (at most three deep)
                self._linewidth = saved[0] + 2.0 * min(len(above), 3)
                self._markersize = saved[1] + 2.6 * min(len(above), 3)
            self._thin_markers(renderer)
        try:
            super().draw(renderer)
        finally:
            self._linewidth, self._markersize, self._markevery = saved
        if self._course_role == "reference" and self._coincides_with and self._course_name:
            self._end_label = self._place_label(renderer, others)
            if self._end_label is not None:
                self._end_label.draw(renderer)
        self.stale = False

    def _thin_markers(self, renderer):
        if not self._marker or self._markersize <= 0 or self._markevery is not None:
            return
        d = _display_points(self)
        d = d[np.isfinite(d).all(axis=1)]
        if len(d) < 3:
            return
        size = renderer.points_to_pixels(self._markersize)
        gaps = np.hypot(*np.diff(d, axis=0).T)
        if np.median(gaps) >= 2.5 * size:
            return
        diag = float(np.hypot(self.axes.bbox.width, self.axes.bbox.height))
        if diag > 0:
            self._markevery = 3.0 * size / diag  # markers about 3 widths apart, along the line

    def _place_label(self, renderer, others):
        """The reference's name next to the line, just above or below it along the stretch it
        spans, where it covers the fewest other curves and the line stays closest to it (its
        right end first). A name wider than 40% of the axes is shortened to its kind, the text
        before ": " (the legend has it in full)."""
        box = self.axes.bbox
        fine = _along(_display_points(self), 1.0)
        fine = fine[(fine[:, 0] >= box.x0) & (fine[:, 0] <= box.x1)
                    & (fine[:, 1] >= box.y0) & (fine[:, 1] <= box.y1)]
        if len(fine) == 0:
            return None
        fig = _root_figure(self.axes)
        size = max(_FONT_SIZES["legend.fontsize"], _min_text_pt(fig))
        t = mtext.Text(0, 0, _text(self._course_name), color=self.get_color(), fontsize=size,
                       fontfamily=_font_chain(), ha="left", va="bottom", zorder=self.get_zorder())
        t.set_figure(fig)
        t.set_path_effects([patheffects.withStroke(linewidth=4 * _HALO, foreground="white")])
        ext = t.get_window_extent(renderer)
        name = _text(self._course_name)
        if ext.width > 0.4 * box.width and ": " in name:  # a long name: its kind ("bound (...)")
            t.set_text(name.split(": ")[0])
            ext = t.get_window_extent(renderer)
        tw, th = ext.width, ext.height
        obstacles = [_along(_display_points(ln), 2.0) for ln in others]
        obstacles = np.concatenate(obstacles) if obstacles else np.zeros((0, 2))
        gap = renderer.points_to_pixels(2 * _HALO + 1.5)
        x_lo, x_hi = float(fine[:, 0].min()), float(fine[:, 0].max())
        best = None
        for rank, f in enumerate((1.0, 0.85, 0.7, 0.55, 0.4, 0.25, 0.1, 0.0)):
            right = x_lo + tw + f * max(0.0, x_hi - x_lo - tw)  # the label's right end
            left = right - tw
            ys = fine[(fine[:, 0] >= left) & (fine[:, 0] <= right), 1]
            if len(ys) == 0:
                continue
            for bottom in (ys.max() + gap, ys.min() - gap - th):
                inside = (left >= box.x0 - 1 and right <= box.x1 + 1 and bottom >= box.y0
                          and bottom + th <= box.y1)
                covered = 0
                if len(obstacles):
                    covered = int(((obstacles[:, 0] >= left - 2) & (obstacles[:, 0] <= right + 2)
                                   & (obstacles[:, 1] >= bottom - 2)
                                   & (obstacles[:, 1] <= bottom + th + 2)).sum())
                spread = round((ys.max() - ys.min()) / max(th, 1.0))  # in label heights
                score = (not inside, covered > 0, spread, covered, rank)
                if best is None or score < best[0]:
                    best = (score, (left, bottom))
        if best is None:
            return None
        t.set_position(best[1])
        return t


def _plot_series(ax, x, y, label, style, marker, markers=True, name=None):
    """One curve (a _CourseLine): measured series solid with markers; reference series dashed in
    their own colour (REFERENCE_COLORS), no markers, above the measured ones (zorder) with a
    white halo, their name written on the line where they coincide with a measured curve; each
    with its own legend entry."""
    name = label if name is None else name
    if style["reference"]:
        line = _CourseLine(
            x, y, color=style["color"], linestyle=style.get("dashes") or REFERENCE_DASHES,
            linewidth=1.5, marker=None, zorder=REFERENCE_ZORDER + 0.01 * (style.get("slot") or 0),
            label=label, course_role="reference", course_name=name,
            course_slot=style.get("slot") or 0,
            path_effects=[patheffects.withStroke(linewidth=1.5 + 2 * _HALO, foreground="white",
                                                 alpha=0.85)],
        )
    else:
        line = _CourseLine(
            x, y, color=style["color"], marker=marker if markers else None, markersize=4.5,
            linewidth=1.6, zorder=MEASURED_ZORDER, label=label, course_role="measured",
            course_name=name,
        )
    ax.add_line(line)
    ax._request_autoscale_view()
    return line


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
    return _text(s.replace("$", r"\$"))  # "$" would start matplotlib mathtext


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
    package = __name__.rpartition(".")[0]  # utils.plotting: every module of the package
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(package + "."):
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


def _axes_size_in(ax, colorbar=False):
    """The size (inches) the axes will have, estimated before layout. Under constrained layout
    (every figure made here) the subplot parameters mean nothing: the axes get their grid
    cell less the room of their title, tick labels and axis labels (and of a colorbar)."""
    fig = _root_figure(ax)
    w, h = fig.get_size_inches()
    ss = ax.get_subplotspec() if hasattr(ax, "get_subplotspec") else None
    engine = fig.get_layout_engine()
    if ss is None or engine is None or type(engine).__name__ != "ConstrainedLayoutEngine":
        pos = ax.get_position()
        return max(pos.width * w, 0.1), max(pos.height * h, 0.1)
    nr, nc = ss.get_gridspec().get_geometry()
    top = 0.4 if fig.get_suptitle() else 0.1
    cw = (w - 0.1) / nc * len(ss.colspan) - 0.6 - (0.9 / nc if colorbar else 0.0)
    ch = (h - top) / nr * len(ss.rowspan) - 0.7
    return max(cw, 0.1), max(ch, 0.1)


# How a figure is shown. A notebook stores a figure at 100 dpi (matplotlib-inline) and JupyterLab
# shows it at most about 800 px wide, scaled down if it is wider; the course's website shows it at
# about the same width. Text must be readable there: a digit at least MIN_TEXT_PX pixels tall.
SHOWN_WIDTH_PX = 800
SHOWN_DPI = 100
# The widest figure shown unscaled: 7.8 in, since the notebook saves it with 0.1 in of padding
# on each side of what it draws (bbox_inches="tight").
_PAD_IN = 0.1
SHOWN_WIDTH_IN = SHOWN_WIDTH_PX / SHOWN_DPI - 2 * _PAD_IN
MIN_TEXT_PX = 8.0
_DIGIT_HEIGHT_EM = 0.729  # height of a digit in DejaVu Sans, in em
MIN_TEXT_PT = 8.0  # at 100 dpi, unscaled: a digit 8.1 px tall (MIN_TEXT_PX)
assert MIN_TEXT_PT * SHOWN_DPI / 72 * _DIGIT_HEIGHT_EM >= MIN_TEXT_PX


def _shown_scale(fig) -> float:
    """The factor by which the notebook scales the figure when it shows it (1: not scaled)."""
    w_in = float(fig.get_size_inches()[0]) + 2 * _PAD_IN
    return min(1.0, SHOWN_WIDTH_PX / (SHOWN_DPI * w_in))


def _min_text_pt(fig) -> float:
    """The smallest font size (points) that is readable in ``fig`` as the notebook shows it."""
    return MIN_TEXT_PT / _shown_scale(fig)


def _tick_fontsize(n: int) -> float:
    base = _FONT_SIZES["xtick.labelsize"]
    return base if n <= 24 else max(MIN_TICK_SIZE, base * 24 / n)


XTICK_ROTATION = 45  # the one angle of rotated x tick labels, in every function
ALL_LABELS = 40  # a token axis labels every token, up to this many, when it can hold them readably
MIN_TICK_SIZE = MIN_TEXT_PT  # points: the smallest tick label drawn (in a figure shown unscaled)


@functools.lru_cache(maxsize=4096)
def _label_width_pt(s: str, size: float) -> float:
    """Width of a one-line label in points, measured with the course's fonts."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    prop = FontProperties(family=_font_chain(), size=size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # only measuring: labels are drawable (see _text)
        try:
            return float(text_to_path.get_text_width_height_descent(s, prop, ismath=False)[0])
        except Exception:  # a font problem must not stop a plot: estimate instead
            wide = sum(1.0 if unicodedata.east_asian_width(ch) in "WF" else 0.7 for ch in s)
            return size * wide


def _text_width_em(s: str) -> float:
    """Width of a short one-line text in em, the sum of its characters' widths (each measured
    once): fast, for the many values of a heatmap or tick labels (no kerning: a bit wide)."""
    return sum(_label_width_pt(ch, 10.0) if ch != " " else 3.2 for ch in s) / 10.0


def _xticks_fit_flat(texts, gaps_pt, size) -> bool:
    widths = [_text_width_em(t) * size for t in texts]
    return all(
        (widths[i] + widths[i + 1]) / 2 + 0.35 * size <= gaps_pt[i] for i in range(len(texts) - 1)
    )


def _orient_xticklabels(ax, rotate: bool):
    """The one rule for x tick labels, used by every function: horizontal and centred when each
    label fits between its neighbours; otherwise all rotated by XTICK_ROTATION degrees with their
    right end at their tick (so a label always points at its own column)."""
    if rotate:
        ax.tick_params(axis="x", labelrotation=XTICK_ROTATION)
        for t in ax.get_xticklabels():
            t.set_horizontalalignment("right")
            t.set_rotation_mode("anchor")
    else:
        ax.tick_params(axis="x", labelrotation=0)


def _matrix_axis_ticks(n, slot_pt, labels, x: bool, min_size=None):
    """Which labels a matrix axis shows (step) and at what size, so that none touch and each is
    readable where the figure is shown: every label up to ALL_LABELS tokens when they fit at
    ``min_size`` or more (the font shrinks to fit, from the course's size down to ``min_size``:
    MIN_TICK_SIZE in a figure the notebook shows unscaled, more in one it scales down; x labels
    rotate when they do not fit flat); otherwise every step-th label. Returns (step, size,
    rotate)."""
    min_size = MIN_TICK_SIZE if min_size is None else max(MIN_TICK_SIZE, float(min_size))
    step = 1 if n <= ALL_LABELS else max(2, math.ceil(n / 64))
    sin = math.sin(math.radians(XTICK_ROTATION))
    while True:
        shown = [labels[i] for i in range(0, n, step)]
        gap = slot_pt * step
        size = max(min_size, _tick_fontsize(len(shown)) if step == 1 else _tick_fontsize(n // step))
        while True:
            if not x:
                if gap >= 1.2 * size:
                    return step, size, False
            else:
                if _xticks_fit_flat(shown, [gap] * len(shown), size):
                    return step, size, False
                # rotated labels are parallel lines: their spacing across the text must exceed a line
                if gap * sin >= 1.25 * size:
                    return step, size, True
            if size <= min_size:
                break
            size = max(min_size, size - 0.5)
        if step >= n:
            return step, size, x
        step += 1


def _set_matrix_ticks(ax, n_rows, n_cols, x_labels, y_labels, show_x=True, show_y=True):
    """Positional ticks (one per row / column) carrying the given labels: repeated tokens such as
    "<pad>" each keep their own tick and label."""
    w_in, h_in = _axes_size_in(ax, colorbar=True)
    w_pt, h_pt = 0.85 * w_in * 72, 0.85 * h_in * 72  # before layout: be conservative
    min_size = _min_text_pt(_root_figure(ax))
    rotate = False
    for axis, n, labels, show, slot, is_x in (
        (ax.xaxis, n_cols, x_labels, show_x, w_pt / n_cols, True),
        (ax.yaxis, n_rows, y_labels, show_y, h_pt / n_rows, False),
    ):
        if labels is not None:
            step, size, rot = _matrix_axis_ticks(n, slot, labels, is_x, min_size)
            idx = list(range(0, n, step))
            shown = [labels[i] for i in idx] if show else []
            axis.set_ticks(idx, labels=shown if show else [""] * len(idx), fontsize=size)
            if is_x and show:
                rotate = rot
        else:  # positions 0 .. n-1: as many as the axis holds readably
            size = max(_FONT_SIZES["xtick.labelsize"], min_size)
            need = (_label_width_pt(str(n - 1), size) + 0.8 * size) if is_x else 1.4 * size
            if n <= 20 and slot >= need:
                axis.set_ticks(range(n))
            else:
                fit = int(slot * n // need)
                axis.set_major_locator(MaxNLocator(nbins=max(1, min(8, fit - 1)), integer=True))
            axis.set_tick_params(labelsize=size)
            if not show:
                axis.set_ticklabels([])
    ax.tick_params(length=2, pad=2)
    _orient_xticklabels(ax, rotate)


ANNOTATION_SIZE = 9.0  # points: the size of values written in heatmap cells, when they fit


class _CellText(mtext.Text):
    """A value written in a heatmap cell. Its font size is fitted to the cell at draw time, when
    the layout (constrained layout, colorbars, the figure's final size) is known: the course's
    size, smaller if the cell is small, but never below what is readable where the figure is
    shown (``_min_text_pt``: a digit MIN_TEXT_PX pixels tall in a notebook 800 px wide). When
    the cells are too small for that, no value is written (``dropped``): a colour is better
    than a number nobody can read."""

    def __init__(self, x, y, text, n_rows, n_cols, longest_em, **kw):
        super().__init__(x, y, text, ha="center", va="center", **kw)
        self._grid = (n_rows, n_cols, longest_em)
        self.dropped = False

    def fitted_size(self, renderer=None):
        """(font size in points, readable minimum in points) for this cell, as laid out now."""
        n_rows, n_cols, longest_em = self._grid
        fig = _root_figure(self.axes)
        bbox = self.axes.get_window_extent(renderer)
        to_pt = 72.0 / fig.dpi
        cell_w, cell_h = bbox.width * to_pt / n_cols, bbox.height * to_pt / n_rows
        lowest = _min_text_pt(fig)
        fit = min(cell_h / 1.45, 0.86 * cell_w / max(longest_em, 1e-6))
        return min(fit, max(ANNOTATION_SIZE, lowest)), lowest

    def draw(self, renderer):
        if self.axes is not None and self.get_visible():
            size, lowest = self.fitted_size(renderer)
            self.dropped = size < lowest - 1e-9
            if self.dropped:
                return
            if size != self.get_fontsize():  # changes on the first draw or after a resize only
                self.set_fontsize(size)
                self.stale = False
        super().draw(renderer)


def _annotate_cells(ax, data, cmap, norm, fmt, skip=None):
    n_rows, n_cols = data.shape
    texts = [[format(v, fmt) if np.isfinite(v) else str(v) for v in row] for row in data]
    unique = {t for row in texts for t in row}
    longest_em = max(_text_width_em(t) for t in unique)
    for i in range(n_rows):
        for j in range(n_cols):
            if skip is not None and skip[i, j]:
                continue
            v = data[i, j]
            color = "black"
            if np.isfinite(v):
                r, g, b, _ = cmap(norm(v))
                color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            cell = _CellText(j, i, texts[i][j], n_rows, n_cols, longest_em, color=color,
                             fontsize=ANNOTATION_SIZE)
            ax.add_artist(cell)


def _annotation_cell_in(values, fmt, size=ANNOTATION_SIZE):
    """(width, height) in inches of a heatmap cell that holds the values written at ``size``."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    samples = {format(v, fmt) for v in (finite.min(), finite.max())} if finite.size else {"nan"}
    width_em = max(_text_width_em(t) for t in samples)
    return size * width_em / 0.86 / 72, 1.45 * size / 72


MASKED_HATCH = "////"
MASKED_HATCH_COLOR = "#8c8c8c"


def _cells_path(cells):
    """One compound path covering the True cells of a (rows, cols) bool array (a rectangle per
    horizontal run), so a large mask is a single artist."""
    verts, codes = [], []
    for i, row in enumerate(cells):
        j, n = 0, len(row)
        while j < n:
            if not row[j]:
                j += 1
                continue
            start = j
            while j < n and row[j]:
                j += 1
            x0, x1, y0, y1 = start - 0.5, j - 0.5, i - 0.5, i + 0.5
            verts += [(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)]
            codes += [MplPath.MOVETO, MplPath.LINETO, MplPath.LINETO, MplPath.LINETO,
                      MplPath.CLOSEPOLY]
    return MplPath(verts, codes) if verts else None


def _masked_legend_handle():
    return Patch(facecolor=MASKED_COLOR, edgecolor=MASKED_HATCH_COLOR, linewidth=0.0,
                 hatch=MASKED_HATCH, label="masked (may not attend)")


def _draw_masked_cells(ax, data, mask):
    """Masked cells (mask False) in their own look, never a colour of the colormap: light grey
    with grey hatching. A masked cell that holds a non-zero weight (a bug) keeps its colour under
    the hatching. Returns the cells whose value is hidden (not to be annotated)."""
    masked = ~mask
    hidden = masked & np.isfinite(data) & (np.abs(data) <= 1e-6)
    if hidden.any():
        rgba = np.zeros(data.shape + (4,))
        rgba[hidden] = mpl.colors.to_rgba(MASKED_COLOR)
        ax.imshow(rgba, aspect="auto", interpolation="nearest", zorder=0.6)
    path = _cells_path(masked)
    if path is not None:
        ax.add_patch(PathPatch(path, facecolor="none", edgecolor=MASKED_HATCH_COLOR,
                               linewidth=0.0, hatch=MASKED_HATCH, zorder=0.8))
    return hidden


def _mask_for(mask, shape, func, what):
    """A bool mask (True = may attend) broadcast to ``shape``, or None."""
    if mask is None:
        return None
    m = _bool_mask(mask, func)
    while m.ndim > len(shape) and m.shape[0] == 1:
        m = m[0]
    try:
        return np.broadcast_to(m, shape)
    except ValueError:
        raise ValueError(
            f"{func}: mask has shape {_fmt_shape(m.shape)}, which does not broadcast to {what} "
            f"{_fmt_shape(shape)}; give a bool mask (True = may attend) of shape (S_q, S_k) "
            "or one that broadcasts to it, e.g. (1, S_k) for padding"
        ) from None


def _check_masked_weights(data, mask, func):
    if mask is None:
        return
    leak = ~mask & np.isfinite(data) & (np.abs(data) > 1e-6)
    if leak.any():
        _warn(
            f"{func}: {int(leak.sum())} masked cell(s) hold a non-zero weight "
            f"(largest {np.abs(data[leak]).max():.3g}); a masked key should get weight 0. "
            "They are drawn in colour under the hatching."
        )


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
    mask=None,
):
    im = ax.imshow(data, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    for spine in ax.spines.values():
        spine.set_visible(False)
    _set_matrix_ticks(ax, data.shape[0], data.shape[1], x_labels, y_labels, show_x, show_y)
    hidden = _draw_masked_cells(ax, data, mask) if mask is not None else None
    if xlabel:
        ax.set_xlabel(_text(xlabel))
    if ylabel:
        ax.set_ylabel(_text(ylabel))
    if title:
        ax.set_title(_text(title))
    if annotate:
        _annotate_cells(ax, data, cmap, norm, fmt, skip=hidden)
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


def _matrix_figsize(n_rows, n_cols, extra_w=1.9, cell=None):
    """A heatmap figure's size: 0.42 in per cell (more when ``cell`` = (w, h) in inches, the size
    that holds its written values), never wider than the notebook shows unscaled
    (SHOWN_WIDTH_IN), at most 9 in tall."""
    cw, ch = (0.42, 0.42) if cell is None else (max(0.42, cell[0]), max(0.42, cell[1]))
    w = float(np.clip(cw * n_cols + extra_w, 3.4, SHOWN_WIDTH_IN))
    h = float(np.clip(ch * n_rows + 1.1, 2.2, 9.0))
    return w, h


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
