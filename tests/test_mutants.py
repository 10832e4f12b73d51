"""Machine-made mutants (``tools/mutate.py``, issue 24 item 4): a fixed sample in every ``make test``.

The whole set (about 1.9k mutants) runs in ``make mutants`` and its report is
``tools/mutation/report.md``. Here a fixed, seeded sample of it, ``PER_EXERCISE`` (4) mutants of every
exercise that are not listed as equivalent, goes through the checks in one sandboxed worker
process: each must be killed, except the known survivors of ``tools/mutants_known_survivors.toml``
(each with its reason), which must still survive and still be in the sample, so that the list
cannot go stale. Killing a known survivor (a new case in a check) fails this test until its entry
is removed: the list only shrinks.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.mutation import report  # noqa: E402
from tools.mutation.build import build, reference_copy  # noqa: E402
from tools.mutation.pool import run_tasks  # noqa: E402
from tools.mutation.scope import all_mutants, module_info  # noqa: E402

PER_EXERCISE = 4
SEED = 24


@pytest.fixture(scope="module")
def mutants():
    return all_mutants()


@pytest.fixture(scope="module")
def sampled(mutants):
    chosen = report.sample(mutants, PER_EXERCISE, SEED, skip=report.equivalents())
    results = run_tasks([m.to_task() for m in chosen], jobs=1, timeout=120)
    return chosen, {(r["exercise"], r["id"]): r for r in results}


def test_every_exercise_has_mutants(mutants):
    from utils.checks import EXERCISES

    assert set(mutants) == set(EXERCISES)
    empty = [n for n, ms in mutants.items() if len(ms) < 4]
    assert not empty, f"exercises with (almost) no mutants: {empty}"
    ids = [(n, m.id) for n, ms in mutants.items() for m in ms]
    assert len(ids) == len(set(ids)), "mutant ids must be unique within an exercise"


def test_sampled_mutants_are_killed(sampled):
    chosen, verdicts = sampled
    known = report.known_survivors()
    unexpected, not_judged = [], []
    for m in chosen:
        r = verdicts.get((m.exercise, m.id))
        if r is None or r["status"] in ("error", "stillborn"):
            not_judged.append(f"{m.exercise} {m.id}: {r and r.get('message')}")
        elif r["status"] == "survived" and (m.exercise, m.id) not in known:
            unexpected.append(f"{m.exercise} `{m.id}` {m.diff}")
    assert not not_judged, "mutants the tool could not judge:\n" + "\n".join(not_judged)
    assert not unexpected, (
        "these sampled mutants pass their check: kill each with a new case, or list it in "
        "tools/mutants_equivalent.toml (same function: a reason) or tools/mutants_known_survivors.toml "
        "(a reason)\n" + "\n".join(unexpected))


def test_known_survivors_are_still_survivors(sampled):
    chosen, verdicts = sampled
    in_sample = {(m.exercise, m.id) for m in chosen}
    stale = []
    for key, reason in report.known_survivors().items():
        if key not in in_sample:
            stale.append(f"{key[0]} {key[1]}: not in the sample any more (its code or the sample changed)")
        elif verdicts.get(key, {}).get("status") != "survived":
            stale.append(f"{key[0]} {key[1]}: now {verdicts.get(key, {}).get('status')} (remove it from the list)")
    assert not stale, "tools/mutants_known_survivors.toml is stale:\n" + "\n".join(stale)


def test_registry_names_existing_mutants(mutants):
    ids = {(n, m.id) for n, ms in mutants.items() for m in ms}
    missing = [f"{n} {i}" for (n, i) in report.equivalents() if (n, i) not in ids]
    assert not missing, ("tools/mutants_equivalent.toml lists mutants that no longer exist "
                         "(the reference changed: look at the new mutants again):\n" + "\n".join(missing))
    overlap = set(report.equivalents()) & set(report.known_survivors())
    assert not overlap, f"listed both as equivalent and as a survivor: {sorted(overlap)}"


def test_a_mutant_built_from_the_unmutated_source_passes():
    """The tool's control: the reference rebuilt by its machinery passes its check, from its own
    module and through a helper module (the path a mutant of masked_softmax_impl takes)."""
    from utils.checks import EXERCISES
    from utils.checks._core import run_check

    for name in ("scaled_dot_product_attention", "TinyGPT", "split_heads"):
        run_check(EXERCISES[name], reference_copy(EXERCISES[name]), quiet=True)
    helper = "utils.reference._common"
    impl = build(EXERCISES["masked_softmax"], helper, module_info(helper).source)
    run_check(EXERCISES["masked_softmax"], impl, quiet=True)


def test_operators_make_the_tensor_mistakes():
    from utils.checks import EXERCISES
    from tools.mutation.scope import mutants_of

    diffs: dict = {}
    for m in mutants_of(EXERCISES["scaled_dot_product_attention"]):
        diffs.setdefault(m.op, []).append(m.after)
    assert "scores = q @ k / math.sqrt(d_k)" in diffs["transpose"]  # a dropped transpose
    assert "scores = (q @ k.transpose(-2, -1))" in diffs["drop_scale"]  # a dropped scale
    assert any("p=1 - dropout_p" in a for a in diffs["p_complement"])
    assert any("dim=-2" in a for a in diffs["dim"])  # softmax over another axis
    assert any("masked_fill_(" in a for a in diffs["inplace"])
    assert any("-1e9" in a for a in diffs["fill"])


def test_the_sandbox_and_the_time_limit():
    """A mutant may not write outside its worker's temp folder; one that never returns is killed."""
    module = "utils.reference._ch00"
    source = module_info(module).source
    writes = source + "\nopen(%r, 'w').write('x')\n" % str(ROOT / "mutant-was-here.txt")
    loops = source + "\nwhile True:\n    pass\n"
    tasks = [{"exercise": "softmax", "id": "writes", "module": module, "source": writes},
             {"exercise": "softmax", "id": "loops", "module": module, "source": loops}]
    results = {r["id"]: r for r in run_tasks(tasks, jobs=1, timeout=8)}
    assert not (ROOT / "mutant-was-here.txt").exists()
    assert results["writes"]["status"] == "stillborn" and "PermissionError" in results["writes"]["message"]
    assert results["loops"]["status"] == "killed" and results["loops"].get("timeout")
