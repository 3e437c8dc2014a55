"""rubrics.hw4.parameter_roles: pairing an unfused DecoderLM's parameters with a fused one's by
role, on synthetic (name, shape) lists written after the naming patterns of real submissions
(MiniTorch's named_parameters lists a module's own parameters before its submodules')."""
from __future__ import annotations

import random

import pytest

from rubrics.hw4.parameter_roles import ParameterMappingError, kind, map_parameters, role_key

V, P, D = 50, 8, 16
Params = list[tuple[str, tuple[int, ...]]]


def _linear(prefix: str, n_in: int, n_out: int, bias: bool = True) -> Params:
    return [(f"{prefix}.weights", (n_in, n_out))] + ([(f"{prefix}.bias", (n_out,))] if bias else [])


def _body(layer: str) -> Params:
    out: Params = []
    for proj in ("q_projection", "k_projection", "v_projection", "out_projection"):
        out += _linear(f"{layer}.attention.{proj}", D, D)
    return out + _linear(f"{layer}.ff.linear_in", D, 4 * D) + _linear(f"{layer}.ff.linear_out", 4 * D, D)


def _ln(prefix: str) -> Params:
    return [(f"{prefix}.weights", (D,)), (f"{prefix}.bias", (D,))]


def unfused() -> Params:
    """The official layout: LayerNorm1d submodules ln_1 / ln_2 after attention and ff, final ln last."""
    out: Params = [("token_embeddings.weights", (V, D)), ("position_embeddings.weights", (P, D))]
    for i in range(1, 5):
        layer = f"t_layer_{i}"
        out += _body(layer) + _ln(f"{layer}.ln_1") + _ln(f"{layer}.ln_2")
    return out + _linear("lm_head", D, V, bias=False) + _ln("ln")


def fused_own_params(gamma: str, beta: str, final: tuple[str, str], gammas_first: bool = False) -> Params:
    """A fused branch holding its LayerNorm parameters itself (so they are listed first),
    named by the templates `gamma` / `beta` with {i} for the LayerNorm's number."""
    def own(i: int) -> Params:
        return [(gamma.format(i=i), (D,)), (beta.format(i=i), (D,))]

    out: Params = [(final[0], (D,)), (final[1], (D,)),
                   ("token_embeddings.weights", (V, D)), ("position_embeddings.weights", (P, D))]
    for i in range(1, 5):
        layer = f"t_layer_{i}"
        pairs = own(1) + own(2)
        if gammas_first:
            pairs = [pairs[0], pairs[2], pairs[1], pairs[3]]
        out += [(f"{layer}.{n}", s) for n, s in pairs] + _body(layer)
    return out + _linear("lm_head", D, V, bias=False)


def _pairs(u: Params, f: Params) -> dict[str, str]:
    """map_parameters' pairs, for fused models with no parameter of their own."""
    mapping, fused_only = map_parameters(u, f)
    assert fused_only == []
    return mapping


def _renamed(mapping: dict[str, str]) -> dict[str, str]:
    return {u: f for u, f in mapping.items() if u != f}


def test_identical_lists_map_to_themselves_in_the_unfused_order() -> None:
    u = unfused()
    mapping = _pairs(u, u)
    assert list(mapping) == [n for n, _ in u]
    assert all(u_ == f for u_, f in mapping.items())


def test_same_names_in_another_order_pair_by_name() -> None:
    u = unfused()
    f = u[::-1]
    assert _renamed(_pairs(u, f)) == {}


def test_fused_ln1_gamma_names_listed_first() -> None:
    """`t_layer_1.ln_1.weights` ~ `t_layer_1.ln1_gamma`, `ln.bias` ~ `ln_beta` (position pairing
    would have put the token embedding into ln_gamma)."""
    f = fused_own_params("ln{i}_gamma", "ln{i}_beta", ("ln_gamma", "ln_beta"))
    renamed = _renamed(_pairs(unfused(), f))
    assert len(renamed) == 4 * 4 + 2
    assert renamed["t_layer_1.ln_1.weights"] == "t_layer_1.ln1_gamma"
    assert renamed["t_layer_3.ln_2.bias"] == "t_layer_3.ln2_beta"
    assert renamed["ln.weights"] == "ln_gamma" and renamed["ln.bias"] == "ln_beta"


def test_underscored_names_with_gammas_defined_first() -> None:
    f = fused_own_params("ln_{i}_gamma", "ln_{i}_beta", ("ln_gamma", "ln_beta"), gammas_first=True)
    renamed = _renamed(_pairs(unfused(), f))
    assert renamed["t_layer_4.ln_1.weights"] == "t_layer_4.ln_1_gamma"
    assert renamed["t_layer_4.ln_1.bias"] == "t_layer_4.ln_1_beta"
    assert renamed["t_layer_4.ln_2.weights"] == "t_layer_4.ln_2_gamma"


@pytest.mark.parametrize("gamma, beta", [("gamma{i}", "beta{i}"), ("ln{i}_weight", "ln{i}_bias"),
                                         ("ln{i}Scale", "ln{i}Shift"), ("norm_{i}.g", "norm_{i}.b"),
                                         ("layer_norm_{i}_w", "layer_norm_{i}_betta")])
def test_synonyms_and_separators(gamma: str, beta: str) -> None:
    f = fused_own_params(gamma, beta, ("final_gamma", "final_beta"))
    renamed = _renamed(_pairs(unfused(), f))
    assert len(renamed) == 18
    assert renamed["t_layer_2.ln_1.weights"] == "t_layer_2." + gamma.format(i=1)
    assert renamed["t_layer_2.ln_2.bias"] == "t_layer_2." + beta.format(i=2)
    assert renamed["ln.weights"] == "final_gamma"  # the only weight of its shape left at the top (rule 3)


def test_only_candidate_of_its_shape_and_kind_in_the_parent_module() -> None:
    """`attn_gamma` is no role-key match for ln_1.weights, but once ln_2 has paired by role
    it is the only weight of that shape left in t_layer_1."""
    u = [("t_layer_1.attention.weights", (D, D)), *_ln("t_layer_1.ln_1"), *_ln("t_layer_1.ln_2")]
    f = [("t_layer_1.attn_gamma", (D,)), ("t_layer_1.attn_beta", (D,)), ("t_layer_1.ln_2_gamma", (D,)),
         ("t_layer_1.ln_2_beta", (D,)), ("t_layer_1.attention.weights", (D, D))]
    assert _renamed(_pairs(u, f)) == {
        "t_layer_1.ln_1.weights": "t_layer_1.attn_gamma", "t_layer_1.ln_1.bias": "t_layer_1.attn_beta",
        "t_layer_1.ln_2.weights": "t_layer_1.ln_2_gamma", "t_layer_1.ln_2.bias": "t_layer_1.ln_2_beta"}


def test_ambiguous_names_raise_and_list_the_candidates() -> None:
    u = _ln("t_layer_1.ln_1") + _ln("t_layer_1.ln_2")
    f = [("t_layer_1.attn_gamma", (D,)), ("t_layer_1.mlp_gamma", (D,)),
         ("t_layer_1.attn_beta", (D,)), ("t_layer_1.mlp_beta", (D,))]
    with pytest.raises(ParameterMappingError) as err:
        _pairs(u, f)
    msg = str(err.value)
    assert "Unpaired in the unfused model: t_layer_1.ln_1.weights [16]" in msg
    assert "t_layer_1.mlp_beta [16]" in msg
    assert "t_layer_1.ln_1.weights could be any of t_layer_1.attn_gamma, t_layer_1.mlp_gamma" in msg


def test_a_missing_fused_beta_names_what_is_left() -> None:
    """A fused LayerNorm without a shift: nothing pairs with the unfused bias, and the
    leftover gamma-free names are reported, not paired with something else of that shape."""
    u = _ln("ln") + [("lm_head.weights", (D, V))]
    f = [("ln_gamma", (D,)), ("lm_head.weights", (D, V))]
    with pytest.raises(ParameterMappingError, match=r"unfused model: ln\.bias \[16\]\. Unpaired in the fused model: none"):
        _pairs(u, f)


def test_parameters_only_the_fused_model_has_are_returned_not_fatal() -> None:
    """A fused design that keeps the unfused LayerNorm modules and adds gamma/beta of its own
    (18 more parameters in a real submission): every unfused parameter pairs by name, the
    fused model's own ones come back in its order."""
    u = unfused()
    own = [(f"t_layer_{i}.fused_ln{j}_{w}", (D,)) for i in range(1, 5) for j in (1, 2) for w in ("gamma", "beta")]
    f = own[:4] + u + own[4:] + [("final_gamma", (D,)), ("final_beta", (D,))]
    mapping, fused_only = map_parameters(u, f)
    assert mapping == {n: n for n, _ in u}
    assert fused_only == own + [("final_gamma", (D,)), ("final_beta", (D,))]
    mapping, fused_only = map_parameters(_ln("ln"), [("ln_gamma", (D,)), ("ln_beta", (D,)), ("ln_extra", (D,))])
    assert mapping == {"ln.weights": "ln_gamma", "ln.bias": "ln_beta"} and fused_only == [("ln_extra", (D,))]


def test_same_name_other_shape_is_not_paired() -> None:
    u = [("lm_head.weights", (D, V))]
    f = [("lm_head.weights", (V, D))]
    with pytest.raises(ParameterMappingError, match=r"lm_head\.weights \[16, 50\].*lm_head\.weights \[50, 16\]"):
        _pairs(u, f)


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ParameterMappingError, match="twice"):
        _pairs([("a.weights", (D,)), ("a.weights", (D,))], [("a.weights", (D,))])


def test_a_weight_never_pairs_with_a_bias_even_when_it_is_the_only_candidate() -> None:
    u = _ln("ln")
    f = [("ln_gamma", (D,)), ("ln_scale2", (D,))]  # two weights, no bias: the shift has no counterpart
    with pytest.raises(ParameterMappingError) as err:
        _pairs(u, f)
    assert "ln.bias [16]" in str(err.value) and "ln_scale2 [16]" in str(err.value)
    u2 = [("t_layer_1.ln_1.bias", (D,))]
    f2 = [("t_layer_1.ln1_gamma", (D,))]
    with pytest.raises(ParameterMappingError):
        _pairs(u2, f2)


def test_names_without_a_kind_pair_only_with_names_without_one() -> None:
    assert kind("t_layer_1.ln_1.weights") == "weight" and kind("ln_beta") == "bias"
    assert kind("t_layer_1.offset") is None and kind("x.b_w") is None  # both kinds named: none
    assert role_key("t_layer_1.ln_1.weights") == role_key("t_layer_1.ln1_gamma") == role_key("t_layer_1.ln_1_gamma")
    assert role_key("t_layer_1.ln_1.weights") != role_key("t_layer_1.ln_1.bias")
    assert role_key("t_layer_1.ln_1.weights") != role_key("t_layer_1.ln_2.weights")
    assert role_key("t_layer_1.ln_1.weights") != role_key("t_layer_2.ln_1.weights")
    with pytest.raises(ParameterMappingError):
        _pairs([("ln.weights", (D,))], [("ln.offset", (D,))])
    assert _pairs([("ln.offset", (D,))], [("ln_offset_fused", (D,))]) == {"ln.offset": "ln_offset_fused"}


def test_random_renamings_never_cross_kinds() -> None:
    """Fused LayerNorm names drawn from every synonym (and from no kind at all), in random
    order: whatever pairs, pairs a weight with a weight and a bias with a bias."""
    weight_words = ["gamma", "weights", "weight", "w", "g", "scale"]
    bias_words = ["beta", "bias", "b", "betta", "shift"]
    rng = random.Random(11868)
    u = unfused()
    mapped = failed = 0
    for _ in range(300):
        f: Params = []
        truth: dict[str, str] = {}
        for name, shape in u:
            new = name
            if ".ln" in name or name.startswith("ln."):
                base = name.rsplit(".", 1)[0].replace(".ln_", ".ln").replace("ln_", "ln")
                word = rng.choice(weight_words if name.endswith("weights") else bias_words)
                word = "p" if rng.random() < 0.01 else word  # now and then a name of no kind
                sep = rng.choice(["_", "."] + ([""] if base[-1].isdigit() else []))  # "lngamma" is one word
                new = f"{base}{sep}{word}"
            f.append((new, shape))
            truth[name] = new
        rng.shuffle(f)
        try:
            mapping = _pairs(u, f)
        except ParameterMappingError:
            failed += 1
            continue
        mapped += 1
        for a, b in mapping.items():
            assert kind(a) == kind(b), (a, b)
            if kind(truth[a]) is not None:
                assert b == truth[a], (a, b)  # a named role is always found, never guessed otherwise
    assert mapped > 100 and failed > 10  # both outcomes are exercised
