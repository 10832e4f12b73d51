"""The verification child. Runs INSIDE the sandbox, in a fresh process, for one submission.

Its working folder holds ``definitions.json`` (the learner's definitions that passed the static
scan) and ``cases.pt`` (for each exercise, the cases the parent drew: plain tensors and Python
values, loaded with ``weights_only=True`` before any learner code runs; or, for an exercise whose
cases hold callables, only that exercise's own seed; and the time allowed). ``utils`` on its path
is the grader's *child copy*: ``utils.checks`` as in the course, ``utils.reference`` replaced by
stubs that raise, so learner code here has no reference to call, no salt and no other seed.

This process imports torch and the checks once, runs no learner code itself, and forks one child
per exercise, in its own process group, killed whole when its share of the time runs out (the
smaller of ``per_exercise_seconds`` and an equal share of what is left of ``total_seconds``).
Before any learner code, the child locks itself down (``lock_down``): the exercise's forbidden
entry points are replaced in every module and on ``torch.Tensor`` (a reference saved by a class
body meets the replacement), the guard uses a private copy of the forbidden groups (a definition
that empties the check's lists changes nothing), and no thread or process can start (the kernel's
RLIMIT_NPROC, and Python's entry points): torch's modes hold only in the thread that set them. The
child loads the learner's definitions and writes the raw outputs to ``outputs_<i>.pt``, up to and
including the first case that raises or goes over its budget (that case alone decides the verdict,
so a function that hangs costs one case's budget, not every case's); ``notes.json`` says which
child was stopped. The parent judges the outputs. Nothing this process says about correctness is
trusted.
"""
import json
import os
import signal
import sys
import time

import torch


def plain(x, depth=0):
    if depth > 6:
        raise TypeError("output nested too deeply")
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().as_subclass(torch.Tensor).clone()
    if isinstance(x, (tuple, list)):
        return [plain(v, depth + 1) for v in x]
    if isinstance(x, dict) and all(isinstance(k, str) for k in x):
        return {k: plain(v, depth + 1) for k, v in x.items()}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"returned a {type(x).__name__}, which is not a tensor, number or tuple")


def decode(value, depth=0):
    """The parent's names for the checks' own functions, resolved in this process's copy."""
    if depth > 6:
        return value
    if isinstance(value, dict) and set(value) == {"__callable__"}:
        import importlib

        module, qualname = value["__callable__"]
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj
    if isinstance(value, tuple):
        return tuple(decode(v, depth + 1) for v in value)
    if isinstance(value, list):
        return [decode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: decode(v, depth + 1) for k, v in value.items()}
    return value


def _raiser(label, name):
    from utils.checks._core import ForbiddenCall

    def forbidden(*args, **kwargs):
        raise ForbiddenCall(label, name)

    forbidden.__name__ = name
    return forbidden


def _replace_everywhere(replacements: dict):
    """``{id(obj): (obj, replacement)}``: every module attribute and every torch.Tensor attribute
    that is one of the objects now holds its replacement (one pass over every module): the
    original is no longer reachable by any name, from any thread."""
    import torch

    if not replacements:
        return
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            continue
        try:
            for key, value in list(d.items()):
                hit = replacements.get(id(value))
                if hit is not None and hit[0] is value:
                    d[key] = hit[1]
        except Exception:  # noqa: BLE001 - an odd module
            pass
    for key, value in list(vars(torch.Tensor).items()):
        hit = replacements.get(id(value))
        if hit is not None and hit[0] is value:
            setattr(torch.Tensor, key, hit[1])
    for obj, replacement in replacements.values():
        name = getattr(obj, "__name__", None)
        if name and getattr(torch._C.TensorBase, name, None) is obj:  # a method of the C base: shadow it
            setattr(torch.Tensor, name, replacement)


def _no_threads_or_processes():
    """No new thread or process from here on: torch's function and dispatch modes, and every
    patch of the checks, hold only in the thread that set them. The kernel refuses the clone
    (RLIMIT_NPROC: the run's uid already has more tasks than 1; ignored only for root, which a
    sandboxed process never is); Python's entry points raise as well."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    except (ValueError, OSError):
        pass
    import _thread
    import threading

    def refuse(*args, **kwargs):
        raise RuntimeError("graded code may not start threads or processes")

    for name in ("start_new_thread", "start_new", "start_joinable_thread"):
        if hasattr(_thread, name):
            setattr(_thread, name, refuse)
    threading.Thread.start = refuse
    threading._start_new_thread = refuse
    if hasattr(threading, "_start_joinable_thread"):
        threading._start_joinable_thread = refuse
    for name in ("fork", "forkpty", "vfork", "posix_spawn", "posix_spawnp", "system", "popen", "execv", "execve",
                 "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnl", "spawnle"):
        if hasattr(os, name):
            setattr(os, name, refuse)
        posix = sys.modules.get("posix")
        if posix is not None and hasattr(posix, name):
            setattr(posix, name, refuse)


def lock_down(ex):
    """Before any learner code runs in this exercise's process: the exercise's forbidden entry
    points are replaced everywhere (a reference saved at definition time, or a call from another
    thread, meets the replacement, not the original); the forbidden groups are copied, so a
    definition that empties the check's lists changes nothing; no thread or process can start.
    Returns the copied groups, which the guard uses."""
    import torch

    from utils.checks._core import Forbidden

    groups = tuple(Forbidden(g.label, tuple(g.funcs), tuple(g.aten)) for g in ex.forbidden)
    replacements = {}
    for g in groups:
        for f in g.funcs:
            owner = getattr(f, "_tripwire_owner", None)
            if owner is not None:  # a Python entry point (nn.MultiheadAttention.forward, the autograd engine)
                setattr(owner, f._tripwire_attr, f._tripwire_replacement(g.label))
            else:
                replacements[id(f)] = (f, _raiser(g.label, getattr(f, "__name__", str(f))))
        if any(getattr(f, "_tripwire_attr", None) == "_execution_engine" for f in g.funcs):
            # a new engine cannot be made either
            torch._C._ImperativeEngine = _raiser(g.label, "_ImperativeEngine")
            run = torch.autograd.graph._engine_run_backward
            replacements[id(run)] = (run, _raiser(g.label, "_engine_run_backward"))
    _replace_everywhere(replacements)
    _no_threads_or_processes()
    return groups


def run_exercise(payload, chunks, out_name):
    """In a forked child: the learner's definitions, then the exercise's cases; raw outputs to
    ``out_name`` (up to and including the first case that raises or goes over its budget)."""
    from utils.checks import EXERCISES
    from utils.checks._core import Budget, BudgetExceeded, Case, ForbiddenCall, case_seed, learner_code, reseed

    name = payload["exercise"]
    ex = EXERCISES[name]
    if payload.get("seed") is not None:
        cases = ex.make_cases(payload["seed"])
    else:
        cases = []
        for fields in payload["cases"]:
            fields = {k: (v if k == "budget" else decode(v)) for k, v in fields.items()}
            if fields.get("budget") is not None:
                fields["budget"] = Budget(**fields["budget"])
            cases.append(Case(**fields))
    del payload

    from utils.checks._core import learner_code as _learner_code

    groups = lock_down(ex)  # before any learner code
    guard_budget = ex.case_budget

    def call(case):  # the check's call, guarded by the copied groups (not ex.forbidden)
        return ex.call(impl, case, guard=lambda: _learner_code(groups, guard_budget(case)))

    namespace = {"__name__": "learner"}
    failures = {}
    for chunk in chunks:
        try:
            with learner_code(groups):
                exec(compile(chunk, "your notebook", "exec"), namespace)
        except BaseException as err:  # noqa: BLE001 - this definition cannot stand alone
            first = chunk.splitlines()[0][:80] if chunk else ""
            failures[first] = f"{type(err).__name__}: {str(err)[:200]}"
    impl = namespace.get(name)
    if impl is None and ex.kind == "class":  # a method exercise (split_heads): the class that holds it
        impl = namespace.get(getattr(ex.reference, "__name__", ""))
    result = {}
    if impl is None:
        why = "; ".join(f"`{k}` failed with {v}" for k, v in failures.items() if name in k)
        result["error"] = (f"`{name}` is not defined by a def or class statement in your notebook"
                           + (f" ({why})" if why else ""))
    else:
        outputs = []
        for i, case in enumerate(cases):
            reseed(case_seed(i))
            try:
                out = call(case)
            except ForbiddenCall as err:
                result["error"] = f"{name} calls {err.label} ({err.func_name}), which this exercise forbids"
                break
            except NotImplementedError:
                result["error"] = f"{name} is not implemented"
                break
            except BudgetExceeded as err:  # the first failing case decides: stop here (a hang costs one case)
                outputs.append({"__crashed__": f"over budget: {str(err)[:300]}"})
                break
            except Exception as err:  # noqa: BLE001 - the learner's bug on this case
                outputs.append({"__crashed__": f"raised {type(err).__name__}: {str(err)[:300]}"})
                break
            try:
                outputs.append(plain(out))
            except TypeError as err:
                outputs.append({"__crashed__": str(err)})
                break
        if "error" not in result:  # every case, or the cases up to the first that crashed
            result["outputs"] = outputs
    torch.save(result, out_name)


def _wait(pid, seconds):
    """Wait for a child at most ``seconds``; kill its whole process group then. Returns a note."""
    end = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > end:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return f"stopped after its {seconds:.0f} s share of the re-check time"
        time.sleep(0.02)
    try:  # anything it left behind in its group
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return ""


def main():
    spec = torch.load("cases.pt", weights_only=True)  # before any learner code runs
    chunks = json.load(open("definitions.json", encoding="utf-8"))
    torch.set_num_threads(1)

    # Paid once here, before any learner code and outside every exercise's time: the checks, the
    # first use of their tripwires. Each exercise then runs in a child forked from this process,
    # with its own share of the time; its clocks never raise inside an import (utils._clock).
    import utils.checks  # noqa: F401
    from utils.checks._core import warm_up

    warm_up()

    payloads = spec["exercises"]
    deadline = time.monotonic() + spec["total_seconds"]
    notes = {}
    for i, payload in enumerate(payloads):
        share = min(spec["per_exercise_seconds"], max(deadline - time.monotonic(), 0.0) / (len(payloads) - i))
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the exercise's own process, in its own group (killed whole on time-out)
            code = 0
            try:
                os.setpgid(0, 0)
                run_exercise(payload, chunks, f"outputs_{i}.pt")
            except BaseException:  # noqa: BLE001 - no result file: the parent says so
                code = 1
            finally:
                sys.stdout.flush()
                os._exit(code)  # no atexit hook or finaliser of learner code runs
        try:
            os.setpgid(pid, pid)
        except OSError:  # the child did it first, or has already gone
            pass
        notes[payload["exercise"]] = _wait(pid, share)
    with open("notes.json", "w", encoding="utf-8") as f:
        json.dump(notes, f)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # no atexit hook or finaliser of learner code runs after the outputs are written
