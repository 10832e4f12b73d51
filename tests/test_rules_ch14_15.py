"""Chapters 14-15, examiner's round: what the prompts state is what the checks hold, messages that
name mistakes nobody listed, correct answers the checks accept, and notebooks that do not depend
on how a correct answer is written (issues 16 and 17)."""
import json
import math
from pathlib import Path

import pytest
import torch

from utils.checks import EXERCISES, CheckFailure, check_fit_loglog_slope, check_generate, check_TinyGPT, quiz_key
from utils.checks._ch14 import CROP_LENGTH, PLAIN_START_POS, _ListCache

ROOT = Path(__file__).resolve().parents[1]
NB14 = ROOT / "solutions" / "14_tiny_gpt" / "14_tiny_gpt.ipynb"
NB15 = ROOT / "solutions" / "15_comparing_attention_variants" / "15_comparing_attention_variants.ipynb"


def _cells(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [("".join(c["source"]) if isinstance(c["source"], list) else c["source"], c) for c in nb["cells"]]


def _generate(plain_start_pos=False, keep=None):
    """The solution's generate, with one mistake: a non-zero start_pos without a cache, or a crop
    to ``keep`` tokens instead of max_len."""
    def gen(model, idx, max_new_tokens, use_cache=True):
        caches = [_ListCache() for _ in model.blocks] if use_cache else None
        with torch.no_grad():
            for step in range(max_new_tokens):
                if not use_cache:
                    window = idx[:, -(keep or model.max_len):]
                    start = window.size(1) - 1 if plain_start_pos else 0
                    logits, _ = model(window, None, start)
                elif step == 0:
                    logits, caches = model(idx, caches, 0)
                else:
                    logits, caches = model(idx[:, -1:], caches, idx.size(1) - 1)
                idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return idx

    return gen


def test_generate_names_a_start_pos_without_cache():
    """16 §5: it used to say "crop it to its last max_len tokens"."""
    with pytest.raises(CheckFailure) as info:
        check_generate(_generate(plain_start_pos=True))
    assert PLAIN_START_POS in str(info.value)
    assert "crop it to its last" not in str(info.value)


def test_generate_rejects_a_crop_to_fewer_than_max_len_tokens():
    """The prompt says: cropped to its last model.max_len tokens. One fewer used to pass."""
    def gen(model, idx, max_new_tokens, use_cache=True):
        return _generate(keep=model.max_len - 1)(model, idx, max_new_tokens, use_cache)

    with pytest.raises(CheckFailure) as info:
        check_generate(gen)
    assert CROP_LENGTH in str(info.value)


def test_fit_loglog_slope_must_return_a_python_float():
    def tensor_slope(sizes, costs):
        x = torch.log(torch.as_tensor(sizes).float())
        y = torch.log(torch.as_tensor(costs).float())
        x_c = x - x.mean()
        return (x_c * (y - y.mean())).sum() / (x_c * x_c).sum()  # a 0-d float32 tensor

    with pytest.raises(CheckFailure) as info:
        check_fit_loglog_slope(tensor_slope)
    assert "Python float" in str(info.value)


def test_fit_loglog_slope_names_sizes_and_costs_sorted_apart():
    def sorted_apart(sizes, costs):
        x = [math.log(v) for v in sorted(float(s) for s in sizes)]
        y = [math.log(v) for v in sorted(float(c) for c in costs)]
        mx, my = sum(x) / len(x), sum(y) / len(y)
        return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)

    with pytest.raises(CheckFailure) as info:
        check_fit_loglog_slope(sorted_apart)
    assert "sorted each on its own" in str(info.value)


def test_fit_loglog_slope_accepts_statistics_linear_regression(capsys):
    import statistics

    def slope(sizes, costs):
        return statistics.linear_regression([math.log(float(s)) for s in sizes],
                                            [math.log(float(c)) for c in costs]).slope

    check_fit_loglog_slope(slope)
    assert "✅" in capsys.readouterr().out


def test_tinygpt_with_pytorch_default_init_passes(capsys):
    """The initialisation is up to the learner: nn.Linear's and nn.Embedding's defaults pass."""
    variant = next(v for v in EXERCISES["TinyGPT"].variants if v.demo).impl
    model = variant(11, 16, 1, 2, 1, 8)
    assert model.tok_emb.weight.std() > 0.5  # nn.Embedding's N(0, 1), not GPT-2's 0.02
    check_TinyGPT(variant)
    assert "✅" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["TinyGPT", "generate", "fit_loglog_slope"])
def test_every_exercise_has_one_demo_variant(name):
    assert sum(bool(v.demo) for v in EXERCISES[name].variants) == 1


def test_chapter_14_sets_the_weights_it_trains_from_by_name():
    """The training section starts from GPT-2's init set by the contract's parameter names, so a
    correct TinyGPT with another __init__ (other init, other creation order) trains the same."""
    sources = [s for s, _ in _cells(NB14)]
    cell = next(s for s in sources if "def init_like_gpt2" in s)
    ns = {}
    exec(cell[cell.index("def init_like_gpt2"):cell.index("\n\n\nmodel = ")], {"torch": torch}, ns)
    init = ns["init_like_gpt2"]
    solution = {}
    exec(next(s for s, c in _cells(NB14) if "def apply_rope" in s), solution)
    exec(next(s for s, c in _cells(NB14) if c["metadata"].get("nbgrader", {}).get("grade_id") == "TinyGPT"), solution)
    other = next(v for v in EXERCISES["TinyGPT"].variants if v.demo).impl  # parameters created in another order
    a, b = solution["TinyGPT"](13, 16, 2, 4, 2, 12), other(13, 16, 2, 4, 2, 12)
    init(a)
    init(b)
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert sorted(pa) == sorted(pb)
    for name in pa:
        assert torch.equal(pa[name], pb[name]), name


@pytest.mark.parametrize("path,chapter", [(NB14, "14"), (NB15, "15")])
def test_quizzes_use_salted_keys_hints_and_spread_letters(path, chapter):
    cells = _cells(path)
    letters, numbers = [], []
    for src, cell in cells:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        if gid.startswith("quiz_"):
            assert src.splitlines()[0].startswith(f"answer_{gid[5:]} = None"), gid
        if gid.startswith("test_quiz_"):
            k = gid[len("test_quiz_"):]
            assert f'qid="{chapter}.q{k}"' in src and "hint=" in src, gid
            hint = src.split('hint="')[1].split('",')[0]
            if "check_number(" in src:  # a numeric question: the key is the rounded right value
                value = int(src.split(f"round(float(answer_{k})) == ")[1].split(",")[0])
                assert f'key="{quiz_key(value, decimals=0, qid=f"{chapter}.q{k}")}"' in src, gid
                assert str(value) not in hint, gid
                numbers.append(value)
                continue
            right = src.split(".strip().lower() == \"")[1][0]
            letters.append(right)
            assert f'key="{quiz_key(right, qid=f"{chapter}.q{k}")}"' in src, gid
            assert f"'{right}'" not in hint and f'"{right}"' not in hint, gid
    assert len(letters) + len(numbers) == 3 and len(set(letters)) == len(letters), letters


def test_chapter_15_pins_the_contenders_colours_in_both_figures():
    sources = [s for s, _ in _cells(NB15)]
    pinned = [s for s in sources if "set_colors({" in s]
    assert len(pinned) == 2 and "plot_tree" in pinned[0] and "plot_cost" in pinned[1]
    colours = [s[s.index("set_colors({"):s.index("})", s.index("set_colors({"))] for s in pinned]
    assert colours[0] == colours[1]
    assert len(set(c for c in colours[0].split('"') if c.startswith("#"))) == 6  # six distinct colours


def _solution_tinygpt(edit):
    ns = {}
    exec(next(s for s, c in _cells(NB14) if "def apply_rope" in s), ns)
    src = next(s for s, c in _cells(NB14) if c["metadata"].get("nbgrader", {}).get("grade_id") == "TinyGPT")
    exec(edit(src), ns)
    return ns["TinyGPT"]


def test_tinygpt_names_a_tied_head_and_a_layernorm_eps_the_prompt_does_not_state():
    head = "        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)\n"
    tied = _solution_tinygpt(lambda s: s.replace(head, head + "        self.lm_head.weight = self.tok_emb.weight\n"))
    with pytest.raises(CheckFailure) as info:
        check_TinyGPT(tied)
    assert "tied to tok_emb.weight" in str(info.value)
    eps = _solution_tinygpt(lambda s: s.replace("nn.LayerNorm(d_model)", "nn.LayerNorm(d_model, eps=1e-6)"))
    with pytest.raises(CheckFailure) as info:
        check_TinyGPT(eps)
    assert "eps = 1e-06" in str(info.value)  # named, not reported as a gradient error
