"""The verification child. Runs INSIDE the sandbox, in a fresh process, for ONE exercise.

Its working folder holds ``definitions.json`` (the learner's definitions that passed the static
scan) and ``cases.pt`` (the cases the parent drew: plain tensors and Python values, loaded with
``weights_only=True`` before any learner code runs; or, for an exercise whose cases hold
callables, only that exercise's own seed). ``utils`` on its path is the grader's *child copy*:
``utils.checks`` as in the course, ``utils.reference`` replaced by stubs that raise, so learner code
here has no reference to call, no salt and no other seed. It writes the raw outputs to
``outputs.pt``; the parent judges them. Nothing this process says about correctness is trusted.
"""
import json
import sys

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


def main():
    payload = torch.load("cases.pt", weights_only=True)  # before any learner code runs
    name = payload["exercise"]
    chunks = json.load(open("definitions.json", encoding="utf-8"))

    try:  # torch's lazily imported modules load now, not inside the first call's time budget
        __import__("importlib").import_module("torch._dynamo")
    except Exception:  # noqa: BLE001
        pass
    from utils.checks import EXERCISES
    from utils.checks._core import Budget, BudgetExceeded, Case, ForbiddenCall, _call_learner, case_seed

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

    namespace = {"__name__": "learner"}
    failures = {}
    from utils.checks._core import learner_code

    for chunk in chunks:
        try:
            with learner_code():
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
            torch.manual_seed(case_seed(i))
            try:
                out = _call_learner(ex, impl, case)
            except ForbiddenCall as err:
                result["error"] = f"{name} calls {err.label} ({err.func_name}), which this exercise forbids"
                break
            except NotImplementedError:
                result["error"] = f"{name} is not implemented"
                break
            except BudgetExceeded as err:
                outputs.append({"__crashed__": f"over budget: {str(err)[:300]}"})
                continue
            except Exception as err:  # noqa: BLE001 - the learner's bug on this case
                outputs.append({"__crashed__": f"raised {type(err).__name__}: {str(err)[:300]}"})
                continue
            try:
                outputs.append(plain(out))
            except TypeError as err:
                outputs.append({"__crashed__": str(err)})
        else:
            result["outputs"] = outputs
    torch.save(result, "outputs.pt")


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    import os

    os._exit(0)  # no atexit hook or finaliser of learner code runs after the outputs are written
