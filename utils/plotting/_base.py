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
REFERENCE_COLOR = "#111111"  # theory / reference lines: near-black, a colour no measured series has
# Reference lines in one figure are told apart by their dashes: long, short, dash-dot, ...
REFERENCE_DASH_STYLES = ((0, (5.0, 2.5)), (0, (2.6, 1.4)), (0, (7.0, 2.0, 2.0, 2.0)), (0, (10.0, 3.0)))
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
    styles, used, n_ref = {}, {}, 0
    for n in names:
        group = groups.get(n, _auto_group(n))
        is_ref = n in ref
        if is_ref:
            # a colour of its own (never a measured series' colour), its own dashes, drawn above
            color = REFERENCE_COLOR
            dashes = REFERENCE_DASH_STYLES[n_ref % len(REFERENCE_DASH_STYLES)]
            n_ref += 1
        else:
            color = series_color(group)
            # a group beyond the palette may repeat a colour: never twice in one figure
            if used.get(color, group) != group:
                free = [c for c in _PALETTE if c not in used]
                color = free[0] if free else color
            used[color] = group
            dashes = None
        styles[n] = {"color": color, "reference": is_ref, "group": group, "dashes": dashes}
    return styles


def _plot_series(ax, x, y, label, style, marker, markers=True):
    """One curve: measured series solid with markers; reference series near-black and dashed,
    no markers, on top of the measured ones (zorder) with a thin white halo, so that a theory
    line lying exactly on its measurement stays visible; each with its own legend entry."""
    if style["reference"]:
        return ax.plot(
            x, y, color=style["color"], linestyle=style.get("dashes") or REFERENCE_DASHES, linewidth=1.5,
            marker=None, zorder=3.0, label=label,
            path_effects=[patheffects.withStroke(linewidth=3.2, foreground="white", alpha=0.85)],
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


def _axes_size_in(ax):
    fig = _root_figure(ax)
    pos = ax.get_position()
    w, h = fig.get_size_inches()
    return max(pos.width * w, 0.1), max(pos.height * h, 0.1)


def _tick_fontsize(n: int) -> float:
    base = _FONT_SIZES["xtick.labelsize"]
    return base if n <= 24 else max(5.0, base * 24 / n)


XTICK_ROTATION = 45  # the one angle of rotated x tick labels, in every function
ALL_LABELS = 40  # a token axis up to this many tokens labels every one of them
MIN_TICK_SIZE = 5.0  # points: the smallest tick label drawn


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
    up to ALL_LABELS tokens (the font shrinks to fit, down to MIN_TICK_SIZE points, x labels
    rotate when they do not fit flat); beyond that every step-th label. Returns (step, size,
    rotate)."""
    if n <= ALL_LABELS:
        base = _tick_fontsize(n)
        size = base
        while True:
            if not x:
                if slot_pt >= 1.2 * size or size <= MIN_TICK_SIZE:
                    return 1, size, False
            else:
                if _xticks_fit_flat(labels, [slot_pt] * n, size):
                    return 1, size, False
                if slot_pt * math.sin(math.radians(XTICK_ROTATION)) >= 1.2 * size or size <= MIN_TICK_SIZE:
                    return 1, size, True
            size = max(MIN_TICK_SIZE, size - 0.5)
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
