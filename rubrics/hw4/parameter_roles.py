"""Pair the parameters of a submission's unfused DecoderLM with those of its fused one, by role.

Problem 3's fused branch (`use_fused_kernel=True`) is the student's own design, so the two
models' parameters may differ in name and in named_parameters order (MiniTorch lists a
module's own parameters before its submodules', so fused LayerNorm parameters held by the
TransformerLayer itself come first). Pairing by position would copy, say, the token
embedding into a LayerNorm gamma. `map_parameters` pairs them one to one, in three rules,
each applied only where it is unique:

1. the same name and shape;
2. the same role key: the name's words with separators, case and LayerNorm words (ln, norm,
   layernorm) dropped, plus its kind, "weight" (weight/weights/w/gamma/scale/g) or "bias"
   (bias/beta/betta/shift/b), so `t_layer_1.ln_1.weights` ~ `t_layer_1.ln1_gamma` ~
   `t_layer_1.ln_1_gamma`, and `ln.bias` ~ `ln_beta`; shapes must agree;
3. the only parameter of that shape and kind in the same module or its parent/child
   (a LayerNorm1d flattened into the layer that held it), repeated while it pairs more.

A weight-kind parameter never pairs with a bias-kind one (rules 2 and 3 compare kinds, and a
name that names both kinds has no kind). A parameter of the unfused model left unpaired raises
ParameterMappingError, whose message (shown to the student) names what was left on each side.
Parameters only the fused model has (a fused design that adds its own LayerNorm gamma and
beta beside the unfused modules, say) are returned, not fatal: they keep the fused model's
own values, and Problem 3 names them where it compares gradients.

Standard library only: this runs in the sandboxed child on a bare GPU machine.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

Shape = tuple[int, ...]
RoleKey = tuple[tuple[str, ...], str]  # (the name's other words, its kind)

WEIGHT_WORDS = frozenset({"weight", "weights", "w", "gamma", "scale", "g"})
BIAS_WORDS = frozenset({"bias", "biases", "beta", "betta", "shift", "b"})
NORM_WORDS = frozenset({"ln", "norm", "layernorm", "lnorm"})
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_LISTED = 6  # names listed per side in an error message (the student reads it)
_AMBIGUOUS = 3


class ParameterMappingError(ValueError):
    """The two models' parameters could not be paired one to one; the message says why."""


def words(name: str) -> list[str]:
    """Lower-case words and numbers of a parameter name: `t_layer_1.ln1Gamma` -> t layer 1 ln 1 gamma."""
    out = [w.lower() for w in _WORD.findall(name)]
    merged: list[str] = []
    for w in out:  # "layer_norm" is one LayerNorm word, not the word "layer"
        if w == "norm" and merged and merged[-1] == "layer":
            merged[-1] = "layernorm"
        else:
            merged.append(w)
    return merged


def kind(name: str) -> str | None:
    """"weight", "bias", or None (no kind word, or words of both kinds)."""
    ws = set(words(name))
    is_weight, is_bias = bool(ws & WEIGHT_WORDS), bool(ws & BIAS_WORDS)
    if is_weight == is_bias:
        return None
    return "weight" if is_weight else "bias"


def role_key(name: str) -> RoleKey | None:
    """The key of rule 2, or None for a name without a (single) kind."""
    k = kind(name)
    if k is None:
        return None
    rest = tuple(w for w in words(name) if w not in WEIGHT_WORDS | BIAS_WORDS | NORM_WORDS)
    return rest, k


def owner(name: str) -> str:
    """The module path holding a parameter: `t_layer_1.ln_1.weights` -> `t_layer_1.ln_1`."""
    return name.rsplit(".", 1)[0] if "." in name else ""


def _parent(path: str) -> str | None:
    if not path:
        return None
    return path.rsplit(".", 1)[0] if "." in path else ""


def _related(a: str, b: str) -> bool:
    return a == b or _parent(a) == b or _parent(b) == a


def _shapes(params: Sequence[tuple[str, Sequence[int]]], side: str) -> dict[str, Shape]:
    out: dict[str, Shape] = {}
    for name, shape in params:
        if name in out:
            raise ParameterMappingError(f"the {side} model lists parameter {name!r} twice")
        out[name] = tuple(int(s) for s in shape)
    return out


def _by_role(left_u: dict[str, Shape], left_f: dict[str, Shape]) -> dict[str, str]:
    """Rule 2: pairs whose role key is held by exactly one parameter on each side."""
    groups_u: dict[RoleKey, list[str]] = defaultdict(list)
    groups_f: dict[RoleKey, list[str]] = defaultdict(list)
    for names, groups in ((left_u, groups_u), (left_f, groups_f)):
        for n in names:
            key = role_key(n)
            if key is not None:
                groups[key].append(n)
    pairs = {}
    for key, us in groups_u.items():
        fs = groups_f.get(key, [])
        if len(us) == 1 and len(fs) == 1 and left_u[us[0]] == left_f[fs[0]]:
            pairs[us[0]] = fs[0]
    return pairs


def _candidates(name: str, shape: Shape, others: dict[str, Shape]) -> list[str]:
    k, o = kind(name), owner(name)
    return [n for n, s in others.items() if s == shape and kind(n) == k and _related(o, owner(n))]


def _by_shape(left_u: dict[str, Shape], left_f: dict[str, Shape]) -> dict[str, str]:
    """Rule 3, to a fixed point: a pair is made only when each is the other's only candidate.
    Removes what it pairs from `left_u` and `left_f`."""
    pairs: dict[str, str] = {}
    progress = True
    while progress:
        progress = False
        for u in list(left_u):
            cands = _candidates(u, left_u[u], left_f)
            if len(cands) == 1 and _candidates(cands[0], left_f[cands[0]], left_u) == [u]:
                pairs[u] = cands[0]
                del left_u[u], left_f[cands[0]]
                progress = True
    return pairs


def _more(items: list[str], limit: int, sep: str = ", ") -> str:
    rest = f"{sep}and {len(items) - limit} more" if len(items) > limit else ""
    return sep.join(items[:limit]) + rest


def listing(params: Sequence[tuple[str, Sequence[int]]]) -> str:
    """`name [shape]` for each, the first few and how many more; "none" for none."""
    return _more([f"{n} {list(s)}" for n, s in params], _LISTED) or "none"


def map_parameters(unfused: Sequence[tuple[str, Sequence[int]]],
                   fused: Sequence[tuple[str, Sequence[int]]]) -> tuple[dict[str, str], list[tuple[str, Shape]]]:
    """(unfused name -> fused name for every unfused parameter, in the unfused order; the
    fused model's parameters left over, (name, shape) in its order).

    `unfused` / `fused`: (name, shape) as the models' named_parameters() list them."""
    shapes_u, shapes_f = _shapes(unfused, "unfused"), _shapes(fused, "fused")
    pairs = {n: n for n in shapes_u if shapes_f.get(n) == shapes_u[n]}
    left_u = {n: s for n, s in shapes_u.items() if n not in pairs}
    left_f = {n: s for n, s in shapes_f.items() if n not in pairs}
    for u, f in _by_role(left_u, left_f).items():
        pairs[u] = f
        del left_u[u], left_f[f]
    pairs.update(_by_shape(left_u, left_f))
    if left_u:
        ambiguous = [f"{u} could be any of {', '.join(c)}" for u in left_u
                     if len(c := _candidates(u, left_u[u], left_f)) > 1]
        raise ParameterMappingError(
            "could not pair the parameters of DecoderLM(use_fused_kernel=False) one to one with those "
            "of DecoderLM(use_fused_kernel=True), so the two models cannot be given the same values. "
            f"Unpaired in the unfused model: {listing(list(left_u.items()))}. "
            f"Unpaired in the fused model: {listing(list(left_f.items()))}. "
            + (f"Ambiguous: {_more(ambiguous, _AMBIGUOUS, '; ')}. " if ambiguous else "")
            + "Parameters pair by the same name and shape, else by role (the same module and LayerNorm, "
            "and weight/gamma/scale vs bias/beta/shift: ln_1.weights ~ ln1_gamma ~ ln_1_gamma), else as the "
            "only parameter of that shape and kind in the same module; name each fused parameter after the "
            "role it plays."
        )
    return {u: pairs[u] for u in shapes_u}, list(left_f.items())
