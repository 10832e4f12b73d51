"""Tests of ``utils.plotting``: every helper draws headless, returns a Figure with the expected
axes, titles and labels, takes tensors (requires_grad too), arrays and nested lists, refuses bad
shapes and label lists with a helpful ValueError, and leaves neither open figures nor changed
rcParams behind.
"""
import ast
import inspect
import io
import warnings

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import utils.plotting as P

TOKENS = ["the", "cat", "sat", "on"]


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test: seeded, and leaves no figure open in pyplot and no rcParams changed."""
    torch.manual_seed(0)
    np.random.seed(0)
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
    ],
    ids=["attention", "heads", "mask", "compare", "lines", "cost", "histograms"],
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
