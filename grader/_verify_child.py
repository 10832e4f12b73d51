"""The verification child. Runs INSIDE the sandbox, in a fresh process (copied into its scratch).

Reads learner_definitions.py and request.json from the working folder, executes only the
learner's definitions, runs each exercise on the cases drawn from the secret seed, and saves the
raw outputs to outputs.pt as plain tensors and Python values. The parent compares them with the
reference; nothing this process says about correctness is trusted.
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
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"returned a {type(x).__name__}, which is not a tensor, number or tuple")


def main():
    request = json.load(open("request.json"))
    from utils.checks import EXERCISES
    from utils.checks._core import ForbiddenCall, case_seed, learner_code

    namespace = {"__name__": "learner"}
    results = {}
    failures = {}
    for chunk in json.load(open("learner_definitions.json", encoding="utf-8")):
        try:
            with learner_code():
                exec(compile(chunk, "your notebook", "exec"), namespace)
        except BaseException as err:  # noqa: BLE001 - this definition cannot stand alone
            first = chunk.splitlines()[0][:80] if chunk else ""
            failures[first] = f"{type(err).__name__}: {str(err)[:200]}"
    for name, seed in request["seeds"].items():
        ex = EXERCISES[name]
        impl = namespace.get(name)
        if impl is None:
            why = "; ".join(f"`{k}` failed with {v}" for k, v in failures.items() if name in k)
            results[name] = {"error": f"`{name}` is not defined by a def or class statement in your notebook"
                                      + (f" ({why})" if why else "")}
            continue
        outputs = []
        try:
            cases = ex.make_cases(seed)
            for i, case in enumerate(cases):
                torch.manual_seed(case_seed(i))
                with learner_code(ex.forbidden):
                    out = ex.call(impl, case)
                outputs.append(plain(out))
            results[name] = {"outputs": outputs}
        except ForbiddenCall as err:
            results[name] = {"error": f"{name} calls {err.label} ({err.func_name}), which this exercise forbids"}
        except NotImplementedError:
            results[name] = {"error": f"{name} is not implemented"}
        except BaseException as err:  # noqa: BLE001
            results[name] = {"error": f"{name} raised {type(err).__name__}: {str(err)[:200]}"}
    torch.save(results, "outputs.pt")


if __name__ == "__main__":
    main()
    sys.exit(0)
