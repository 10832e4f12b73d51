"""The language the course speaks to a learner (issue 28 §4).

The Chinese edition's set-up cell sets ``COURSE_LANG=zh`` (unless it is already set), and the
environment variable always wins: ``COURSE_LANG=en`` gives English messages in the Chinese
notebooks, ``COURSE_LANG=zh`` Chinese ones in the English notebooks. ``set_language`` sets the
default for a kernel where the variable is unset.

Only what a learner *reads* is translated, at the point where it is shown: a check's verdict as
IPython displays it (``CheckFailure._render_traceback_``) and the lines the checks print (✅, quiz
verdicts). ``str(err)`` stays English, so the grader's records, the tests and the mutant report
compare one language. Translation is line by line: the fixed frames of every message (how many
cases failed, the first failing case, likely mistake, clue, quiz verdicts) come from ``FRAMES``
below; a sentence with no entry is shown in English.
"""
from __future__ import annotations

import os
import re

ENV = "COURSE_LANG"
LANGUAGES = ("en", "zh")
_default = "en"


def set_language(lang: str) -> None:
    """The language for this kernel when ``COURSE_LANG`` is not set: ``"en"`` or ``"zh"``."""
    global _default
    if lang not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {lang!r}")
    _default = lang


def language() -> str:
    """``COURSE_LANG`` if it names a known language, else the default set by ``set_language``."""
    env = os.environ.get(ENV, "").strip().lower()
    return env if env in LANGUAGES else _default


# (English pattern, Chinese replacement): applied to each line, first match wins; the patterns
# match whole lines, or a prefix whose rest is kept (and translated again, so that nested frames
# such as "Likely mistake:" after a sentence are found too).
FRAMES: list[tuple[re.Pattern, str]] = [(re.compile(p), r) for p, r in [
    (r"^✅ (?P<n>\S+): (?P<k>\d+) visible cases passed\. Grading runs more cases, on new random inputs\.$",
     r"✅ \g<n>：\g<k> 个可见用例全部通过。评分时会在新的随机输入上运行更多用例。"),
    (r"^(?P<n>\S+): (?P<f>\d+) of (?P<m>\d+) cases failed \((?P<c>\d+) raised an error\)\.$",
     r"\g<n>：\g<m> 个用例中有 \g<f> 个失败（其中 \g<c> 个抛出了错误）。"),
    (r"^(?P<n>\S+): (?P<f>\d+) of (?P<m>\d+) cases failed\.$", r"\g<n>：\g<m> 个用例中有 \g<f> 个失败。"),
    (r"^First failing case: (?P<rest>.*)$", r"第一个失败的用例：\g<rest>"),
    (r"^Likely mistake: (?P<rest>.*)$", r"可能的错误：\g<rest>"),
    (r"^Clue: (?P<rest>.*)$", r"线索：\g<rest>"),
    (r"^What the failing cases share: (?P<rest>.*)$", r"失败用例的共同点：\g<rest>"),
    (r"^Where: (?P<rest>.*)$", r"位置：\g<rest>"),
    (r"^✅ Right: (?P<shown>.*?)\.(?: (?P<why>.*))?$", r"✅ 正确：\g<shown>。\g<why>"),
    (r"^Not quite: (?P<shown>.*) is not the answer\. A hint: (?P<hint>.*)$", r"还不对：\g<shown> 不是答案。提示：\g<hint>"),
    (r"^Not quite: (?P<shown>.*) is not the answer\. Think it through again\.$", r"还不对：\g<shown> 不是答案。再想一想。"),
    (r"^Answer recorded: (?P<a>.*) \(graded when you submit\)\.$", r"已记录答案：\g<a>（提交后评分）。"),
    (r"^Set your answer to one of (?P<c>.*)\.$", r"请把答案设为 \g<c> 之一。"),
    (r"^Set your answer to a number \(a literal, or an expression that evaluates to one\)\.$",
     r"请把答案设为一个数（字面量，或能求值为数的表达式）。"),
    (r"^The answer should be one letter out of (?P<c>.*); got (?P<g>.*)\.$", r"答案应当是 \g<c> 中的一个字母；得到的是 \g<g>。"),
    (r"^The answer should be a number \(int or float\); got (?P<g>.*)\.$", r"答案应当是一个数（int 或 float）；得到的是 \g<g>。"),
    (r"^The answer should be a finite number; got (?P<g>.*)\.$", r"答案应当是一个有限的数；得到的是 \g<g>。"),
    (r"^✅ this section uses your `(?P<n>[^`]+)`, which passes its check\.$", r"✅ 本节使用你的 `\g<n>`，它通过了检查。"),
    (r"^⚠️ this section uses your `(?P<n>[^`]+)`, which does not pass its check yet \((?P<d>.*)\)\. "
     r"What follows is computed with it and may be wrong: fix it and run this section again\.$",
     r"⚠️ 本节使用你的 `\g<n>`，它还没有通过检查（\g<d>）。下面的结果是用它算出的，可能不对：改正之后请重新运行本节。"),
    # the grader's own lines in the feedback of a Chinese submission (grader/pipeline.py)
    (r"^independent re-check failed: (?P<rest>.*)$", r"独立复查未通过：\g<rest>"),
    (r"^✅ passed the independent re-check on new inputs, which is the grade \(in the notebook this cell did not pass: "
     r"(?P<rest>.*)$", r"✅ 在新的输入上通过了独立复查，成绩以它为准（在笔记本中这个单元格没有通过：\g<rest>"),
    (r"^  (?P<what>\S+) is off at (?P<k>\d+) of (?P<m>\d+) positions; (?P<rest>.*)$",
     r"  \g<what> 在 \g<m> 个位置中有 \g<k> 个不对；\g<rest>"),
]]
_INLINE = [(re.compile(p), r) for p, r in [
    (r"^  (?P<what>\S+) has NaN where a number is expected, or a number where NaN is expected \((?P<k>\d+) values?\), "
     r"first at index (?P<i>\([^)]*\)): expected (?P<x>\S+), got (?P<g>[^.]+)\.$",
     r"  \g<what> 在应当是数的地方出现了 NaN，或在应当是 NaN 的地方出现了数（\g<k> 个值），第一个位于下标 \g<i>：期望 \g<x>，得到 \g<g>。"),
    (r"largest error (?P<e>\S+) at index (?P<i>\([^)]*\)): expected (?P<x>\S+), got (?P<g>[^,;]+)",
     r"最大误差 \g<e>，位于下标 \g<i>：期望 \g<x>，得到 \g<g>"),
    # the guards' verdict on an input changed in place (utils/checks/_guards.py)
    (r"\bchanged its input (?P<a>[\w.\[\]]+) in place: ", r"原地修改了它的输入 \g<a>："),
    (r"\bchanged its input (?P<a>[\w.\[\]]+) in place\b", r"原地修改了它的输入 \g<a>"),
    (r"\bits shape went from (?P<b>\([^)]*\)) to (?P<c>\([^)]*\)) \(an in-place reshape such as ", r"它的形状从 \g<b> 变成了 \g<c>（原地改变形状的操作，例如 "),
    (r"\bits dtype went from (?P<b>\S+) to (?P<c>\S+?)(?=[.;]|$)", r"它的 dtype 从 \g<b> 变成了 \g<c>"),
    (r"\b(?P<k>\d+) of its (?P<n>\d+) values changed \(", r"它的 \g<n> 个值中有 \g<k> 个被改变了（"),
    (r"\bor an op with inplace=True\)", r"或带 inplace=True 的操作）"),
    (r"\bits length went from (?P<b>\d+) to (?P<c>\d+) \(append, pop, extend on the caller's list\)",
     r"它的长度从 \g<b> 变成了 \g<c>（对调用者的列表做了 append、pop 或 extend）"),
    (r"\bits items changed or were reordered \(list\.reverse\(\), list\.sort\(\), item assignment on the caller's list\)",
     r"它的元素被改动或重新排序了（list.reverse()、list.sort()，或对调用者的列表按下标赋值）"),
    (r" ?\(list\.reverse\(\), list\.sort\(\), item assignment on the caller's list\)",
     r"（list.reverse()、list.sort()，或对调用者的列表按下标赋值）"),
    (r"\bits entries changed \(assignment, pop or update on the caller's dict\)", r"它的条目变了（对调用者的字典做了赋值、pop 或 update）"),
    (r"\. Inputs are never modified: the caller's (?P<a>[\w.\[\]]+) must be left as it was \(build a new tensor or list instead\)\.",
     r"。输入永远不能被修改：调用者的 \g<a> 必须保持原样（请新建一个张量或列表）。"),
    (r"\bits strides or storage offset changed \(an in-place view op such as ", r"它的步长或存储偏移变了（原地的视图操作，例如 "),
    (r"\)\. Inputs are never modified\.", r"）。输入永远不能被修改。"),
    (r"\btolerance\b", "容差"),
    (r" Likely mistake: ", " 可能的错误："),
]]


def _line(line: str) -> str:
    for pat, rep in FRAMES:
        m = pat.match(line)
        if m:
            rest = m.groupdict().get("rest")
            line = pat.sub(rep, line, count=1)
            if rest:  # a frame inside a frame ("independent re-check failed: softmax: 3 of 32 cases failed.")
                inner = _line(rest)
                if inner != rest:
                    line = line[::-1].replace(rest[::-1], inner[::-1], 1)[::-1]
            break
    for pat, rep in _INLINE:
        line = pat.sub(rep, line)
    return line


_TABLE: list | None = None


def _table() -> list:
    """The checks' named mistakes in Chinese (``utils/data/messages_zh.json``, generated by
    ``tools/i18n.py`` from ``i18n/zh/messages.po``), longest English first."""
    global _TABLE
    if _TABLE is None:
        import json
        from pathlib import Path

        path = Path(__file__).parent / "data" / "messages_zh.json"
        table = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        _TABLE = sorted(table.items(), key=lambda kv: -len(kv[0]))
    return _TABLE


_WHYS: dict = {}


def sealed_why(qid: str, lang: str = "zh") -> str | None:
    """A self-check question's explanation in ``lang``, sealed with its right answer as the English
    one is (``utils/data/whys_<lang>.json``, generated by ``tools/i18n.py``); None if there is none."""
    if lang not in _WHYS:
        import json
        from pathlib import Path

        path = Path(__file__).parent / "data" / f"whys_{lang}.json"
        _WHYS[lang] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return _WHYS[lang].get(qid)


_CASES: dict | None = None
FIRST_CASE = "First failing case: "


def _case_label(line: str) -> str:
    """"First failing case: <label>: <arguments>" with the label in Chinese, when the catalogue has
    it (``utils/data/cases_zh.json``, from ``i18n/zh/cases.po``)."""
    global _CASES
    if _CASES is None:
        import json
        from pathlib import Path

        path = Path(__file__).parent / "data" / "cases_zh.json"
        _CASES = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    label, sep, rest = line[len(FIRST_CASE):].partition(": ")
    zh = _CASES.get(label)
    return f"{FIRST_CASE}{zh}{'：' if sep else ''}{rest}" if zh else line


def tr(text: str, lang: str | None = None) -> str:
    """``text`` in ``lang``, by default the learner's language (unchanged in English)."""
    if (lang or language()) != "zh" or not text:
        return text
    text = "\n".join(_case_label(line) if line.startswith(FIRST_CASE) else line for line in str(text).split("\n"))
    for en, zh in _table():
        if en in text:
            text = text.replace(en, zh)
    return "\n".join(_line(line) for line in text.split("\n"))


def say(text: str) -> None:
    """``print(tr(text))``: what the checks print."""
    print(tr(text))
