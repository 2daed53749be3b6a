"""Reward functions in the shape of trl.rewards, for GRPOTrainer.

    from posttrain.rewards import accuracy_reward

accuracy_reward(completions, solution, log_extra=None, **kwargs) takes
completions as text or as TRL's [{"role": "assistant", "content": ...}]
messages and one solution per completion.  It is not TRL's math_verify
check (no LaTeX parser here): the answer is the content of the completion's
last \\boxed{...} (TRL asks for a boxed answer first too), the gold answer
the solution's last \\boxed{...} or the whole solution; both are compared
after removing spaces, "$" and a trailing ".", numbers and a\\frac{p}{q} /
p/q fractions by value.  A solution that is empty gives None (the
completion is declined, as TRL does for a gold answer it cannot parse).
"""

import re

__all__ = ["accuracy_reward"]

_NUM = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_FRAC = re.compile(r"^([-+]?)\\d?frac\{([^{}]+)\}\{([^{}]+)\}$")


def _boxed(text):
    """The content of the last \\boxed{...} (braces balanced), or None."""
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    j = i + len("\\boxed{")
    depth = 1
    for k in range(j, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j:k]
    return None


def _norm(s):
    s = re.sub(r"\s+", "", s).replace("$", "").replace("\\left", "").replace("\\right", "")
    s = s.rstrip(".")
    return s


def _value(s):
    """A number's value (also \\frac{p}{q} and p/q), or None."""
    if _NUM.match(s):
        return float(s)
    m = _FRAC.match(s)
    if m:
        sign, p, q = m.groups()
    elif s.count("/") == 1:
        sign, (p, q) = "", s.split("/")
    else:
        return None
    p, q = _value(p), _value(q)
    if p is None or not q:
        return None
    return (-p if sign == "-" else p) / q


def _same(answer, gold):
    a, g = _norm(answer), _norm(gold)
    if a == g:
        return True
    va, vg = _value(a), _value(g)
    return va is not None and vg is not None and abs(va - vg) <= 1e-9 * max(1.0, abs(vg))


def _content(c):
    if isinstance(c, (list, tuple)):
        return c[-1]["content"] if c else ""
    return c


def accuracy_reward(completions, solution, log_extra=None, **kwargs):
    """1.0 when the completion's last \\boxed{} answer matches the solution,
    else 0.0; None when the solution is empty (see the module docstring)."""
    rewards, gold_s, ans_s = [], [], []
    for c, sol in zip(completions, solution):
        text = _content(c) or ""
        gold = _boxed(sol) if _boxed(sol) is not None else sol
        if not gold or not _norm(gold):
            rewards.append(None)
            gold_s.append("[unparseable]")
            ans_s.append("[skipped]")
            continue
        ans = _boxed(text)
        rewards.append(1.0 if ans is not None and _same(ans, gold) else 0.0)
        gold_s.append(_norm(gold))
        ans_s.append(_norm(ans) if ans is not None else "[unparseable]")
    if log_extra is not None:
        log_extra("solution", list(solution))
        log_extra("gold_parsed", gold_s)
        log_extra("answer_parsed", ans_s)
    return rewards
