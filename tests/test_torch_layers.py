"""The torch engine records each kind of decoder layer once (fabric.capture.torch_layers): the recording must be the
one every layer running gives, op for op, for every family, both runtimes' recordings and any routing.

Skips cleanly without the [capture] extra (torch, transformers)."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fabric.capture import torch_engine as te  # noqa: E402
from fabric.capture.spec import builtin_config, spec_from_config  # noqa: E402

SMALL = {   # built-in configs cut to a few layers (shapes kept: the meta device holds no weights)
    "deepseek-r1": dict(num_hidden_layers=6, first_k_dense_replace=2),
    "qwen3-235b-a22b": dict(num_hidden_layers=5, mlp_only_layers=[2]),
    "llama-3-70b": dict(num_hidden_layers=4),
}
GENERIC = {  # transformers decoders outside the built-in families (eager runtime only)
    "gemma2": dict(model_type="gemma2", hidden_size=256, num_hidden_layers=5, vocab_size=1024, num_attention_heads=8,
                   num_key_value_heads=4, head_dim=32, intermediate_size=512),
    "mixtral": dict(model_type="mixtral", hidden_size=256, num_hidden_layers=4, vocab_size=1024,
                    num_attention_heads=8, num_key_value_heads=4, head_dim=32, intermediate_size=512,
                    num_local_experts=8, num_experts_per_tok=2),
}


def _model(name):
    cfg = {**builtin_config(name), **SMALL[name]} if name in SMALL else dict(GENERIC[name])
    return spec_from_config(cfg, name, generic=True), cfg


def _both(spec, cfg, **kw):
    full = te.record(spec, cfg, 64, share=False, **kw)
    shared = te.record(spec, cfg, 64, share=True, **kw)
    return full, shared


@pytest.mark.parametrize("name", list(SMALL) + list(GENERIC))
def test_shared_recording_is_the_full_one(name):
    spec, cfg = _model(name)
    for s, c, detail in ((spec, cfg, False), (*te.shard_config(spec, cfg, 4), True)):
        for routed in (True, False):
            full, shared = _both(s, c, detail=detail, routed=routed, batch=3, seed=5)
            assert shared[0] == full[0], (name, detail, routed)
            if detail:
                assert shared[2] == full[2], (name, routed)


@settings(max_examples=8, deadline=None)
@given(layers=st.integers(2, 6), dense=st.integers(0, 6), batch=st.integers(1, 4), seed=st.integers(0, 2**31),
       routed=st.booleans())
def test_shared_recording_property(layers, dense, batch, seed, routed):
    """Any mix of dense and MoE layers, any batch and routing seed: the same ops, module paths and shapes."""
    cfg = {**builtin_config("toy-mla"), "num_hidden_layers": layers, "first_k_dense_replace": min(dense, layers)}
    spec = spec_from_config(cfg, "toy")
    full, shared = _both(*te.shard_config(spec, cfg, 2), detail=True, routed=routed, batch=batch, seed=seed)
    assert shared[0] == full[0] and shared[2] == full[2]


def test_layers_of_a_kind_run_twice(monkeypatch):
    """DeepSeek: 2 dense + 4 MoE layers; the first two of each kind run, the later MoE layers (4, 5) are copies
    whose routed experts alone run (each copy's own routing)."""
    spec, cfg = _model("deepseek-r1")
    n, real = [0], te._detail

    def counting(*a):
        n[0] += 1
        return real(*a)
    monkeypatch.setattr(te, "_detail", counting)
    runs = {}
    for share in (False, True):
        n[0] = 0
        detail = te.record(spec, cfg, 64, detail=True, share=share)[2]
        runs[share] = (n[0], detail)
    (full, detail), (shared, _) = runs[False], runs[True]
    assert full == len(detail)
    copied = [d for d in detail if d["module"].startswith(("model.layers.4", "model.layers.5"))
              and ".mlp.experts" not in d["module"]]
    assert copied and shared == full - len(copied), (shared, full, len(copied))


def test_signature_splits_layer_kinds():
    import types

    import torch

    from fabric.capture.torch_layers import signature
    for name, kinds in (("deepseek-r1", [0, 0, 1, 1, 1, 1]), ("gemma2", [0, 1, 0, 1, 0])):
        spec, cfg = _model(name)
        conf, cls = te._model_class(spec, cfg)
        with torch.device("meta"):
            model = cls(conf)
        sigs = [signature(layer, types.SimpleNamespace()) for layer in model.model.layers]
        assert [sorted(set(sigs), key=sigs.index).index(s) for s in sigs] == kinds, name


def test_layer_that_reads_its_index_is_not_copied(monkeypatch):
    """A forward that depends on its layer index at run time (here: odd layers) fails the second layer's check:
    every layer runs, and layer 3 is not a copy of layer 0."""
    from transformers.models.llama import modeling_llama
    orig = modeling_llama.LlamaDecoderLayer.forward

    def odd(self, *a, **k):
        out = orig(self, *a, **k)
        return out * 1.0 if self.self_attn.layer_idx % 2 else out
    monkeypatch.setattr(modeling_llama.LlamaDecoderLayer, "forward", odd)
    spec, cfg = _model("llama-3-70b")
    full, shared = _both(spec, cfg)
    assert shared[0] == full[0]
    assert {m for n, m, _ in full[0] if n == "mul" and m in ("model.layers.1", "model.layers.3")} == \
        {"model.layers.1", "model.layers.3"}
