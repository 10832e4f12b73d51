"""Tests of ``utils.plotting``: every helper draws headless, returns a Figure with the expected
axes, titles and labels, takes tensors (requires_grad too), arrays and nested lists, refuses bad
shapes and label lists with a helpful ValueError, and leaves neither open figures nor changed
rcParams behind. The "fair plots" section checks what a learner sees, on rendered pixels and
label geometry: reference lines visible on top, colours by group, no colliding labels, masked
cells unlike small weights, time and memory side by side, no missing-glyph warnings.
"""
import ast
import inspect
import io
import math
import unicodedata
import warnings

import matplotlib as mpl
import matplotlib.pyplot as plt
import matplotlib.text as mtext
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import utils.plotting as P

TOKENS = ["the", "cat", "sat", "on"]


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test: seeded, colours from a fresh start, and leaves no figure open in pyplot and no
    rcParams changed."""
    torch.manual_seed(0)
    np.random.seed(0)
    P.reset_colors()
    plt.close("all")
    before = dict(mpl.rcParams)
    yield
    open_figs = plt.get_fignums()
    plt.close("all")
    assert open_figs == [], f"figures left open in pyplot: {open_figs}"
    changed = {k for k in before if k != "backend" and mpl.rcParams[k] != before[k]}
    assert not changed, f"rcParams changed: {sorted(changed)}"


def weights(*shape, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g), dim=-1).requires_grad_(grad)


def tick_texts(axis):
    return [t.get_text() for t in axis.get_ticklabels()]


def rendered(fig):
    """Draw the figure with Agg and return (RGB image as an array, renderer)."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(int), canvas.get_renderer()


def pixel(fig, img, ax, x, y):
    """The RGB colour drawn at data point (x, y) of ax."""
    px, py = ax.transData.transform((x, y))
    return img[int(round(img.shape[0] - py)), int(round(px))]


def close_to(rgb, color, tol=40):
    return np.abs(rgb - np.array(mpl.colors.to_rgb(color)) * 255).max() <= tol


def png_bytes(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=30)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------
# plot_attention
# ----------------------------------------------------------------------------------------------


def test_attention_figure_axes_labels_and_annotations():
    w = weights(4, 4, grad=True) * 1.0  # a non-leaf tensor that requires grad
    fig = P.plot_attention(w, TOKENS, TOKENS, title="self-attention")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2  # heatmap + colorbar
    ax = fig.axes[0]
    assert ax.get_title() == "self-attention"
    assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert tick_texts(ax.xaxis) == TOKENS and tick_texts(ax.yaxis) == TOKENS
    assert fig.axes[1].get_ylabel() == "weight"
    # 4 x 4 <= 10 x 10: every value written in its cell, to 2 decimals
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 16 and texts[0] == f"{w[0, 0].item():.2f}"
    # rows are queries, columns keys: the image is the matrix itself
    np.testing.assert_allclose(ax.images[0].get_array(), w.detach().numpy(), rtol=1e-6)


def test_attention_accepts_arrays_lists_and_any_dtype():
    for w in (
        np.full((3, 5), 0.2),
        [[0.5, 0.5], [1.0, 0.0]],
        weights(3, 3).to(torch.bfloat16),
        weights(3, 3).half().requires_grad_(True),
        weights(3, 3).double(),
    ):
        fig = P.plot_attention(w)
        assert isinstance(fig, Figure) and len(fig.axes) == 2


def test_attention_annotate_automatic_threshold_and_override():
    assert len(P.plot_attention(weights(10, 10)).axes[0].texts) == 100
    assert len(P.plot_attention(weights(11, 10)).axes[0].texts) == 0
    assert len(P.plot_attention(weights(11, 10), annotate=True).axes[0].texts) == 110
    assert len(P.plot_attention(weights(3, 3), annotate=False).axes[0].texts) == 0


def test_attention_colour_scale():
    img = P.plot_attention(weights(3, 3)).axes[0].images[0]
    assert img.norm.vmin == 0.0
    assert img.norm.vmax == pytest.approx(weights(3, 3).max().item(), rel=1e-6)
    img = P.plot_attention(weights(3, 3), vmax=1.0).axes[0].images[0]
    assert (img.norm.vmin, img.norm.vmax) == (0.0, 1.0)
    with pytest.warns(UserWarning, match="below vmin") as record:
        P.plot_attention(torch.tensor([[-1.5, 2.0], [0.5, -0.25]]))  # raw scores, default vmin=0
    assert record[0].filename == __file__  # the warning points at the learner's line
    img = P.plot_attention(torch.tensor([[-2.0, 1.0]]), vmin=None).axes[0].images[0]
    assert img.norm.vmin == -2.0


def test_attention_nan_is_drawn_and_reported():
    w = weights(3, 3)
    w[2] = float("nan")  # a fully masked row done wrong
    with pytest.warns(UserWarning, match="3 NaN"):
        fig = P.plot_attention(w)
    assert "nan" in [t.get_text() for t in fig.axes[0].texts]


def test_attention_on_a_given_ax_returns_its_figure_and_keeps_it_open():
    fig, axes = plt.subplots(1, 2)
    try:
        out = P.plot_attention(weights(3, 4), ax=axes[1], title="right")
        assert out is fig
        assert fig.number in plt.get_fignums()  # the caller's figure is not closed
        assert axes[1].get_title() == "right"
        assert len(fig.axes) == 3  # the two axes + the colorbar
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    "shape, hints",
    [
        ((2, 3, 4), ["2-D weight matrix (S_q, S_k)", "got shape (2, 3, 4)", "weights[0]",
                     "plot_heads"]),
        ((2, 3, 4, 4), ["got shape (2, 3, 4, 4)", "one batch element and head", "weights[0, 0]"]),
        ((5,), ["got shape (5,)", "(1, 5)", "weights[None]"]),
        ((), ["got shape ()"]),
        ((0, 3), ["empty"]),
    ],
)
def test_attention_bad_shape_says_what_to_do(shape, hints):
    with pytest.raises(ValueError) as err:
        P.plot_attention(torch.rand(shape, requires_grad=True))
    for hint in hints:
        assert hint in str(err.value)


def test_attention_label_lengths_must_match():
    with pytest.raises(ValueError, match=r"x_labels has 3 labels but there are 4 keys \(S_k = 4\)"):
        P.plot_attention(weights(2, 4), x_labels=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"y_labels has 4 labels but there are 2 queries"):
        P.plot_attention(weights(2, 4), y_labels=TOKENS)


def test_attention_bad_values_are_value_errors():
    with pytest.raises(ValueError, match="different lengths"):
        P.plot_attention([[0.5, 0.5], [1.0]])
    with pytest.raises(ValueError, match="numbers"):
        P.plot_attention([["a", "b"], ["c", "d"]])
    with pytest.raises(ValueError, match="complex"):
        P.plot_attention(torch.randn(2, 2, dtype=torch.complex64))


def test_labels_str_is_characters_and_special_tokens_are_visible():
    fig = P.plot_attention(weights(4, 4), x_labels="a b$", y_labels=[1, 2, 3, "\n"])
    ax = fig.axes[0]
    assert tick_texts(ax.xaxis) == ["a", "␣", "b", r"\$"]  # "$" would start mathtext
    assert tick_texts(ax.yaxis) == ["1", "2", "3", "\\n"]
    png_bytes(fig)  # and it renders


# ----------------------------------------------------------------------------------------------
# plot_heads
# ----------------------------------------------------------------------------------------------


def test_heads_grid_titles_and_shared_scale():
    w = weights(1, 6, 4, 4, grad=True)
    fig = P.plot_heads(w, TOKENS, TOKENS, suptitle="layer 0")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 6 + 1  # 6 panels (2 empty grid slots removed) + one colorbar
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == [f"head {h}" for h in range(6)]
    assert fig.get_suptitle() == "layer 0"
    clims = {ax.images[0].get_clim() for ax in panels}
    assert len(clims) == 1  # one colour scale for every head
    assert clims.pop() == pytest.approx((0.0, w.max().item()))
    assert panels[0].get_ylabel() == "query" and panels[-1].get_xlabel() == "key"
    assert tick_texts(panels[-1].xaxis) == TOKENS


def test_heads_three_dims_custom_titles_and_ncols():
    fig = P.plot_heads(np.random.rand(3, 2, 5), titles=["a", "b", "c"], ncols=2)
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["a", "b", "c"]
    assert len(fig.axes) == 4
    assert len(panels[0].texts) == 0  # no annotations by default in a grid


@pytest.mark.parametrize(
    "shape, hints",
    [
        ((2, 4, 3, 3), ["B = 1", "got shape (2, 4, 3, 3)", "weights[0]"]),
        ((3, 3), ["(H, S_q, S_k)", "plot_attention"]),
        ((2, 2, 2, 2, 2), ["(H, S_q, S_k)", "got shape (2, 2, 2, 2, 2)"]),
    ],
)
def test_heads_bad_shape(shape, hints):
    with pytest.raises(ValueError) as err:
        P.plot_heads(torch.rand(*shape))
    for hint in hints:
        assert hint in str(err.value)


def test_heads_label_and_title_lengths_must_match():
    with pytest.raises(ValueError, match="x_labels has 4 labels but there are 3 keys"):
        P.plot_heads(weights(2, 3, 3), x_labels=TOKENS)
    with pytest.raises(ValueError, match="titles has 1 entries but there are H = 2 heads"):
        P.plot_heads(weights(2, 3, 3), titles=["only one"])


# ----------------------------------------------------------------------------------------------
# plot_mask
# ----------------------------------------------------------------------------------------------


def test_mask_two_colours_with_a_legend():
    mask = torch.ones(3, 5, dtype=torch.bool).tril(diagonal=2)
    fig = P.plot_mask(mask, x_labels=list("abcde"), title="causal")
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert ax.get_title() == "causal"
    assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("may attend" in t for t in legend) and any("masked" in t for t in legend)
    img = ax.images[0]
    np.testing.assert_array_equal(img.get_array(), mask.numpy().astype(float))
    colors = {tuple(img.cmap(img.norm(v))) for v in (0.0, 1.0)}
    assert len(colors) == 2
    assert mpl.colors.to_hex(img.cmap(img.norm(1.0))) == P.MAY_ATTEND_COLOR


def test_mask_legend_words_for_a_map_that_is_not_a_mask():
    fig = P.plot_mask(torch.eye(3, dtype=torch.bool), legend=("reads (True)", "does not read (False)"))
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["reads (True)", "does not read (False)"]
    with pytest.raises(ValueError, match="legend must be two strings"):
        P.plot_mask(torch.eye(3, dtype=torch.bool), legend=("only one",))


def test_mask_accepts_0_1_and_refuses_additive_masks():
    assert len(P.plot_mask([[1, 0], [1, 1]]).axes) == 1
    additive = torch.zeros(3, 3).masked_fill(torch.ones(3, 3).triu(1).bool(), float("-inf"))
    with pytest.raises(ValueError, match=r"additive mask.*mask == 0"):
        P.plot_mask(additive)
    with pytest.raises(ValueError, match="True = may attend"):
        P.plot_mask(torch.rand(3, 3))


def test_mask_bad_shape_and_labels():
    with pytest.raises(ValueError, match=r"got shape \(2, 1, 4\).*mask\[0\]"):
        P.plot_mask(torch.ones(2, 1, 4, dtype=torch.bool))  # a padding mask (B, 1, L)
    with pytest.raises(ValueError, match="y_labels has 2 labels but there are 1 query"):
        P.plot_mask(torch.ones(1, 4, dtype=torch.bool), y_labels=["a", "b"])


# ----------------------------------------------------------------------------------------------
# plot_compare
# ----------------------------------------------------------------------------------------------


def test_compare_three_panels_and_max_difference():
    expected = weights(4, 4)
    got = expected.clone().requires_grad_(True) * 1.0
    with torch.no_grad():
        got[2, 1] += 0.5
    fig = P.plot_compare(expected, got, TOKENS, TOKENS, title="check")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 5  # 3 panels + a shared colorbar + the difference colorbar
    panels = [ax for ax in fig.axes if ax.images]
    titles = [ax.get_title() for ax in panels]
    assert titles[:2] == ["expected", "yours"]
    assert "|yours − expected|" in titles[2] and "max 0.5 at [2, 1]" in titles[2]
    assert fig.get_suptitle() == "check"
    assert panels[0].images[0].get_clim() == panels[1].images[0].get_clim()
    np.testing.assert_allclose(panels[2].images[0].get_array()[2, 1], 0.5, rtol=1e-6)


def test_compare_identical_signed_and_1d():
    fig = P.plot_compare(np.eye(3), np.eye(3))
    assert "max 0 (identical)" in [ax for ax in fig.axes if ax.images][2].get_title()
    fig = P.plot_compare([0.25, 0.75], [0.5, 0.625], signed=True)
    diff_ax = [ax for ax in fig.axes if ax.images][2]
    assert "yours − expected" in diff_ax.get_title() and "max 0.25 at [0]" in diff_ax.get_title()
    np.testing.assert_allclose(diff_ax.images[0].get_array(), [[0.25, -0.125]], atol=1e-12)
    assert diff_ax.images[0].get_clim() == (-0.25, 0.25)  # diverging map centred on zero


def test_compare_nan_mismatch_is_reported():
    got = np.eye(3)
    got[1] = np.nan
    with pytest.warns(UserWarning, match="NaN in one matrix"):
        fig = P.plot_compare(np.eye(3), got)
    assert "3 NaN mismatches" in [ax for ax in fig.axes if ax.images][2].get_title()


def test_compare_shapes_must_match():
    msg = r"expected has shape \(3, 4\) but got has shape \(4, 3\) \(got looks transposed\)"
    with pytest.raises(ValueError, match=msg):
        P.plot_compare(torch.rand(3, 4), torch.rand(4, 3))
    with pytest.raises(ValueError, match=r"expected\[0, 0\]"):
        P.plot_compare(torch.rand(2, 2, 3, 3), torch.rand(2, 2, 3, 3))
    with pytest.raises(ValueError, match="x_labels has 4 labels but there are 3 keys"):
        P.plot_compare(torch.rand(3, 3), torch.rand(3, 3), x_labels=TOKENS)


# ----------------------------------------------------------------------------------------------
# plot_lines, plot_cost, plot_histograms
# ----------------------------------------------------------------------------------------------


def test_lines_curves_labels_and_log_axes():
    d_k = [4, 16, 64, 256]
    grad_norms = [torch.tensor(float(d), requires_grad=True) * 2 for d in d_k]  # 0-d tensors
    series = {"unscaled": torch.tensor(d_k) * 1.0, "scaled": [1, 1, 1, 1], "grad": grad_norms}
    fig = P.plot_lines(d_k, series, xlabel="d_k", ylabel="Var(q·k)", title="variance",
                       logx=True, logy=True)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("d_k", "Var(q·k)", "variance")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["unscaled", "scaled", "grad"]
    assert len(ax.lines) == 3 and ax.lines[0].get_marker() == "o"
    assert tick_texts(ax.xaxis) == ["4", "16", "64", "256"]  # the sizes, not powers of ten
    fig = P.plot_lines([1, 2], {"a": [1, 2]}, markers=False)
    assert fig.axes[0].lines[0].get_marker() in ("None", None, "")


def test_lines_length_mismatch_and_type():
    with pytest.raises(ValueError, match=r"series 'scaled' has 3 values but x has 4"):
        P.plot_lines([1, 2, 3, 4], {"unscaled": [1, 2, 3, 4], "scaled": [1, 1, 1]})
    with pytest.raises(ValueError, match="dict name -> values"):
        P.plot_lines([1, 2], [1, 2])
    with pytest.raises(ValueError, match=r"x must be 1-D \(N,\); got shape \(2, 2\)"):
        P.plot_lines([[1, 2], [3, 4]], {"a": [1, 2]})


def test_cost_legend_has_the_fitted_loglog_slope():
    n = np.array([64, 128, 256, 512, 1024])
    costs = {
        "full": 3e-9 * n.astype(float) ** 2,
        "linear": torch.tensor(2e-7 * n),
        "cubic-ish": (n / 100.0) ** 3,
        "partial": [1e-3, 2e-3, 4e-3, None, None],  # sizes not measured -> gaps, fit on the rest
        "one point": [1.0, None, None, None, None],
    }
    fig = P.plot_cost(n, costs, title="time vs length")
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_ylabel() == "time (s)" and ax.get_xlabel() == "sequence length"
    assert ax.get_title() == "time vs length"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [
        "full (slope 2.0)", "linear (slope 1.0)", "cubic-ish (slope 3.0)", "partial (slope 1.0)",
        "one point (slope n/a)",
    ]
    legend = P.plot_cost(n, {"full": n**2}, slopes=False).axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["full"]


def test_cost_slope_is_least_squares_on_logs():
    rng = np.random.default_rng(0)
    n = np.array([32, 64, 128, 256, 512, 1024, 2048])
    y = 1e-8 * n**1.7 * np.exp(rng.normal(0, 0.1, n.size))
    expected = np.polyfit(np.log(n), np.log(y), 1)[0]
    assert P._loglog_slope(n.astype(float), y) == pytest.approx(expected, rel=1e-10)
    label = P.plot_cost(n, {"noisy": y}).axes[0].get_legend().get_texts()[0].get_text()
    assert label == f"noisy (slope {expected:.1f})"


def test_cost_bad_lengths():
    with pytest.raises(ValueError, match=r"series 'full' has 2 values but sizes has 3"):
        P.plot_cost([64, 128, 256], {"full": [1, 4]})


def test_histograms_overlaid_on_shared_bins():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2000, 64, generator=g), torch.randn(2000, 64, generator=g)
    dots = (q * k).sum(-1).requires_grad_(True)
    samples = {"unscaled": dots, "scaled": dots / 8}
    fig = P.plot_histograms(samples, bins=30, xlabel="q·k", title="q·k")
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("q·k", "count", "q·k")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == 2 and labels[0].startswith("unscaled") and "std" in labels[0]
    # one filled + one outline patch per sample, both samples on the same 30 bins
    assert len(ax.patches) == 4
    assert P.plot_histograms({"a": [1, 2, 3]}, density=True).axes[0].get_ylabel() == "density"


def test_histograms_bad_input():
    with pytest.raises(ValueError, match="dict name -> values"):
        P.plot_histograms(np.zeros(10))
    with pytest.warns(UserWarning, match="1 NaN/inf"):
        P.plot_histograms({"a": [1.0, float("nan"), 2.0]})
    with pytest.raises(ValueError, match="no finite values"), pytest.warns(UserWarning):
        P.plot_histograms({"a": [float("nan")]})


def test_curves_on_a_given_ax():
    fig, axes = plt.subplots(1, 3)
    try:
        assert P.plot_lines([1, 2], {"a": [1, 2]}, ax=axes[0]) is fig
        assert P.plot_cost([1, 2], {"a": [1, 4]}, ax=axes[1]) is fig
        assert P.plot_histograms({"a": [1, 2]}, ax=axes[2]) is fig
        assert fig.number in plt.get_fignums()
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------------------------
# Fair plots: reference lines, colours by group, labels, masked cells, memory, fonts
# ----------------------------------------------------------------------------------------------

D_KS = [2**i for i in range(10)]


def variance_plot(**kw):
    """Chapter 03's variance plot, as its solution notebook calls it (theory = measurement)."""
    return P.plot_lines(
        D_KS, {"theory: d_k": D_KS, "var(q·k), measured": D_KS,
               "theory: 1": [1.0] * len(D_KS), "var(q·k / √d_k), measured": [1.0] * len(D_KS)},
        xlabel="d_k", ylabel="variance", title="variance of the score vs d_k",
        logx=True, logy=True, **kw,
    )


def test_reference_lines_are_dashed_on_top_with_their_own_legend_entry():
    fig = variance_plot()
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.lines}
    for theory, measured in (("theory: d_k", "var(q·k), measured"),
                             ("theory: 1", "var(q·k / √d_k), measured")):
        t, m = lines[theory], lines[measured]
        assert t.get_linestyle() == "--" and m.get_linestyle() == "-"
        assert t.get_marker() in ("None", None, "") and m.get_marker() not in ("None", None, "")
        assert t.get_zorder() > m.get_zorder()  # drawn on top of the measured line
        assert t.get_color() != m.get_color()
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == list(lines)  # every series, in order
    styles = [h.get_linestyle() for h in legend.legend_handles]
    assert styles == ["--", "-", "--", "-"]


def test_reference_lines_stay_visible_where_they_coincide_with_the_measurement():
    """Today's bug: theory lines exactly under their measurement were invisible. Sample the pixels
    along each theory line, between the markers: the reference colour must show."""
    for kw in ({}, {"groups": {"theory: d_k": "unscaled", "var(q·k), measured": "unscaled",
                               "theory: 1": "scaled", "var(q·k / √d_k), measured": "scaled"}}):
        P.reset_colors()
        fig = variance_plot(**kw)
        ax = fig.axes[0]
        img, _ = rendered(fig)
        for name in ("theory: d_k", "theory: 1"):
            line = next(ln for ln in ax.lines if ln.get_label() == name)
            color = line.get_color()
            hits = 0
            for x0, x1 in zip(D_KS[:-1], D_KS[1:]):
                for f in np.linspace(0.15, 0.85, 15):
                    x = x0 * (x1 / x0) ** f
                    y = x if name == "theory: d_k" else 1.0
                    hits += close_to(pixel(fig, img, ax, x, y), color, tol=35)
            assert hits >= 0.3 * 15 * (len(D_KS) - 1), (name, kw, hits)


def test_reference_by_argument_or_off():
    fig = P.plot_lines([1, 2, 3], {"O(n)": [1, 2, 3], "measured": [1.1, 2, 2.9]},
                       reference=["O(n)"])
    ref, meas = fig.axes[0].lines
    assert ref.get_linestyle() == "--" and ref.get_color() == P.REFERENCE_COLOR
    assert meas.get_linestyle() == "-"
    fig = P.plot_lines([1, 2], {"theory": [1, 2], "x": [1, 2]}, reference=())
    assert [ln.get_linestyle() for ln in fig.axes[0].lines] == ["-", "-"]
    fig = P.plot_cost([64, 128, 256], {"full": [1, 4, 16], "theory: S²": [1, 4, 16],
                                       "reference": [1, 4, 16]})  # measured reference code
    assert [ln.get_linestyle() for ln in fig.axes[0].lines] == ["-", "--", "-"]
    with pytest.raises(ValueError, match=r"reference names \['nope'\] are not series"):
        P.plot_lines([1, 2], {"a": [1, 2]}, reference=["nope"])


def test_band_edges_share_a_colour_and_groups_differ():
    series = {f"{g}: {p} percentile": [1, 2]
              for g in ("unscaled", "scaled") for p in ("90th", "10th")}
    lines = P.plot_lines([1, 2], series).axes[0].lines
    colors = [ln.get_color() for ln in lines]
    assert colors[0] == colors[1] and colors[2] == colors[3] and colors[0] != colors[2]
    assert lines[0].get_marker() != lines[1].get_marker()  # the legend still tells them apart


def test_a_group_keeps_its_colour_across_figures_and_functions():
    c1 = {ln.get_label(): ln.get_color()
          for ln in P.plot_lines([1, 2], {"unscaled": [1, 2], "scaled": [1, 1]}).axes[0].lines}
    # other figures, other order, other functions, names mapped to the groups
    fig = P.plot_lines([1, 2], {"scaled": [1, 1], "var(q·k), measured": [1, 2]},
                       groups={"var(q·k), measured": "unscaled"})
    c2 = {ln.get_label(): ln.get_color() for ln in fig.axes[0].lines}
    assert c2["scaled"] == c1["scaled"] and c2["var(q·k), measured"] == c1["unscaled"]
    fig = P.plot_cost([64, 128], {"scaled": [1.0, 4.0]}, memory={"scaled": [1e6, 4e6]})
    assert {ln.get_color() for ax in fig.axes for ln in ax.lines} == {c1["scaled"]}
    hist = P.plot_histograms({"q·k/√d_k": [1, 2, 3]}, groups={"q·k/√d_k": "scaled"})
    patch = hist.axes[0].patches[-1]  # the outline
    assert mpl.colors.to_hex(patch.get_edgecolor()) == c1["scaled"]
    assert P.series_color("scaled") == c1["scaled"]


def test_reference_in_a_group_has_a_colour_of_its_own_and_colours_can_be_pinned():
    P.set_colors({"scaled": "#ff0000"})
    fig = P.plot_lines([1, 2], {"scaled": [1, 1], "theory: 1": [1, 1]},
                       groups={"theory: 1": "scaled"})
    meas, ref = fig.axes[0].lines
    assert meas.get_color() == "#ff0000"
    assert ref.get_linestyle() == "--" and ref.get_color() == P.REFERENCE_COLOR


def test_several_reference_lines_are_told_apart_by_their_dashes_and_sit_above():
    fig = P.plot_lines([1, 2, 4], {"a": [1, 2, 4], "theory: S": [1, 2, 4], "b": [1, 4, 16],
                                   "theory: S²": [1, 4, 16]}, logx=True, logy=True)
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines}
    t1, t2 = lines["theory: S"], lines["theory: S²"]
    assert t1.get_dashes() if hasattr(t1, "get_dashes") else True
    assert t1._dash_pattern != t2._dash_pattern
    assert min(t1.get_zorder(), t2.get_zorder()) > max(lines["a"].get_zorder(), lines["b"].get_zorder())
    assert t1.get_path_effects()  # a white halo: visible on top of a line of any colour


def test_first_colours_are_easy_to_tell_apart():
    P.reset_colors()
    fig = P.plot_lines([1, 2], {f"s{i}": [i, i + 1] for i in range(5)})
    rgb = [np.array(mpl.colors.to_rgb(ln.get_color())) for ln in fig.axes[0].lines]
    gaps = [np.abs(a - b).sum() for i, a in enumerate(rgb) for b in rgb[i + 1:]]
    assert min(gaps) > 0.4, gaps  # no two oranges or two pinks among the first five


def test_legend_sits_outside_and_widens_the_figure_instead_of_squeezing_the_axes():
    series = {"a very long name for a measured series": [1, 2, 3], "another long series name": [3, 2, 1]}
    alone = P.plot_lines([1, 2, 3], {"x": [1, 2, 3]})
    fig = P.plot_lines([1, 2, 3], series)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend_box = ax.get_legend().get_window_extent()
    assert legend_box.x0 >= ax.get_window_extent().x1  # right of the axes: covers no data
    assert fig.get_size_inches()[0] > alone.get_size_inches()[0] + 1.0
    alone.canvas.draw()
    w_alone = alone.axes[0].get_window_extent().width / alone.dpi
    assert ax.get_window_extent().width / fig.dpi > 0.85 * w_alone  # the axes keep their width


def test_plot_lines_on_a_given_ax_keeps_its_labels():
    fig = P.plot_lines([1, 2], {"a": [1, 2]}, xlabel="x", ylabel="y")
    P.plot_lines([1, 2], {"b": [2, 1]}, ax=fig.axes[0])  # a second call, no labels
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x", "y")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]


def test_a_token_axis_labels_every_token_it_can_hold_readably():
    """Every token is labelled while the axis holds the labels at a readable size where the
    figure is shown (MIN_TICK_SIZE in a figure shown unscaled): up to 40 on the y axis of
    plot_attention (the figure grows), and on x as many as 7.8 in allow; beyond that every k-th
    token, evenly, never a smaller font."""
    for n in (40,):
        tokens = [chr(ord("a") + i % 26) + str(i) for i in range(n)]
        w = torch.softmax(torch.randn(n, n), -1)
        fig = P.plot_attention(w, x_labels=tokens, y_labels=tokens)
        heads = P.plot_heads(torch.softmax(torch.randn(4, n, n), -1), x_labels=tokens, y_labels=tokens)
        assert tick_texts(fig.axes[0].yaxis) == tokens  # every token on y, up to 40
        if n <= 24:
            assert tick_texts(fig.axes[0].xaxis) == tokens  # 24 fit too; 40 do not
        if n <= 16:
            assert tick_texts(heads.axes[0].yaxis) == tokens
        for f in (fig, heads):
            assert f.get_size_inches()[0] <= P.SHOWN_WIDTH_IN + 1e-9
            for ax in [a for a in f.axes if a.images]:
                for axis in (ax.xaxis, ax.yaxis):
                    shown = [t for t in axis.get_ticklabels() if t.get_text()]
                    if not shown:
                        continue
                    locs = [int(round(v)) for v in axis.get_ticklocs()]
                    step = locs[1] - locs[0] if len(locs) > 1 else 1
                    assert locs == list(range(0, len(tokens), step))  # evenly, from the first
                    assert [t.get_text() for t in shown] == tokens[::step]
                    assert min(t.get_fontsize() for t in shown) >= P.MIN_TICK_SIZE
            _, renderer = rendered(f)
            for ax in [a for a in f.axes if a.images]:
                _assert_no_collisions(f, ax, renderer)


def test_no_two_groups_share_a_colour_in_one_figure():
    many = {f"g{i}": [1, 2] for i in range(14)}
    P.plot_lines([1, 2], many)  # the palette wraps around in the session registry...
    fig = P.plot_lines([1, 2], {"g0": [1, 2], "g9": [1, 2], "g10": [2, 3]})
    colors = [ln.get_color() for ln in fig.axes[0].lines]
    assert len(set(colors)) == 3  # ...but never inside one figure


def test_groups_must_name_series():
    with pytest.raises(ValueError, match=r"groups names \['b'\] are not series"):
        P.plot_lines([1, 2], {"a": [1, 2]}, groups={"b": "x"})
    with pytest.raises(ValueError, match="groups must be a dict"):
        P.plot_lines([1, 2], {"a": [1, 2]}, groups=["a"])


PADS = ["the", "dog", "chased", "the", "cat", "<pad>", "<pad>", "<pad>"]


@pytest.mark.parametrize(
    "draw",
    [
        lambda: P.plot_attention(weights(8, 8), PADS, PADS),
        lambda: P.plot_heads(weights(2, 8, 8), PADS, PADS),
        lambda: P.plot_mask(torch.ones(8, 8, dtype=torch.bool).tril(), PADS, PADS),
        lambda: P.plot_compare(weights(8, 8), weights(8, 8, seed=1), PADS, PADS),
    ],
    ids=["attention", "heads", "mask", "compare"],
)
def test_repeated_tokens_each_keep_their_own_tick(draw):
    fig = draw()
    for ax in [a for a in fig.axes if a.images]:
        if tick_texts(ax.xaxis) and tick_texts(ax.xaxis)[0]:
            assert tick_texts(ax.xaxis) == PADS
            assert list(ax.get_xticks()) == list(range(8))
        if tick_texts(ax.yaxis) and tick_texts(ax.yaxis)[0]:
            assert tick_texts(ax.yaxis) == PADS


def _assert_no_collisions(fig, ax, renderer):
    """Rendered tick labels do not touch: side by side when horizontal; when rotated, the
    distance across neighbouring (parallel) labels exceeds their height."""
    dpi = fig.dpi
    for axis in (ax.xaxis, ax.yaxis):
        labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
        rotations = {round(t.get_rotation()) % 360 for t in labels}
        assert len(rotations) <= 1, rotations  # one angle for all labels of an axis
        rot = rotations.pop() if rotations else 0
        assert rot in (0, P.XTICK_ROTATION)
        boxes = [t.get_window_extent(renderer) for t in labels]
        if rot == 0:
            for a, b in zip(boxes, boxes[1:]):
                assert not a.overlaps(b), (axis.axis_name, a, b)
        else:
            assert all(t.get_horizontalalignment() == "right" for t in labels)
            assert all(t.get_rotation_mode() == "anchor" for t in labels)
            xs = [t.get_window_extent(renderer).x1 for t in labels]
            for t, x0, x1 in zip(labels, xs, xs[1:]):
                across = abs(x1 - x0) * math.sin(math.radians(rot))
                assert across >= t.get_fontsize() * dpi / 72, (t.get_text(), across)


LONG = ["the", "tokenization", "of", "<pad>", "<pad>", "supercalifragilistic", "a", "注意"]


@pytest.mark.parametrize(
    "draw",
    [
        lambda: P.plot_attention(weights(8, 8), PADS, PADS),
        lambda: P.plot_attention(weights(8, 8), LONG, LONG),
        lambda: P.plot_attention(weights(8, 8), list("abcdefgh"), list("abcdefgh")),
        lambda: P.plot_attention(weights(40, 40), (LONG * 5), (LONG * 5)),
        lambda: P.plot_attention(weights(100, 100), [f"t{i}" for i in range(100)],
                                 [f"t{i}" for i in range(100)]),
        lambda: P.plot_attention(weights(3, 12), ["<pad>"] * 12, ["a", "b", "c"], figsize=(3, 2)),
        lambda: P.plot_heads(weights(6, 8, 8), LONG, LONG),
        lambda: P.plot_mask(torch.ones(16, 16, dtype=torch.bool), LONG * 2, LONG * 2),
        lambda: P.plot_compare(weights(8, 8), weights(8, 8, seed=1), LONG, LONG),
        lambda: P.plot_lines(D_KS, {"a": D_KS}, logx=True),
        lambda: P.plot_lines(D_KS, {"a": D_KS}, logx=True, figsize=(2.4, 2.0)),
        lambda: P.plot_cost([64, 128, 256, 512, 1024, 2048, 4096, 8192], {"a": [1] * 8},
                            memory={"a": [1] * 8}, figsize=(6, 3)),
    ],
    ids=["pads", "long", "letters", "40", "100", "narrow", "heads", "mask", "compare", "log",
         "log-narrow", "cost-memory"],
)
def test_tick_labels_never_collide_and_follow_one_rotation_rule(draw):
    fig = draw()
    _, renderer = rendered(fig)
    for ax in fig.axes:
        if ax.images or ax.lines:
            _assert_no_collisions(fig, ax, renderer)


def test_crowded_x_labels_rotate_the_same_way_in_every_function():
    figs = [
        P.plot_attention(weights(8, 8), LONG, LONG),
        P.plot_heads(weights(2, 8, 8), LONG, LONG),
        P.plot_mask(torch.ones(8, 8, dtype=torch.bool), LONG, LONG),
        P.plot_compare(weights(8, 8), weights(8, 8, seed=1), LONG, LONG),
        P.plot_lines(D_KS, {"a": D_KS}, logx=True, figsize=(2.4, 2.0)),
        P.plot_cost(D_KS, {"a": D_KS}, figsize=(3.4, 2.0)),
    ]
    for fig in figs:
        for ax in [a for a in fig.axes if a.images or a.lines]:
            labels = [t for t in ax.get_xticklabels() if t.get_text()]
            assert labels
            assert {(t.get_rotation(), t.get_horizontalalignment(), t.get_rotation_mode())
                    for t in labels} == {(P.XTICK_ROTATION, "right", "anchor")}
    # and labels that fit stay horizontal everywhere
    for fig in (P.plot_attention(weights(4, 4), list("abcd")),
                P.plot_lines(D_KS, {"a": D_KS}, logx=True)):
        assert {t.get_rotation() for t in fig.axes[0].get_xticklabels()} == {0.0}


def _mask_fig(leak=False, **kw):
    real = torch.arange(6) < 4  # (S,): two pads
    mask = real[:, None] & real[None, :]  # (S_q, S_k)
    w = torch.zeros(6, 6)
    w[:4, :4] = torch.softmax(torch.randn(4, 4), -1)
    w[0, 1] = 0.0  # a small weight where attending is allowed: not the masked look
    if leak:
        w[0, 5] = 0.3
    return P.plot_attention(w, list("abcd") + ["<pad>"] * 2, mask=mask, **kw), w, mask


def test_masked_cells_look_different_from_small_weights():
    fig, w, mask = _mask_fig(annotate=False)  # no value text over the sampled pixels
    ax = fig.axes[0]
    img, _ = rendered(fig)
    low_end = mpl.colormaps[P.WEIGHTS_CMAP](0.0)
    small = pixel(fig, img, ax, 1, 0)  # weight 0, allowed: the colormap's low end
    assert close_to(small, low_end, tol=10)
    masked_colors = [pixel(fig, img, ax, j + dx, i + dy) for i, j in [(0, 5), (5, 0), (5, 5)]
                     for dx, dy in [(0.0, 0.0), (0.2, 0.1), (-0.25, 0.3), (0.3, -0.3)]]
    hatch = int(mpl.colors.to_rgb(P.MASKED_HATCH_COLOR)[0] * 255)
    background = int(mpl.colors.to_rgb(P.MASKED_COLOR)[0] * 255)
    for rgb in masked_colors:  # light grey, grey hatch or a blend of them: never the colormap
        assert rgb.max() - rgb.min() <= 6 and hatch - 10 <= rgb.mean() <= background + 6, rgb
    assert any(close_to(c, P.MASKED_HATCH_COLOR, 60) for c in masked_colors)  # hatched
    # a legend entry says what the hatching means
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["masked (may not attend)"]
    assert legend.legend_handles[0].get_hatch() == P.MASKED_HATCH
    # masked cells carry no value text; allowed ones do
    assert len(_mask_fig()[0].axes[0].texts) == int(mask.sum())


def test_mask_that_leaks_weight_is_reported_not_hidden():
    with pytest.warns(UserWarning, match=r"1 masked cell\(s\) hold a non-zero weight"):
        fig, w, _ = _mask_fig(leak=True, annotate=False)
    ax = fig.axes[0]
    img, _ = rendered(fig)
    # the leaking cell keeps its colormap colour (seen between the hatch lines)
    cmap, norm = ax.images[0].cmap, ax.images[0].norm
    rgb = [pixel(fig, img, ax, 5 + d, 0 + d) for d in np.linspace(-0.35, 0.35, 15)]
    assert any(close_to(c, cmap(norm(0.3)), tol=25) for c in rgb)


def test_mask_broadcasts_and_works_in_heads_and_on_a_given_ax():
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    w = torch.softmax(torch.randn(3, 5, 5).masked_fill(~causal, float("-inf")), -1)
    fig = P.plot_heads(w, mask=causal)
    assert len(fig.legends) == 1
    panels = [ax for ax in fig.axes if ax.images]
    assert all(len(ax.patches) == 1 for ax in panels)
    assert all(ax.patches[0].get_hatch() == P.MASKED_HATCH for ax in panels)
    pad = torch.tensor([[True, True, True, False]])  # (1, S_k): a padding mask broadcasts
    wp = torch.tensor([[0.5, 0.25, 0.25, 0.0]] * 2)
    assert len(P.plot_attention(wp, mask=pad).axes[0].patches) == 1
    fig, axes = plt.subplots(1, 2)
    try:
        assert P.plot_attention(wp, mask=pad, ax=axes[0]) is fig
        legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None]
        assert [t.get_text() for lg in legends for t in lg.get_texts()] == ["masked"]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match=r"mask has shape \(3, 3\), which does not broadcast"):
        P.plot_attention(wp, mask=torch.ones(3, 3, dtype=torch.bool))
    # no mask, or nothing masked: no legend, no hatching
    fig = P.plot_attention(wp, mask=torch.ones(2, 4, dtype=torch.bool))
    assert not fig.legends and not fig.axes[0].patches


def test_cost_with_memory_is_time_and_memory_side_by_side():
    n = np.array([64, 128, 256, 512, 1024])
    t = {"full": 3e-9 * n**2.0, "flash": 2e-9 * n**2.0}
    mem = {"full": 4.0 * n**2 * 8, "flash": 4.0 * n * 64 * 8}  # bytes
    fig = P.plot_cost(n, t, memory=mem, title="attention cost")
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    ax_t, ax_m = fig.axes
    assert ax_t.get_position().x0 < ax_m.get_position().x0  # beside, on the right
    assert fig.get_suptitle() == "attention cost"
    assert (ax_t.get_title(), ax_m.get_title()) == ("time", "peak memory")
    assert ax_t.get_ylabel() == "time (s)" and ax_m.get_ylabel() == "peak memory (MiB)"
    for ax in (ax_t, ax_m):
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert ax.get_xlabel() == "sequence length"
        assert tick_texts(ax.xaxis) == [str(v) for v in n]
    # one legend for both panels, on the right, each entry with its slope in each panel
    assert ax_t.get_legend() is None and ax_m.get_legend() is None
    assert [x.get_text() for x in fig.legends[-1].get_texts()] == [
        "full (slope: time 2.0, memory 2.0)", "flash (slope: time 2.0, memory 1.0)"]
    np.testing.assert_allclose(ax_m.lines[0].get_ydata(), mem["full"] / 2**20)
    for a, b in zip(ax_t.lines, ax_m.lines):  # one method, one colour and marker
        assert (a.get_color(), a.get_marker()) == (b.get_color(), b.get_marker())
    # units chosen by size, or the caller's own label with the values as given
    fig = P.plot_cost(n, t, memory={"full": [100.0] * 5})
    assert fig.axes[1].get_ylabel() == "peak memory (bytes)"
    fig = P.plot_cost(n, t, memory={"full": [1.0] * 5}, memory_ylabel="peak memory (GB)")
    assert fig.axes[1].get_ylabel() == "peak memory (GB)"
    assert list(fig.axes[1].lines[0].get_ydata()) == [1.0] * 5


def test_cost_memory_on_given_axes_and_errors():
    n = [64, 128]
    fig, axes = plt.subplots(1, 2)
    try:
        assert P.plot_cost(n, {"a": [1, 4]}, memory={"a": [1, 2]}, ax=axes) is fig
        assert axes[1].get_ylabel() == "peak memory (bytes)"
    finally:
        plt.close(fig)
    fig, ax = plt.subplots()
    try:
        with pytest.raises(ValueError, match=r"ax must be two axes \(time, memory\)"):
            P.plot_cost(n, {"a": [1, 4]}, memory={"a": [1, 2]}, ax=ax)
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match=r"series 'a' has 1 values but sizes has 2"):
        P.plot_cost(n, {"a": [1, 4]}, memory={"a": [1]})


@pytest.fixture
def fonts(monkeypatch):
    """Choose which fonts the module sees as installed (the caches are rebuilt)."""

    def use(cjk_fonts):
        monkeypatch.setattr(P._base, "_CJK_FONTS", tuple(cjk_fonts))
        monkeypatch.setattr(P._base, "_DRAWABLE", None)
        monkeypatch.setattr(P._base, "_STYLE_RC", None)
        P._label_width_pt.cache_clear()

    yield use
    P._label_width_pt.cache_clear()


def _draw_everything(label):
    """Every function, with ``label`` in every kind of text it draws."""
    return [
        P.plot_attention(torch.eye(3), [label, "b", "c"], ["a", label, "c"], title=label,
                         xlabel=label, cbar_label=label, mask=torch.eye(3).bool()),
        P.plot_heads(weights(2, 3, 3), [label] * 3, titles=[label, "h"], suptitle=label),
        P.plot_mask(torch.ones(2, 2).bool(), [label, "x"], title=label),
        P.plot_compare(weights(2, 2), weights(2, 2, seed=1), [label, "x"], title=label),
        P.plot_lines([1, 2], {label: [1, 2], f"theory: {label}": [1, 2]}, xlabel=label,
                     ylabel=label, title=label),
        P.plot_cost([1, 2], {label: [1, 4]}, memory={label: [1, 2]}, title=label),
        P.plot_histograms({label: [1, 2, 3]}, xlabel=label, title=label),
    ]


def _all_texts(fig):
    return [t.get_text() for t in fig.findobj(mtext.Text)]


@pytest.mark.parametrize("label", ["缩放点积注意力 variance（方差）",
                                   "fast 🚀 ok ✅ 👍🏽 a\u200db"])
def test_missing_fonts_degrade_without_any_warning(label, fonts, capfd):
    fonts([])  # a machine with DejaVu Sans only: no CJK font, no emoji font
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "Glyph 27880 missing from font(s) DejaVu Sans"
        figs = _draw_everything(label)
        for fig in figs:
            rendered(fig)
            texts = "".join(_all_texts(fig))
            assert not any(P._is_emoji(ord(c)) for c in texts)
            assert not any("\u4e00" <= c <= "\u9fff" for c in texts)
    out, err = capfd.readouterr()
    assert err == ""


def test_what_degraded_text_reads(fonts):
    fonts([])
    heading = "Scaled Dot-Product Attention（缩放点积注意力）"
    assert P._text(heading) == "Scaled Dot-Product Attention"
    assert P._text("fast 🚀 path") == "fast path"
    assert P._text("注意") == P.MISSING_GLYPH  # a label left empty still marks its place
    assert P._text(r"$\sqrt{d_k}$ 注") == r"$\sqrt{d_k}$"  # mathtext is matplotlib's
    drawable = "‖∂L/∂q‖ − √d ✓ ␣ …"  # DejaVu Sans draws these
    assert P._text(drawable) == drawable
    assert P._text("a\nb") == "a\nb"


def test_an_installed_fallback_font_is_used_for_what_dejavu_lacks(fonts, capfd):
    """Stand-in for a CJK font: STIXGeneral ships with matplotlib and draws characters DejaVu
    Sans has not. Listed as a fallback, its characters are kept and render without warnings."""
    from matplotlib import font_manager, ft2font

    def charmap(family):
        path = font_manager.findfont(font_manager.FontProperties(family=family),
                                     fallback_to_default=False)
        return set(ft2font.FT2Font(path).get_charmap())

    extra = sorted(c for c in charmap("STIXGeneral") - charmap("DejaVu Sans")
                   if unicodedata.category(chr(c)) in ("Sm", "So") and c < 0x10000)
    assert extra
    label = "x " + chr(extra[0]) + chr(extra[-1])
    fonts([])
    assert P._text(label) == "x"
    fonts(["STIXGeneral"])
    assert P._text(label) == label
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fig in _draw_everything(label):
            rendered(fig)
            assert any(label in t for t in _all_texts(fig))
    assert capfd.readouterr().err == ""


def test_chinese_renders_through_an_installed_cjk_font(capfd):
    chain = P._font_chain()
    if len(chain) == 1:
        pytest.skip("no CJK font installed here (the fallback path is tested above)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = P.plot_attention(weights(2, 2), ["注意", "力"], title="注意力（attention）")
        rendered(fig)
    assert fig.axes[0].get_title() == "注意力（attention）"
    assert capfd.readouterr().err == ""



# ----------------------------------------------------------------------------------------------
# Every figure as the notebook shows it: coinciding curves both visible, readable text
# ----------------------------------------------------------------------------------------------


def shown(fig):
    """Render ``fig`` with Agg as a notebook shows it: at 100 dpi, scaled down to 800 px when it
    is wider (its padding included). Returns (RGB image, renderer)."""
    fig.set_dpi(P.SHOWN_DPI * P._shown_scale(fig))
    return rendered(fig)


def _path_px(artist):
    """An artist's outline in display pixels: a line's vertices, a patch's path."""
    if isinstance(artist, mpl.lines.Line2D):
        return P._base._display_points(artist)
    return artist.get_transform().transform(artist.get_path().vertices)


def visible_shares(fig, artists, band_px=2):
    """For each artist, the share of its length inside its axes where hiding it changes the
    image as shown, within ``band_px`` pixels of its path: how much of it a reader sees."""
    on, _ = shown(fig)
    h, w = on.shape[:2]
    paths = [P._base._along(_path_px(a), 1.0) for a in artists]  # as drawn (hiding one moves none)
    shares = []
    for artist, pts in zip(artists, paths):
        artist.set_visible(False)
        off, _ = shown(fig)
        artist.set_visible(True)
        changed = np.abs(on - off).max(-1) > 80  # more than antialiasing
        grown = np.zeros_like(changed)
        for dy in range(-band_px, band_px + 1):
            for dx in range(-band_px, band_px + 1):
                grown[max(0, dy):h + min(0, dy), max(0, dx):w + min(0, dx)] |= \
                    changed[max(0, -dy):h - max(0, dy), max(0, -dx):w - max(0, dx)]
        box = artist.axes.bbox
        pts = pts[(pts[:, 0] > box.x0 + 2) & (pts[:, 0] < box.x1 - 2)
                  & (pts[:, 1] > box.y0 + 2) & (pts[:, 1] < box.y1 - 2)]
        assert len(pts) > 20, "the curve must lie inside its axes"
        cols = np.clip(np.round(pts[:, 0]).astype(int), 0, w - 1)
        rows = np.clip(np.round(h - pts[:, 1]).astype(int), 0, h - 1)
        shares.append(float(grown[rows, cols].mean()))
    return shares


SIZES = np.array([256, 512, 1024, 2048, 4096], dtype=float)


def _lines_coinciding():
    x = np.linspace(0.0, 1.0, 41)  # dense markers, as in chapter 07's temperature sweep
    fig = P.plot_lines(x, {"measured": 1 + x**2, "theory: 1 + x²": 1 + x**2})
    ax = fig.axes[0]
    return fig, [(line(ax, "theory: 1 + x²"), line(ax, "measured"))]


def _cost_coinciding():
    t, m = 1e-9 * SIZES**2, 4.0 * SIZES**2
    fig = P.plot_cost(SIZES, {"reference code": t, "yours": t, "theory: S²": t},
                      memory={"reference code": m, "yours": m, "theory: ∝ S²": m})
    ax_t, ax_m = fig.axes  # rendered in the time panel; the memory panel's curves look alike
    return fig, [(line(ax_t, "theory: S²"), line(ax_t, "yours")),
                 (line(ax_t, "yours"), line(ax_t, "reference code"))]


def _histograms_coinciding():
    x = np.random.default_rng(0).normal(size=2000)
    fig = P.plot_histograms({"reference": x, "yours": x.copy()}, bins=20)
    fill_a, out_a, fill_b, out_b = fig.axes[0].patches
    return fig, [(out_b, out_a)]


def _panels_coinciding():
    fig, axes = P.panels(2, title="two panels, one reference line each")
    P.plot_lines(D_KS, {"measured": D_KS, "theory: d_k": D_KS}, logx=True, logy=True, ax=axes[0])
    P.plot_lines(D_KS, {"measured, scaled": [1.0] * 10, "theory: 1": [1.0] * 10}, logx=True,
                 ax=axes[1])
    return fig, [(line(axes[0], "theory: d_k"), line(axes[0], "measured")),
                 (line(axes[1], "theory: 1"), line(axes[1], "measured, scaled"))]


def line(ax, name):
    """The curve of series ``name`` on ``ax``."""
    return next(ln for ln in ax.lines if ln._course_name == name)


# Every public figure function draws coinciding curves here (a measured series equal to its
# reference, or to another measured one), or is listed as drawing none.
COINCIDING = {
    "plot_lines": _lines_coinciding,
    "plot_cost": _cost_coinciding,
    "plot_histograms": _histograms_coinciding,
    "panels": _panels_coinciding,  # plot_lines on a caller's axes, two panels
}
NO_CURVES = {"plot_attention", "plot_heads", "plot_mask", "plot_compare", "plot_masks", "plot_tree"}
NOT_FIGURES = {"series_color", "set_colors", "reset_colors"}


def test_every_public_figure_function_is_tested_with_coinciding_curves():
    public = {n for n in P.__all__ if inspect.isfunction(getattr(P, n))}
    public |= {n for n in dir(P) if n.startswith("plot_") and callable(getattr(P, n))}
    unknown = public - set(COINCIDING) - NO_CURVES - NOT_FIGURES
    assert not unknown, f"add a coinciding-curves scenario (COINCIDING) for {sorted(unknown)}"


@pytest.mark.parametrize("func", sorted(COINCIDING))
def test_coinciding_curves_are_both_visible_as_shown(func):
    """The curve on top shows over most of its length; the one under it still shows (between a
    reference line's dashes, or as an outline around a measured curve drawn on it)."""
    fig, pairs = COINCIDING[func]()
    tops, unders = [t for t, _ in pairs], [u for _, u in pairs]
    artists = list(dict.fromkeys(tops + unders))
    share = dict(zip(artists, visible_shares(fig, artists)))
    for top, under in pairs:
        assert share[top] >= 0.6, (func, top.get_label(), share[top])
        assert share[under] >= 0.25, (func, under.get_label(), share[under])
    lines = [ln for ax in fig.axes for ln in ax.lines]
    refs = [ln for ln in lines if ln._course_role == "reference"]
    measured = [ln for ln in lines if ln._course_role == "measured"]
    shown(fig)  # everything visible again
    for top, under in pairs:  # a measured curve under another measured one is outlined
        if getattr(top, "_course_role", None) == getattr(under, "_course_role", None) == "measured":
            assert under._outlined >= 1
    if func == "plot_cost":  # and so in the memory panel
        assert line(fig.axes[1], "reference code")._outlined >= 1
    for ref in refs:  # above every measured curve and its markers
        assert ref.get_zorder() > max(m.get_zorder() for m in measured)
        # where it coincides, its name is written on the line, inside the axes
        label = ref._end_label
        assert label is not None and label.get_text() and label.get_text() in ref._course_name
        box, ext = ref.axes.bbox, label.get_window_extent()
        assert box.x0 <= ext.x0 and ext.x1 <= box.x1 and box.y0 <= ext.y0 and ext.y1 <= box.y1
    _assert_references_differ(fig)


def _assert_references_differ(fig):
    refs = {}
    for ax in fig.axes:
        for ln in ax.lines:
            if getattr(ln, "_course_role", None) == "reference":
                refs.setdefault(ln._course_name, (ln.get_color(), tuple(ln._unscaled_dash_pattern[1])))
    looks = list(refs.values())
    for i, (c1, d1) in enumerate(looks):
        for c2, d2 in looks[i + 1:]:
            assert c1 != c2 and d1 != d2, refs  # neither the colour nor the dashes are shared


def test_two_reference_lines_never_share_colour_or_dashes():
    """Chapter 12's figure: a theory line and a bound, both reference lines."""
    d = np.arange(1, 200, dtype=float)
    fig = P.plot_lines(d, {"k = q": np.cos(d / 50), "theory: mean of cos": np.cos(d / 50),
                           "unrelated": 0 * d, "bound (Su et al.): scaled": np.exp(-d / 80)},
                       groups={"theory: mean of cos": "k = q"}, logx=True)
    _assert_references_differ(fig)
    fig, _ = _cost_coinciding()  # one reference per panel: still one figure
    _assert_references_differ(fig)
    # a second call on the same axes takes the next style; the same name keeps its own
    fig = P.plot_lines([1, 2], {"theory: a": [1, 2]})
    P.plot_lines([1, 2], {"theory: b": [2, 3], "theory: a": [1, 2]}, ax=fig.axes[0])
    styles = {ln.get_label(): (ln.get_color(), ln._course_slot) for ln in fig.axes[0].lines}
    assert styles["theory: b"] != styles["theory: a"] and len(fig.axes[0].lines) == 3
    assert len({(ln.get_color(), ln._course_slot) for ln in fig.axes[0].lines}) == 2


def test_a_reference_line_is_not_buried_under_dense_markers():
    """Chapter 07: the entropy reaches the bound ln S_k for large T, where 41 markers lie on the
    dashed line. The line shows along that stretch and is named there."""
    T = np.logspace(-2, 2, 41)
    h = np.log(8) * (1 - np.exp(-T))
    fig = P.plot_lines(T, {"entropy": h, "bound: ln S_k": [np.log(8)] * 41}, logx=True)
    ax = fig.axes[0]
    bound, entropy = line(ax, "bound: ln S_k"), line(ax, "entropy")
    assert visible_shares(fig, [bound])[0] >= 0.6
    shown(fig)
    assert bound._end_label is not None and entropy in bound._coincides_with
    assert entropy.get_markevery() is None  # thinned only while drawn, never changed for good


def test_curves_that_only_cross_are_drawn_as_they_are():
    x = np.linspace(0, 1, 30)
    fig = P.plot_lines(x, {"a": x, "b": 1 - x, "theory: c": 0.5 + 0 * x})
    shown(fig)
    ax = fig.axes[0]
    assert line(ax, "a")._outlined == 0 and line(ax, "theory: c")._end_label is None
    assert line(ax, "a").get_linewidth() == line(ax, "b").get_linewidth()


def _cell_texts(fig):
    return [t for t in fig.findobj(P._CellText)]


def _ch08_panels():
    """Chapter 08's figure: three annotated heatmaps in panels(3)."""
    fig, axes = P.panels(3, title="one head: weights and gradients, (S_q, S_k) = (5, 7)")
    g = torch.Generator().manual_seed(0)
    A = torch.softmax(torch.randn(5, 7, generator=g), -1)
    dA = 3 * torch.randn(5, 7, generator=g)
    P.plot_attention(A, ax=axes[0], title="A (weights)", annotate=True, fmt=".2f")
    for ax, m in ((axes[1], dA), (axes[2], dA / 7)):
        lim = m.abs().max().item()
        P.plot_attention(m, ax=ax, vmin=-lim, vmax=lim, cmap="RdBu_r", annotate=True, fmt=".1f")
    return fig


@pytest.mark.parametrize(
    "make, written",
    [
        (lambda: P.plot_attention(weights(10, 10)), True),
        (lambda: P.plot_attention(weights(16, 16), annotate=True), True),
        (lambda: P.plot_attention(weights(30, 30), annotate=True), False),  # too many cells
        (lambda: P.plot_heads(weights(4, 6, 6), annotate=True), True),
        (lambda: P.plot_compare(weights(8, 8), weights(8, 8, seed=1)), None),
        (_ch08_panels, True),
    ],
    ids=["attention-10", "attention-16", "attention-30", "heads", "compare", "ch08-panels"],
)
def test_heatmap_values_are_readable_where_shown_or_left_out(make, written):
    """A digit of a written value is at least MIN_TEXT_PX tall in the notebook (800 px wide),
    by its font size and, for chapter 08's figure, measured on the rendered image; values too
    small for that are not drawn at all."""
    fig = make()
    _, renderer = shown(fig)
    texts = _cell_texts(fig)
    assert texts
    px_per_pt = renderer.points_to_pixels(1.0)
    for t in texts:
        if not t.dropped:
            assert t.get_fontsize() * px_per_pt * P._base._DIGIT_HEIGHT_EM >= P.MIN_TEXT_PX - 1e-6
    drawn = [t for t in texts if not t.dropped]
    if make is _ch08_panels:  # and on the rendered image: the ink of "0.xx" in A's first row
        on, _ = shown(fig)
        boxes = [t.get_window_extent(renderer) for t in texts[:3]]
        for t in texts:
            t.set_visible(False)
        off, _ = shown(fig)
        for t in texts:
            t.set_visible(True)
        h = on.shape[0]
        for t, box in zip(texts, boxes):
            rows = np.abs(on - off).max(-1)[int(h - box.y1) - 2:int(h - box.y0) + 2,
                                            int(box.x0) - 2:int(box.x1) + 2]
            ink = np.nonzero((rows > 60).any(axis=1))[0]
            assert ink.max() - ink.min() + 1 >= P.MIN_TEXT_PX, t.get_text()
    if written is True:
        assert len(drawn) == len(texts)
    elif written is False:
        assert not drawn
    else:  # plot_compare: expected and yours keep their values (two rows when they need it)
        panels = [ax for ax in fig.axes if ax.images]
        assert all(not t.dropped for t in texts if t.axes in panels[:2])
    assert fig.get_size_inches()[0] <= P.SHOWN_WIDTH_IN + 1e-9


def _typical_figures():
    tokens = [f"t{i}" for i in range(24)]
    fig, axes = P.panels(2)
    P.plot_lines([1, 2, 3], {"a long name of a measured series": [1, 2, 3]}, ax=axes[0])
    P.plot_lines([1, 2, 3], {"another long name of a series": [3, 2, 1]}, ax=axes[1])
    return {
        "attention": P.plot_attention(weights(24, 24), tokens, tokens),
        "heads": P.plot_heads(weights(4, 24, 24), tokens, tokens),
        "heads-8": P.plot_heads(weights(8, 12, 12)),
        "mask": P.plot_mask(torch.ones(24, 24, dtype=torch.bool).tril(), tokens, tokens),
        "compare": P.plot_compare(weights(6, 6), weights(6, 6, seed=1), tokens[:6], tokens[:6]),
        "lines": variance_plot(),
        "lines-long-legend": P.plot_lines(D_KS, {"bound (Su et al.): (2/D)Σ|S_j|, scaled": D_KS,
                                                 "k = q: mean score / ‖q‖²": D_KS}, logx=True),
        "cost": P.plot_cost(SIZES, {"naive softmax, masked": SIZES**2, "F.sdpa, is_causal=True": SIZES}),
        "cost-memory": _cost_coinciding()[0],
        "histograms": P.plot_histograms({"unscaled": np.arange(10.0), "scaled": np.arange(10.0) / 3}),
        "masks": P.plot_masks({"causal (ch. 04)": torch.ones(16, 16).tril().bool(),
                               "sliding window, w = 3, causal (ch. 10)": torch.ones(16, 16).tril().triu(-2).bool(),
                               "strided sparse, stride 4 (ch. 10)": torch.eye(16).bool()}, tick_every=4),
        "panels": fig,
    }


RENDERED = {"heads"}  # the others are rendered, as shown, by the tests above


def test_figures_fit_the_notebook_and_their_tick_labels_are_readable_there():
    """Every figure made here is at most SHOWN_WIDTH_IN wide (shown unscaled in an 800 px
    notebook), and every tick label is at least MIN_TICK_SIZE there. (plot_tree draws a
    caller's diagram at the caller's size: not covered.)"""
    for name, fig in _typical_figures().items():
        assert fig.get_size_inches()[0] <= P.SHOWN_WIDTH_IN + 1e-9, name
        if name not in RENDERED:
            continue
        _, renderer = shown(fig)
        scale = P._shown_scale(fig)
        for ax in fig.axes:
            for t in ax.get_xticklabels() + ax.get_yticklabels():
                if t.get_visible() and t.get_text():
                    assert t.get_fontsize() * scale >= P.MIN_TICK_SIZE - 1e-9, (name, t.get_text())
            if ax.images or ax.lines:
                _assert_no_collisions(fig, ax, renderer)


@pytest.mark.parametrize(
    "lo, hi, at_least",
    [(0.158, 0.35, 3), (0.5, 4.0, 3), (1e-5, 0.2, 4), (1e-3, 1e9, 4)],
)
def test_a_log_axis_shows_enough_tick_labels_to_read(lo, hi, at_least):
    """Chapter 06: a gradient norm from 0.16 to 0.35 on a log axis had two tick labels."""
    x = np.arange(1, 25)
    fig = P.plot_lines(x, {"pre-norm": np.geomspace(hi, lo, 24), "post-norm": np.geomspace(lo, hi, 24)},
                       logy=True)
    ax = fig.axes[0]
    _, renderer = shown(fig)
    labels = [t.get_text() for t in ax.get_yticklabels()
              if t.get_text() and lo * 0.99 <= t.get_position()[1] <= hi * 1.01]
    assert len(labels) >= at_least, labels
    assert not [t for t in ax.yaxis.get_minorticklabels() if t.get_text()]  # minor: unlabelled
    _assert_no_collisions(fig, ax, renderer)


# ----------------------------------------------------------------------------------------------
# Style, global state, display
# ----------------------------------------------------------------------------------------------


def test_set_style_plain_call_and_context():
    with mpl.rc_context():  # so this test leaves rcParams as it found them
        mpl.rcParams["image.cmap"] = "gray"
        with P.set_style():
            assert mpl.rcParams["image.cmap"] == P.WEIGHTS_CMAP
            assert mpl.rcParams["axes.spines.top"] is False
        assert mpl.rcParams["image.cmap"] == "gray"  # restored
        P.set_style()  # plain call: stays on
        assert mpl.rcParams["image.cmap"] == P.WEIGHTS_CMAP


def test_style_restores_only_its_own_keys():
    with mpl.rc_context():
        with P.set_style():
            # e.g. IPython's inline backend switching interactive mode on at first pyplot use
            mpl.rcParams["interactive"] = not mpl.rcParams["interactive"]
            changed = mpl.rcParams["interactive"]
        assert mpl.rcParams["interactive"] == changed


def test_style_holds_after_the_call():
    """Artists keep the course style when drawn later, under different global settings."""
    fig = P.plot_attention(weights(3, 3))
    with mpl.rc_context({"xtick.labelsize": 20, "font.size": 20}):
        fig.canvas.draw()
        sizes = {t.get_fontsize() for t in fig.axes[0].get_xticklabels()}
    assert sizes == {P._FONT_SIZES["xtick.labelsize"]}


def test_module_never_selects_a_backend_or_shows():
    tree = ast.parse(inspect.getsource(P))
    called = {
        node.func.attr for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not called & {"use", "show", "switch_backend", "ion"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: P.plot_attention(weights(5, 5)),
        lambda: P.plot_heads(weights(3, 4, 4)),
        lambda: P.plot_mask(torch.ones(4, 4).tril().bool()),
        lambda: P.plot_compare(weights(3, 3), weights(3, 3, seed=1)),
        lambda: P.plot_lines([1, 2, 3], {"a": [1, 4, 9]}),
        lambda: P.plot_cost([64, 128], {"a": [1.0, 4.0]}),
        lambda: P.plot_histograms({"a": np.arange(10.0)}),
        lambda: P.plot_attention(torch.eye(4), mask=torch.eye(4).bool()),
        lambda: P.plot_heads(torch.eye(4)[None].repeat(2, 1, 1), mask=torch.eye(4).bool()),
        lambda: P.plot_cost([64, 128], {"a": [1.0, 4.0]}, memory={"a": [1e3, 2e3]}),
        lambda: P.plot_lines([1, 2], {"theory: 1": [1, 1], "a": [1, 2]}),
    ],
    ids=["attention", "heads", "mask", "compare", "lines", "cost", "histograms",
         "attention-mask", "heads-mask", "cost-memory", "lines-reference"],
)
def test_closed_figures_still_render_for_display(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. missing glyphs, deprecations
        fig = make()
        assert plt.get_fignums() == []  # out of pyplot: the inline backend will not show it again
        try:
            from IPython.core.pylabtools import print_figure  # what Jupyter calls to display it
        except ImportError:
            png = png_bytes(fig)
        else:
            png = print_figure(fig, "png", dpi=30)
    assert png.startswith(b"\x89PNG")


def test_plot_masks_one_panel_per_mask_with_sparse_ticks():
    S = 12
    masks = {"causal": torch.ones(S, S).tril().bool(), "window": torch.ones(S, S).tril().triu(-2).bool()}
    fig = P.plot_masks(masks, tick_every=4)
    assert isinstance(fig, Figure)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["causal", "window"]
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["0", "4", "8"]
    with pytest.raises(ValueError, match="non-empty dict"):
        P.plot_masks({})


def test_plot_tree_draws_every_node_and_edge_and_names_a_bad_edge():
    nodes = {"a": (1.0, 1.0, "root\nA", None, True), "b": (4.0, 2.0, "child B", "full", True),
             "c": (4.0, 0.0, "child C", None, False)}
    fig = P.plot_tree(nodes, [("a", "b", "changes x"), ("a", "c", "")], note="legend", title="tree")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert {"root\nA", "child B", "child C", "changes x", "legend"} <= set(texts)
    assert len(fig.axes[0].patches) == 3
    FigureCanvasAgg(fig).draw()
    with pytest.raises(ValueError, match="names no node 'z'"):
        P.plot_tree(nodes, [("a", "z", "")])


def test_panels_gives_axes_for_the_helpers():
    fig, axes = P.panels(2, figsize=(8, 3), title="two panels")
    assert len(axes) == 2 and fig._suptitle.get_text() == "two panels"
    P.plot_lines([1, 2, 3], {"a": [1, 2, 3]}, ax=axes[0])
    P.plot_lines([1, 2, 3], {"b": [3, 2, 1]}, ax=axes[1])
    assert axes[1].get_lines() and not plt.get_fignums()
    FigureCanvasAgg(fig).draw()
    with pytest.raises(ValueError, match="ncols and nrows"):
        P.panels(0)
