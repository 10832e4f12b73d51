"""The re-check's sandboxed side: a fork server that runs no learner code, and one process per
exercise that runs it. Nothing either of them says is trusted; the grader (``verify.py``) judges.

Started by the grader as ``python -I _verify_child.py CONTROL_FD LIB`` in a read-only sandbox
(``sandbox.run(read_only=True)``): isolated mode (no environment variable read, no user site, not
even the script's own folder on ``sys.path``), nothing writable anywhere in the file system, and
an allow-listed environment. ``LIB`` is the grader's read-only copy of ``utils`` (the checks, the
reference replaced by stubs that raise) and of ``_wire.py``; it is the only folder this script
adds to ``sys.path``. The working folder holds ``definitions.json`` (the learner's top-level
definitions, each a chunk loaded on its own) and ``spec.json`` (every exercise of the assignment).

**The fork server** (this process) imports torch and the checks once, then makes itself
non-dumpable (``PR_SET_DUMPABLE`` 0: no process of the same uid can ptrace it or open its
``/proc`` files, so a learner process cannot change what the next exercise's process inherits),
says ``ready`` on the control socket, and then, for each exercise the grader asks for, receives
that exercise's cases and **one output descriptor** (the write end of a pipe the grader opened
just before, passed with SCM_RIGHTS), forks, closes its own copy of the descriptor, waits for the
exercise's process at most its share of the time (then kills it) and reports ``done``. So while
an exercise's process runs, no other exercise's channel exists anywhere in the sandbox, and the
grader reads each pipe as that exercise's result and nothing else.

**An exercise's process**, before any learner code: closes the control socket and every other
descriptor but its output, decodes its cases (``_wire``: plain data, no pickle), and locks itself
down (``lock_down``):

* its own forbidden groups are *removed*, not guarded: each forbidden aten operator gets a
  raising kernel at every dispatch key the dispatcher has a kernel for (``torch.ops.aten.*``,
  ``DisableTorchFunction``, a popped mode or a saved reference all reach it), registered through
  a library handle this process keeps no reference to (it cannot be reset from Python); the
  Python entry points are replaced in every module and class that holds them, and in the check's
  own ``Forbidden`` lists (which otherwise hold the originals);
* the union of the assignment's forbidden groups is removed the same way (its kernels through a
  library reset afterwards) while the learner's definitions load: a class body runs in every
  exercise's process;
* no thread or process can start (RLIMIT_NPROC, Python's entry points), and an audit hook, which
  cannot be removed, refuses ctypes, the gc module's object walks and process creation;
* the time and size budgets of each case use the tripwire classes captured here, before any
  learner code, not whatever the checks' module holds later.

Then its imports load (installed code only), the memory cap is set (``cap_memory``: where a case
declares ``Budget.memory``, RLIMIT_AS, soft and hard, at what the process maps now plus that many
bytes: no unprivileged process can raise it again, and the kernel refuses every mapping past it,
whatever torch's modes say), and only then does learner code run.

It then loads the definitions, runs the cases (up to and including the first that raises or
goes over its budget), writes one ``_wire`` message to its descriptor and exits.
"""
import json
import os
import signal
import socket
import struct
import sys
import time

CONTROL_MAX = 1 << 20  # a control message's JSON, at most
PAYLOAD_MAX = 256 << 20


# ------------------------------------------------------------------------------ control channel
def _recv_exact(sock, n: int, fds: list) -> bytes:
    import array

    buf = b""
    while len(buf) < n:
        data, anc, _flags, _addr = sock.recvmsg(n - len(buf), socket.CMSG_SPACE(4 * 4))
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(cdata[:len(cdata) - len(cdata) % a.itemsize])
                fds.extend(a)
        if not data:
            raise EOFError
        buf += data
    return buf


def receive(sock):
    """(message, payload, fds), or (None, b"", []) when the grader has closed the channel."""
    fds: list = []
    try:
        (n,) = struct.unpack("<I", _recv_exact(sock, 4, fds))
        if n > CONTROL_MAX:
            raise EOFError
        msg = json.loads(_recv_exact(sock, n, fds))
        size = int(msg.get("payload", 0))
        if size > PAYLOAD_MAX:
            raise EOFError
        payload = _recv_exact(sock, size, fds) if size else b""
    except (EOFError, OSError, ValueError):
        for fd in fds:
            os.close(fd)
        return None, b"", []
    return msg, payload, fds


def send(sock, msg: dict) -> None:
    data = json.dumps(msg).encode()
    sock.sendall(struct.pack("<I", len(data)) + data)


def _fixed_mmap_threshold() -> None:
    """glibc's malloc serves every block of 128 KiB or more with its own mapping, returned on free
    (``mallopt(M_MMAP_THRESHOLD)``, which also stops the threshold from growing). Otherwise, once a
    large block is freed, blocks of that size come from the heap, and a loop that allocates one
    per step between small blocks that stay can grow the heap by one block per step: the address
    space would then measure the allocator's fragmentation, not the memory the code holds, and a
    memory cap (``cap_memory``) would refuse answers at random."""
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass  # not glibc: its own allocator


def _not_dumpable() -> None:
    """PR_SET_DUMPABLE 0: processes of the same uid cannot ptrace this one or open its /proc files."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


# ------------------------------------------------------------------------------- lock-down
def _raiser(label, name):
    from utils.checks._core import ForbiddenCall

    def forbidden(*args, **kwargs):
        raise ForbiddenCall(label, name)

    forbidden.__name__ = name
    return forbidden


def _dispatch_keys(qualified: str) -> list:
    """Every dispatch key (alias keys included) with a kernel registered for ``qualified``."""
    import re

    import torch

    keys = []
    for line in torch._C._dispatch_dump(qualified).splitlines():
        m = re.match(r"^(\w+)(\[alias\])?: registered at", line)
        if m and m.group(1) != "debug":
            keys.append(m.group(1))
    return keys


def _registrations(groups) -> list:
    """[(operator name, dispatch key, label)] for every aten operator of ``groups`` (each of its
    overloads) and every dispatch key that has a kernel for it."""
    out = []
    for g in groups:
        for packet in g.aten:
            packet = getattr(packet, "overloadpacket", packet)
            base = packet._qualified_op_name.split("::", 1)[1]
            for overload in packet.overloads():
                name = base if overload == "default" else f"{base}.{overload}"
                out += [(name, key, g.label) for key in _dispatch_keys(f"aten::{name}")]
    return out


def _kernels_library(registrations: list):
    """A dispatcher library in which each registered operator raises ForbiddenCall at its key.
    The registrations last as long as the returned library object (or until its ``reset``)."""
    import warnings

    import torch

    lib = torch._C._dispatch_library("IMPL", "aten", "", "grader lock-down", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": that is the point
        for name, key, label in registrations:
            try:
                lib.impl(name, key, _raiser(label, name))
            except RuntimeError:
                pass  # a key that takes no Python kernel: the others still raise
    return lib


def _leak(obj) -> None:
    """Keep ``obj`` alive for the rest of the process with no reference anyone can follow: one
    extra reference count and no name. (A dispatcher library is not tracked by the gc module, so
    no object walk finds it either.)"""
    import ctypes

    ctypes.pythonapi["Py_IncRef"](ctypes.py_object(obj))  # looked up, not cached on pythonapi


def _remove_method(cls, name: str, replacement) -> None:
    """Replace a method of a static (C) type in the type's own dict, so that no instance, old or
    new, finds the original (which is then freed: nothing else refers to it)."""
    import ctypes
    import gc

    d = gc.get_referents(cls.__dict__)[0]
    if isinstance(d, dict) and name in d:
        d[name] = replacement
        ctypes.pythonapi["PyType_Modified"](ctypes.py_object(cls))


def _modules():
    """Every module object: sys.modules, and modules reachable as attributes of those."""
    import types

    import warnings

    seen, out = set(), []
    todo = list(sys.modules.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated module attributes warn when looked at
        return _walk_modules(todo, seen, out, types)


def _walk_modules(todo, seen, out, types):
    while todo:
        mod = todo.pop()
        if not isinstance(mod, types.ModuleType) or id(mod) in seen:
            continue
        seen.add(id(mod))
        out.append(mod)
        try:
            todo += [v for v in list(vars(mod).values()) if isinstance(v, types.ModuleType)]
        except Exception:  # noqa: BLE001 - an odd module
            pass
    return out


def _replace_everywhere(replacements: dict) -> None:
    """``{id(obj): (obj, replacement)}``: every module attribute and every torch.Tensor attribute
    that is one of the objects now holds its replacement."""
    import torch

    if not replacements:
        return
    for mod in _modules():
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


def _entry_patches(groups) -> list:
    """[(owner, attribute, replacement)] for the Python entry points of ``groups`` that are not
    torch functions (nn.MultiheadAttention.forward, the autograd engine)."""
    out = []
    for g in groups:
        for f in g.funcs:
            owner = getattr(f, "_tripwire_owner", None)
            if owner is not None:
                out.append((owner, f._tripwire_attr, f._tripwire_replacement(g.label)))
    return out


def _no_threads_or_processes() -> None:
    """No new thread or process from here on: the kernel refuses the clone (RLIMIT_NPROC: the
    run's uid already has more tasks than 1), and Python's entry points raise as well."""
    import _thread
    import resource
    import threading

    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    except (ValueError, OSError):
        pass

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


AUDIT_REFUSED = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "os.system", "os.exec",
                           "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen", "pty.spawn",
                           "sys.setprofile", "sys.settrace", "sys._current_frames"})
AUDIT_MODULES = frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend"})


def _audit_hook() -> None:
    """An audit hook (it cannot be removed): ctypes (every ctypes event: loading a library,
    reading an address, calling a foreign function), the gc module's walks over live objects and
    process creation are refused from now on. The hook reads nothing but its own arguments'
    defaults, so no module attribute a learner could rebind changes what it refuses."""

    def hook(event, args, _refused=AUDIT_REFUSED, _modules=AUDIT_MODULES, _prefix="ctypes.", _err=RuntimeError):
        if event in _refused or event.startswith(_prefix) or (event == "import" and args and args[0] in _modules):
            raise _err("graded code may not use " + event)

    sys.addaudithook(hook)


def lock_down(ex, union: list):
    """Before any learner code (module docstring). Returns ``(load_guard, call_guard)``: the
    context managers for loading the definitions and for each case's call."""
    import contextlib

    import torch

    from torch._ops import OpOverload, OpOverloadPacket

    from utils.checks import EXERCISES, _forbid
    from utils.checks._core import Forbidden, WorkCounter, _alarm, _learner_depth, _Tripwire

    own = list(ex.forbidden)
    others = [g for g in union if all(g is not o for o in own)]

    # 1. The exercise's own groups: raising kernels for their aten operators, through a library
    # nobody can reach; their Python entry points replaced everywhere.
    _leak(_kernels_library(_registrations(own)))
    replacements = {}
    for g in own:
        for f in g.funcs:
            if getattr(f, "_tripwire_owner", None) is None and not isinstance(f, (OpOverload, OpOverloadPacket)):
                # (an aten operator itself stays: its kernels raise, and code that looks up its
                # overloads still finds them)
                replacements[id(f)] = (f, _raiser(g.label, getattr(f, "__name__", str(f))))
        if any(getattr(f, "_tripwire_attr", None) == "_execution_engine" for f in g.funcs):
            # The engine's own type loses run_backward: an engine made anew (found through
            # object.__subclasses__, say) cannot run a backward pass either.
            _remove_method(type(torch.autograd.variable.Variable._execution_engine), "run_backward",
                           _raiser(g.label, "run_backward"))
            torch._C._ImperativeEngine = _raiser(g.label, "_ImperativeEngine")
            run = torch.autograd.graph._engine_run_backward
            replacements[id(run)] = (run, _raiser(g.label, "_engine_run_backward"))
    for owner, attr, replacement in _entry_patches(own):
        setattr(owner, attr, replacement)
    _replace_everywhere(replacements)

    # 2. The union, while the definitions load (where class bodies run).
    union_patches = _entry_patches(others)
    union_kernels = _registrations(others)

    @contextlib.contextmanager
    def load_guard():
        lib = _kernels_library(union_kernels) if union_kernels else None
        saved = [(owner, attr, owner.__dict__.get(attr, getattr(owner, attr)), attr in owner.__dict__)
                 for owner, attr, _ in union_patches]
        for owner, attr, replacement in union_patches:
            setattr(owner, attr, replacement)
        _learner_depth.n = getattr(_learner_depth, "n", 0) + 1
        try:
            yield
        finally:
            _learner_depth.n -= 1
            for owner, attr, old, own_attr in reversed(saved):
                if own_attr:
                    setattr(owner, attr, old)
                else:
                    delattr(owner, attr)
            if lib is not None:
                lib.reset()

    # 3. The check's own lists hold no original any more (the attack of issue 25 took the
    # original back from them): every Forbidden group of the checks now lists raisers only.
    groups = {id(g): g for g in vars(_forbid).values() if isinstance(g, Forbidden)}
    groups.update({id(g): g for e in EXERCISES.values() for g in e.forbidden})
    for g in groups.values():
        g.funcs = tuple(_raiser(g.label, getattr(f, "__name__", "forbidden")) for f in g.funcs)
        g.aten = ()

    # 4. The budget's tripwires, captured now: rebinding the checks' module attributes later
    # changes nothing here. (Forbidden calls no longer depend on them: step 1.)
    tripwire, alarm, depth, counter = _Tripwire, _alarm, _learner_depth, WorkCounter

    @contextlib.contextmanager
    def call_guard(budget):
        depth.n = getattr(depth, "n", 0) + 1
        # the work a rule is about (e.g. scores computed), counted as the visible check counts it
        work = (counter(budget.work, budget.why) if budget is not None and budget.work is not None
                else contextlib.nullcontext())
        try:
            with work, tripwire((), budget), alarm(budget.seconds if budget is not None else None):
                yield
        finally:
            depth.n -= 1

    _no_threads_or_processes()
    _audit_hook()
    return load_guard, call_guard


def only_imports(chunk: str) -> bool:
    """The chunk is import statements and nothing else."""
    import ast

    try:
        body = ast.parse(chunk).body
    except (SyntaxError, ValueError):
        return False
    return bool(body) and all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in body)


def load(chunks: list, namespace: dict, failures: dict) -> None:
    """Each chunk on its own: one that cannot stand alone does not take the others with it."""
    for chunk in chunks:
        try:
            exec(compile(chunk, "your notebook", "exec"), namespace)
        except BaseException as err:  # noqa: BLE001 - this definition cannot stand alone
            first = chunk.splitlines()[0][:80] if chunk else ""
            failures[first] = f"{type(err).__name__}: {str(err)[:200]}"


def cap_memory(allowance: int) -> int:
    """Lower this process's address-space limit, soft and hard, to what it maps now plus
    ``allowance`` bytes (the largest ``Budget.memory`` of its cases). Called after the lock-down and
    the notebook's imports, before any other definition loads (a class body could compute, or hold a
    buffer, at load time): nothing the
    learner's code does afterwards can raise a hard limit (that needs CAP_SYS_RESOURCE in the
    machine's first user namespace, which a sandboxed process never has), and the kernel refuses
    every mapping beyond it, whatever torch's modes say. Returns the allowance."""
    import resource

    with open("/proc/self/statm", encoding="ascii") as f:
        mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = mapped + allowance
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return allowance


# ----------------------------------------------------------------------------------- an exercise
def plain(x, depth=0):
    import torch

    if depth > 6:
        raise TypeError("output nested too deeply")
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().as_subclass(torch.Tensor).contiguous().clone()
    if isinstance(x, (tuple, list)):
        return [plain(v, depth + 1) for v in x]
    if isinstance(x, dict) and all(isinstance(k, str) for k in x):
        return {k: plain(v, depth + 1) for k, v in x.items()}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"returned a {type(x).__name__}, which is not a tensor, number or tuple")


def decode_callables(value, depth=0):
    """The grader's names for the checks' own functions, resolved in this process's copy."""
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
        return tuple(decode_callables(v, depth + 1) for v in value)
    if isinstance(value, list):
        return [decode_callables(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: decode_callables(v, depth + 1) for k, v in value.items()}
    return value


def _close_other_descriptors(keep: int) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def run_exercise(name: str, payload: bytes, chunks: list, union_names: list, out_fd: int) -> None:
    """In a forked process: everything before the first line of learner code, then the
    definitions, then the cases; one wire message to ``out_fd``."""
    import _grader_wire as wire

    from utils.checks import EXERCISES
    from utils.checks._core import Budget, BudgetExceeded, Case, ForbiddenCall, case_seed, reseed

    _close_other_descriptors(out_fd)
    ex = EXERCISES[name]
    spec = wire.decode(payload, strided=True)
    del payload
    if spec.get("seed") is not None:
        cases = ex.make_cases(spec["seed"])
    else:
        cases = []
        for fields in spec["cases"]:
            fields = {k: (v if k == "budget" else decode_callables(v)) for k, v in fields.items()}
            if fields.get("budget") is not None:
                fields["budget"] = Budget(**fields["budget"])
            cases.append(Case(**fields))
    union = []
    for other in union_names:
        for g in getattr(EXERCISES.get(other), "forbidden", ()):
            if all(g is not u for u in union):
                union.append(g)
    budget_of, call = ex.case_budget, ex.call
    encode, seed_of, reseed_ = wire.encode, case_seed, reseed
    memory = [b.memory for b in map(budget_of, cases) if b is not None and b.memory is not None]
    holder = getattr(ex.reference, "__name__", "") if ex.kind == "class" else ""
    chunks = [c if isinstance(c, str) else c["code"] for c in chunks
              if isinstance(c, str) or name in c.get("only", ()) or (holder and holder in c.get("only", ()))]
    # Import statements run installed code only (a read-only file system, `python -I`): they load
    # before the memory cap, so that what a notebook imports (pandas: +41 MiB of address space)
    # costs its answer nothing. Every other chunk is learner code and loads under the cap.
    imports = [c for c in chunks if only_imports(c)]
    chunks = [c for c in chunks if not only_imports(c)]
    namespace = {"__name__": "learner"}
    failures = {}
    load_guard, call_guard = lock_down(ex, union)
    with load_guard():
        load(imports, namespace, failures)
    cap = cap_memory(max(memory)) if memory else None  # the last step before any learner code
    with load_guard():
        load(chunks, namespace, failures)
    impl = namespace.get(name)
    if impl is None and ex.kind == "class":  # a method exercise (split_heads): the class that holds it
        impl = namespace.get(getattr(ex.reference, "__name__", ""))
    result = {}
    if impl is None:
        why = "; ".join(f"`{k}` failed with {v}" for k, v in failures.items() if name in k)
        result["error"] = (f"`{name}` is not defined at the top level of your notebook's cells"
                           + (f" ({why})" if why else ""))
    else:
        outputs = []
        for i, case in enumerate(cases):
            reseed_(seed_of(i))
            budget = budget_of(case)
            try:
                out = call(impl, case, guard=lambda: call_guard(budget))
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
                if cap is not None and (isinstance(err, MemoryError) or "allocate" in str(err)):
                    outputs.append({"__crashed__": f"over its memory: the re-check lets this exercise's process "
                                                   f"obtain at most {cap / 2**20:,.0f} MiB beyond what it held before "
                                                   f"your code loaded, and it asked for more "
                                                   f"({type(err).__name__}: {str(err)[:200]})"})
                else:
                    outputs.append({"__crashed__": f"raised {type(err).__name__}: {str(err)[:300]}"})
                break
            try:
                outputs.append(plain(out))
            except TypeError as err:
                outputs.append({"__crashed__": str(err)})
                break
        if "error" not in result:  # every case, or the cases up to the first that crashed
            result["outputs"] = outputs
    try:
        message = encode(result, contiguous=True)
    except MemoryError:
        del result
        message = encode({"error": f"{name} is over its memory: its results no longer fit in the "
                                   f"{(cap or 0) / 2**20:,.0f} MiB the re-check lets this exercise's process obtain"})
    except Exception as err:  # noqa: BLE001 - an output that is not plain data
        message = encode({"error": f"{name} returned something that is not plain data ({str(err)[:200]})"})
    _write_all(out_fd, message)


# ------------------------------------------------------------------------------- the fork server
def _wait(pid: int, seconds: float) -> str:
    """Wait for an exercise's process at most ``seconds``; kill it (and its group) then."""
    end = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > end:
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except OSError:
                    pass
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


def main() -> None:
    control_fd, lib = int(sys.argv[1]), sys.argv[2]
    sys.path.insert(0, lib)
    import torch

    torch.set_num_threads(1)
    # Paid once here, before any learner code and outside every exercise's time: torch, the
    # checks, the first use of their tripwires, and every module the lock-down uses.
    import _thread  # noqa: F401
    import array  # noqa: F401
    import ast  # noqa: F401
    import contextlib  # noqa: F401
    import ctypes  # noqa: F401
    import importlib  # noqa: F401
    import re  # noqa: F401
    import resource  # noqa: F401
    import threading  # noqa: F401
    import types  # noqa: F401
    import warnings  # noqa: F401

    import _grader_wire  # noqa: F401
    import utils.checks  # noqa: F401
    from utils.checks._core import warm_up

    _fixed_mmap_threshold()
    warm_up()
    _not_dumpable()
    ctrl = socket.socket(fileno=control_fd)
    with open("definitions.json", encoding="utf-8") as f:
        chunks = json.load(f)
    with open("spec.json", encoding="utf-8") as f:
        union_names = json.load(f)["exercises"]
    send(ctrl, {"ready": True})
    while True:
        msg, payload, fds = receive(ctrl)
        if msg is None or msg.get("quit") or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            break
        out_fd = fds[0]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the exercise's own process, in its own group (killed whole on time-out)
            code = 0
            try:
                os.setpgid(0, 0)
                run_exercise(str(msg["exercise"]), payload, chunks, union_names, out_fd)
            except BaseException as err:  # noqa: BLE001 - said on its own channel, if it still can
                code = 1
                try:
                    import _grader_wire

                    _write_all(out_fd, _grader_wire.encode(
                        {"error": f"the re-check process failed: {type(err).__name__}: {str(err)[:300]}"}))
                except BaseException:  # noqa: BLE001 - the grader says there was no result
                    pass
            finally:
                try:
                    sys.stdout.flush()
                except BaseException:  # noqa: BLE001
                    pass
                os._exit(code)  # no atexit hook or finaliser of learner code runs
        os.close(out_fd)  # from now on only the exercise's process holds its channel
        del payload
        try:
            os.setpgid(pid, pid)
        except OSError:  # the child did it first, or has already gone
            pass
        note = _wait(pid, float(msg.get("share", 1.0)))
        send(ctrl, {"done": msg.get("run"), "note": note})


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)
