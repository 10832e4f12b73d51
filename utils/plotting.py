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
  listed in the legend (``reference=``; names such as "theory: d_k" are recognised);
- colours go by group, and a group keeps its colour in every figure of the session ("scaled"
  is one colour in the whole notebook; ``groups=``, ``series_color``, ``set_colors``);
- tick labels sit on positional ticks (repeated tokens such as "<pad>" each keep their own), and
  crowded x labels follow one rule in every function: all rotated by ``XTICK_ROTATION`` degrees;
- masked cells of an attention map (``mask=``) are grey and hatched, never a colormap colour;
- text is cleaned before it is drawn: no emoji, and characters that no installed font can draw
  are left out (Chinese renders through a CJK font when one is installed), so matplotlib never
  prints a "Glyph ... missing" warning.

Works headless (any backend, e.g. ``MPLBACKEND=Agg``); this module never selects a backend.
"""
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
import matplotlib.text as mtext
import numpy as np
import seaborn as sns
import torch
from cycler import cycler
from matplotlib.colors import BoundaryNorm, ListedColormap, Normalize
from matplotlib.patches import Patch, PathPatch
from matplotlib.path import Path as MplPath
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

_PALETTE = [c for c in sns.color_palette("colorblind").as_hex() if c != "#949494"]  # no grey
REFERENCE_COLOR = "#3b3b3b"  # theory / reference lines that belong to no group: dark grey
REFERENCE_DASHES = (0, (5.0, 2.5))  # dashed, with gaps through which the line below shows
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


def _series_styles(names, func, reference=None, groups=None):
    """name -> dict(color, reference, group) for the series of one plot.

    reference: None finds theory / reference series by name ("theory: d_k", "uniform: 1/32",
      see _REFERENCE_WORDS); or the exact names (an iterable of str; () for none).
    groups: None, or a dict name -> group. Series of one group share a colour (a band's two
      edges, a measurement and its theory). By default "group: detail" names are grouped by
      the text before ": " and every other name is its own group. Theory / reference series
      that no ``groups`` entry puts in a group are drawn in dark grey.
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
    styles, used = {}, {}
    for n in names:
        explicit = n in groups
        group = groups.get(n, _auto_group(n))
        is_ref = n in ref
        if is_ref and not explicit:
            color = REFERENCE_COLOR
        else:
            color = series_color(group)
            # a group beyond the palette may repeat a colour: never twice in one figure
            if used.get(color, group) != group:
                free = [c for c in _PALETTE if c not in used]
                color = free[0] if free else color
            used[color] = group
            if is_ref:
                color = _darker(color)  # visible on top of its own group's measured line
        styles[n] = {"color": color, "reference": is_ref, "group": group}
    return styles


def _plot_series(ax, x, y, label, style, marker, markers=True):
    """One curve: measured series solid with markers; reference series dashed, no markers, on
    top of the measured ones (zorder), with its own legend entry."""
    if style["reference"]:
        return ax.plot(
            x, y, color=style["color"], linestyle=REFERENCE_DASHES, linewidth=1.4,
            marker=None, zorder=3.0, label=label,
        )[0]
    return ax.plot(
        x, y, color=style["color"], marker=marker if markers else None, markersize=4.5,
        linewidth=1.6, zorder=2.0, label=label,
    )[0]


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


XTICK_ROTATION = 45  # the one angle of rotated x tick labels, in every function


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


def _xticks_fit_flat(texts, gaps_pt, size) -> bool:
    widths = [_label_width_pt(t, size) for t in texts]
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


def _matrix_axis_ticks(n, slot_pt, labels, x: bool):
    """Which labels a matrix axis shows (step) and at what size, so that none touch: every label
    up to ~40 tokens at readable sizes; beyond that every step-th label. Returns (step, size,
    rotate)."""
    step = max(1, math.ceil(n / 64))
    while True:
        shown = [labels[i] for i in range(0, n, step)]
        size = _tick_fontsize(len(shown))
        gap = slot_pt * step
        if not x:
            if gap >= 1.25 * size or step >= n:
                return step, size, False
        else:
            if _xticks_fit_flat(shown, [gap] * len(shown), size):
                return step, size, False
            # rotated labels are parallel lines: their spacing across the text must exceed a line
            if gap * math.sin(math.radians(XTICK_ROTATION)) >= 1.3 * size or step >= n:
                return step, size, True
        step += 1


def _set_matrix_ticks(ax, n_rows, n_cols, x_labels, y_labels, show_x=True, show_y=True):
    """Positional ticks (one per row / column) carrying the given labels: repeated tokens such as
    "<pad>" each keep their own tick and label."""
    w_in, h_in = _axes_size_in(ax)
    w_pt, h_pt = 0.85 * w_in * 72, 0.85 * h_in * 72  # before layout: be conservative
    rotate = False
    for axis, n, labels, show, slot, is_x in (
        (ax.xaxis, n_cols, x_labels, show_x, w_pt / n_cols, True),
        (ax.yaxis, n_rows, y_labels, show_y, h_pt / n_rows, False),
    ):
        if labels is not None:
            step, size, rot = _matrix_axis_ticks(n, slot, labels, is_x)
            idx = list(range(0, n, step))
            shown = [labels[i] for i in idx] if show else []
            axis.set_ticks(idx, labels=shown if show else [""] * len(idx), fontsize=size)
            if is_x and show:
                rotate = rot
        else:
            if n <= 20:
                axis.set_ticks(range(n))
            else:
                axis.set_major_locator(MaxNLocator(nbins=8, integer=True))
            if not show:
                axis.set_ticklabels([])
    ax.tick_params(length=2, pad=2)
    _orient_xticklabels(ax, rotate)


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


def _annotate_cells(ax, data, cmap, norm, fmt, skip=None):
    n_rows, n_cols = data.shape
    texts = [[format(v, fmt) if np.isfinite(v) else str(v) for v in row] for row in data]
    longest = max(len(t) for row in texts for t in row)
    for i in range(n_rows):
        for j in range(n_cols):
            if skip is not None and skip[i, j]:
                continue
            v = data[i, j]
            color = "black"
            if np.isfinite(v):
                r, g, b, _ = cmap(norm(v))
                color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            cell = _CellText(j, i, texts[i][j], n_rows, n_cols, longest, color=color, fontsize=9)
            ax.add_artist(cell)


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
    mask=None,
):
    """Heatmap of one attention map: rows are queries, columns are keys.

    Shapes:
        weights   (S_q, S_k)   one batch element and one head, e.g. ``weights[0, 0]``
        x_labels  S_k labels   one per key (a str gives one label per character)
        y_labels  S_q labels   one per query

    ``annotate=None`` writes each value in its cell when the matrix is at most 10 x 10.
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
            xlabel=xlabel, ylabel=ylabel, title=title, mask=m,
        )
        cbar = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.03)
        cbar.set_label(_text(cbar_label))
        cbar.outline.set_visible(False)
        if m is not None and not m.all():
            _mask_legend(fig, cbar.ax, owned)
    return _finish(fig, owned)


def _mask_legend(fig, cbar_ax, owned):
    """The legend entry of masked cells: under the figure when we own it; on a given ax, a short
    entry on top of the colorbar (the only free place that we know of in someone else's
    figure)."""
    handle = _masked_legend_handle()
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
    mask=None,
):
    """All heads of one example in a grid, on one shared colour scale (one colorbar).

    Shapes:
        weights   (H, S_q, S_k), or (1, H, S_q, S_k) for a batch of one
        x_labels  S_k labels,  y_labels  S_q labels (shared by every panel)
        titles    H titles, default "head 0", "head 1", ...

    ``vmin=0.0`` / ``vmax=None`` (the max over all heads) set the shared scale.
    ``mask`` (bool, True = may attend; (S_q, S_k), (H, S_q, S_k) or anything that broadcasts
    to them) draws masked cells hatched grey in every panel, as in ``plot_attention``, with one
    legend entry for the figure.
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
    if isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)) or ncols < 1:
        raise ValueError(f"{func}: ncols must be a positive int; got {ncols!r}")
    m = _mask_for(mask, arr.shape, func, "weights (H, S_q, S_k)")
    _report_nonfinite(arr, func, "weights")
    _check_masked_weights(arr, m, func)
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
            _mask_legend(fig, None, True)
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
            fig.suptitle(_text(title))
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
        ax.set_xlabel(_text(xlabel))
        ax.set_ylabel(_text(ylabel))
        if title:
            ax.set_title(_text(title))
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


def _bytes_unit(series):
    """The binary unit in which the largest value of a dict of byte counts reads best."""
    finite = np.concatenate([v[np.isfinite(v)] for v in series.values()])
    top = float(np.abs(finite).max()) if finite.size else 0.0
    for unit, factor in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if top >= factor:
            return unit, factor
    return "bytes", 1.0


def _cost_panel(ax, xs, ser, styles, markers_of, slopes, xlabel, ylabel):
    for name, y in ser.items():
        label = _text(name)
        if slopes:
            s = _loglog_slope(xs, y)
            label = f"{label} (slope {s:.1f})" if np.isfinite(s) else f"{label} (slope n/a)"
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
        _cost_panel(ax_t, xs, ser, styles, markers_of, slopes, xlabel, ylabel)
        _cost_panel(ax_m, xs, mem, styles, markers_of, slopes, xlabel, memory_ylabel)
        ax_t.set_title("time")
        ax_m.set_title("peak memory")
        for a in (ax_t, ax_m):
            a.legend(loc="best")
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


def plot_masks(masks, tick_every=None, *, figsize=None):
    """Several bool masks side by side, one panel each, in the colours of ``plot_mask``.

    Shapes:
        masks       {title: (S_q, S_k) bool}, one panel per entry, left to right
        tick_every  label every k-th position (None: every position)

    Returns the ``Figure``.
    """
    func = "plot_masks"
    if not isinstance(masks, Mapping) or not masks:
        raise ValueError(f"{func}: masks must be a non-empty dict {{title: (S_q, S_k) bool mask}}")
    with set_style():
        fig, axes = _new_figure(figsize or (4.5 * len(masks), 4.4), 1, len(masks))
        for ax, (name, m) in zip(axes[0], masks.items()):
            S_q, S_k = _matrix(_bool_mask(m, func), func, "mask").shape
            plot_mask(m, title=name, ax=ax)
            if tick_every:  # positions 0, k, 2k, ... on both axes
                ax.set_xticks(range(0, S_k, tick_every), [str(i) for i in range(0, S_k, tick_every)])
                ax.set_yticks(range(0, S_q, tick_every), [str(i) for i in range(0, S_q, tick_every)])
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


def panels(ncols=2, nrows=1, *, figsize=None, title=None):
    """An empty figure of ``nrows × ncols`` panels in the course's style, to fill with the
    ``plot_*`` helpers through their ``ax=`` argument; make ``fig`` the cell's last expression.

    Returns ``(fig, axes)``, ``axes`` a flat list (row by row). The figure is not kept by pyplot, so
    a notebook shows it once.
    """
    if int(ncols) < 1 or int(nrows) < 1:
        raise ValueError(f"panels: ncols and nrows must be >= 1; got {ncols}, {nrows}")
    with set_style():
        fig, axes = _new_figure(figsize or (5.2 * ncols, 3.8 * nrows), int(nrows), int(ncols))
        if title:
            fig.suptitle(_text(title))
    return _finish(fig, True), [ax for row in axes for ax in row]
