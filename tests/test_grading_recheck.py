"""The sandboxed re-check, seen from inside an exercise's process (issue 25 §1): what learner code
there can reach. A probe definition runs in the re-check exactly where a learner's class body
would, reports what it found through its only way out (its own result's error message), and the
grader checks the report. Slow: one sandboxed re-check. The attacks of round three as whole
submissions are graded in tests/test_grader.py (grader/samples/ch03_round3.py, ch08_round3.py)."""
from __future__ import annotations

import json

import pytest

from grader import sandbox, verify
from grader.samples import bank

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sandbox.bwrap_available(), reason="bubblewrap is not available here")]

SECRETS = {"PGPASSWORD": "pg-secret-5b1e", "AWS_SECRET_ACCESS_KEY": "aws-secret-9c2f",
           "CANVAS_API_TOKEN": "canvas-token-77d0"}

PROBE = r'''
import operator
import torch


def _probe():
    system = operator.attrgetter("s" + "ys")(torch)
    os_ = system.modules["o" + "s"]
    facts = {"isolated": system.flags.isolated}

    def writable(path):
        try:
            with open(os_.path.join(path, ".probe"), "w") as f:
                f.write("x")
            return True
        except OSError:
            return False

    facts["path_w"] = sum(writable(p) for p in system.path if p)
    facts["cwd_w"] = writable(".")
    facts["tmp_w"] = writable("/tmp")
    facts["home_w"] = writable(os_.environ.get("HOME", "/"))
    facts["secret"] = [k for k, v in os_.environ.items() if "secret" in v or "token" in v]
    facts["env"] = len(os_.environ)
    facts["fds"] = len([n for n in os_.listdir("/proc/self/fd") if int(n) > 2]) - 1  # less listdir's own
    try:
        os_.listdir(f"/proc/{os_.getppid()}/fd")
        facts["server_fds"] = True
    except OSError:
        facts["server_fds"] = False
    try:
        with open(f"/proc/{os_.getppid()}/mem", "rb") as f:
            f.read(1)
        facts["server_mem"] = True
    except OSError:
        facts["server_mem"] = False
    for what, attempt in (("ctypes", lambda: system.modules["ctypes"].c_char.from_address(id(1))),
                          ("gc", lambda: system.modules["gc"].get_objects()),
                          ("thread", lambda: system.modules["threading"].Thread(target=print).start()),
                          ("fork", lambda: os_.fork())):
        try:
            attempt()
            facts[what] = True
        except Exception:
            facts[what] = False
    return facts


FACTS = _probe()  # at definition time, where a class body runs


def dot_product_variance(d_k, n_samples, scaled):
    import json
    raise RuntimeError("PROBE" + json.dumps(FACTS, separators=(",", ":")))
'''


def test_an_exercise_process_reaches_nothing_but_its_own_result(monkeypatch):
    """Isolated (python -I), nothing writable (no folder on sys.path, not the working folder, HOME
    or /tmp), none of the grader's environment, one descriptor (its own result's), nothing of the
    fork server's (descriptors, memory), no ctypes, no walk over live objects, no thread, no
    process. And the other exercise, correct, keeps its points."""
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    sdpa = "".join(bank._answers()["scaled_dot_product_attention"])
    verdicts = verify.verify_many(["dot_product_variance", "scaled_dot_product_attention"], [PROBE, sdpa], [],
                                  {"dot_product_variance": 1, "scaled_dot_product_attention": 2})
    assert verdicts["scaled_dot_product_attention"].ok, verdicts["scaled_dot_product_attention"].reason
    reason = verdicts["dot_product_variance"].reason
    assert "PROBE" in reason, reason
    facts = json.loads(reason.split("PROBE", 1)[1].split("}", 1)[0] + "}")
    print("\n", facts)
    assert facts["isolated"] == 1
    assert facts["path_w"] == 0 and not facts["cwd_w"] and not facts["tmp_w"] and not facts["home_w"], facts
    assert facts["secret"] == [] and facts["env"] <= 20, facts
    assert facts["fds"] == 1, facts
    assert not facts["server_fds"] and not facts["server_mem"], facts
    assert not any(facts[k] for k in ("ctypes", "gc", "thread", "fork")), facts
