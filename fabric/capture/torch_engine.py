"""The torch capture engine: record the real transformers model on the meta device, then fuse.

1. Instantiate the model class of the config (DeepSeek-V3 / Kimi-K2, Qwen3-MoE, Llama) on torch's meta device:
   no weights, nothing downloaded, no memory for parameters.
2. Pre-fill a DynamicCache with meta tensors of `context` tokens and run one decode step under
   `torch.inference_mode()` inside a TorchDispatchMode that records every aten op with its argument shapes and the
   module it ran in (global forward pre/post hooks keep the module stack).
   Routing is data dependent, which meta tensors cannot answer: the experts module's forward is replaced by one that
   asks the seeded routing oracle (fabric.capture.plan.route) which experts each token uses and then runs exactly
   those experts' GEMMs on the real expert weight tensors. Decoder layers of one kind (same modules, shapes and
   settings) are recorded once and copied to the others (fabric.capture.torch_layers): the same recording with
   fewer ops through the meta device's Python kernels (DeepSeek-R1: 452 instead of 12,118 for the fused graph, whose
   recording runs one expert per MoE layer; 5,590 for the eager one, whose routed experts run in every layer).
3. Fuse the recording as a serving engine does: q_a/kv_a projections into one GEMM, q/k/v and gate/up into one,
   the naive MLA (kv_b expanded over every cached token + SDPA) into weight absorption (W_UK, W_UV) around one MLA
   decode-attention kernel that reads the latent cache once, the per-expert GEMMs into grouped GEMMs, RoPE and the
   cache append into one kernel, each residual add into the following RMSNorm.
4. Parallel styles come from the config's `base_model_tp_plan` (colwise / rowwise; an all-reduce follows row-parallel
   outputs, inside an MoE block after routed + shared outputs are summed), with a per-architecture override for MLA
   attention, which that plan leaves out.

The result is the same logical graph (fabric.capture.graph.LogicalOp) the analytic engine builds from the config.

Eager runtime (`eager_graph`): no fusion. A TP-sharded copy of the model (`shard_config`) is recorded with each op's
inputs, outputs and aliasing, and every recorded aten op that launches a kernel becomes one LogicalOp of type "aten"
(fabric.capture.runtime.aten_parts costs it by shape).
"""
from __future__ import annotations

import contextlib
import fnmatch
import gc
import types
from collections import defaultdict

from fabric.capture.graph import LogicalOp
from fabric.capture.plan import route
from fabric.capture.spec import ModelSpec
from fabric.errors import ConfigError

# Parallel styles the serving engine uses where base_model_tp_plan is silent (MLA attention, router, experts).
MLA_TP_OVERRIDE = {
    "layers.*.self_attn.q_a_proj": "replicated",
    "layers.*.self_attn.kv_a_proj_with_mqa": "replicated",
    "layers.*.self_attn.q_b_proj": "colwise",
    "layers.*.self_attn.kv_b_proj": "colwise",
    "layers.*.self_attn.o_proj": "rowwise",
}


@contextlib.contextmanager
def paused_gc():
    """No cyclic garbage collection while torch and transformers import and a step is recorded and lowered: they
    allocate ~0.6 M objects that live on, and the collections their allocation triggers walk them again and again
    (~0.5 s of a DeepSeek-R1 TP64 capture). Reference counting frees as usual; the cycles left (the meta model's)
    go at the collector's next run afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _import_torch():
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigError(f"--engine torch needs torch and transformers (pip install 'scaleup-fabric[capture]'): "
                          f"{exc}") from None
    return torch, transformers


def _model_class(spec: ModelSpec, config: dict):
    torch, tf = _import_torch()
    cfg = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "quantization_config",
                                                          "auto_map", "_name_or_path")}
    if spec.family == "generic":     # any transformers decoder (eager runtime only)
        try:
            conf = tf.AutoConfig.for_model(spec.model_type, **cfg)
        except (ValueError, KeyError) as exc:
            raise ConfigError(f"torch capture: transformers does not know model_type {spec.model_type!r}: {exc}") \
                from None
        conf._attn_implementation = "sdpa"

        def build(c):
            try:
                return tf.AutoModelForCausalLM.from_config(c)
            except ValueError:            # no SDPA path for this architecture: its eager attention (matmul, softmax)
                c._attn_implementation = "eager"
                return tf.AutoModelForCausalLM.from_config(c)
        return conf, build
    if spec.family == "mla_moe":
        conf, cls = tf.DeepseekV3Config(**cfg), tf.DeepseekV3ForCausalLM
    elif spec.family == "gqa_moe":
        conf, cls = tf.Qwen3MoeConfig(**cfg), tf.Qwen3MoeForCausalLM
    elif spec.model_type == "qwen3":
        conf, cls = tf.Qwen3Config(**cfg), tf.Qwen3ForCausalLM
    else:
        conf, cls = tf.LlamaConfig(**cfg), tf.LlamaForCausalLM
    conf._attn_implementation = "sdpa"
    return conf, cls


class _Recorder:
    def __init__(self, torch):
        from torch.utils._python_dispatch import TorchDispatchMode
        self.ops: list[tuple[str, str, list]] = []
        self.detail: list[dict] | None = None   # set to [] to record dtypes, outputs and aliasing (eager runtime)
        self.stack: list[str] = []
        rec = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else
                          (a if isinstance(a, (int, float)) else None) for a in args]
                rec.ops.append((str(func).split(".")[1] if str(func).startswith("aten.") else str(func),
                                rec.stack[-1] if rec.stack else "", shapes))
                if rec.detail is not None:
                    rec.detail.append(_detail(torch, rec.ops[-1], args, out))
                return out
        self.mode = Mode()


def _tensors(x):
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _tensors(y)]
    return []


def _detail(torch, op, args, out) -> dict:
    """What the eager runtime needs of one recorded aten op: input / output shapes and element sizes, and whether
    every output aliases an input (a view: no kernel)."""
    ins, outs = _tensors(list(args)), _tensors(out)
    alias = bool(outs) and all(any(torch._C._is_alias_of(o, i) for i in ins) for o in outs)
    return dict(name=op[0], module=op[1], ins=[(tuple(t.shape), t.element_size()) for t in ins],
                outs=[(tuple(t.shape), t.element_size()) for t in outs], alias=alias)


def record(spec: ModelSpec, config: dict, context: int, batch: int = 1, seed: int = 0, detail: bool = False,
           routed: bool = True, share: bool = True):
    """Run one decode step of the real model on the meta device; returns (recorded ops, model config object), and
    with detail=True a third item: per recorded op, its inputs, outputs and aliasing (fabric.capture.runtime).

    routed  True: each MoE layer runs the experts the routing oracle picks for its tokens; False: one expert over
            all tokens (the fused graph reads the experts' shapes, not the routing, from the recording)
    share   record each kind of decoder layer once and copy it to the others (fabric.capture.torch_layers); the
            recording is the same either way, False runs every layer (the tests compare the two)"""
    torch, tf = _import_torch()
    conf, cls = _model_class(spec, config)
    with torch.device("meta"):
        model = cls(conf).to(torch.bfloat16)
    modules = dict(model.named_modules())
    names = {id(m): n for n, m in modules.items()}
    rec = _Recorder(torch)
    if detail:
        rec.detail = []
    layers = None

    def fake_experts(self, hidden_states, top_k_index, top_k_weights):
        """Run only the experts the oracle routes to (meta tensors hold no routing values)."""
        path = names[id(self)]
        n_tok, k = top_k_index.shape
        if routed:
            choice = route(spec, int(path.split(".")[2]), n_tok, seed)
            hits = [(e, int((choice == e).any(axis=1).sum())) for e in sorted(set(choice.ravel().tolist()))]
        else:
            hits = [(0, n_tok)]
        start = len(rec.ops)
        out = torch.zeros_like(hidden_states)
        for e, rows in hits:
            x = hidden_states[:rows]
            gate, up = torch.nn.functional.linear(x, self.gate_up_proj[e]).chunk(2, dim=-1)
            y = torch.nn.functional.linear(self.act_fn(gate) * up, self.down_proj[e])
            out[:rows] += y
        if layers is not None:
            layers.experts_ran(path, start, (hidden_states, top_k_index, top_k_weights))
        return out

    for n, m in modules.items():
        if n.endswith("mlp.experts") and hasattr(m, "gate_up_proj"):
            m.forward = types.MethodType(fake_experts, m)

    def pre(mod, args):
        rec.stack.append(names.get(id(mod), "?"))

    def post(mod, args, out):
        rec.stack.pop()

    cache = tf.DynamicCache(config=conf)
    with torch.device("meta"):
        for i in range(conf.num_hidden_layers):
            if spec.family == "mla_moe":
                k = torch.empty(batch, 1, context, spec.kv_lora, dtype=torch.bfloat16)
                v = torch.empty(batch, 1, context, spec.rope, dtype=torch.bfloat16)
            else:
                k = torch.empty(batch, conf.num_key_value_heads, context, spec.head_dim, dtype=torch.bfloat16)
                v = torch.empty(batch, conf.num_key_value_heads, context, spec.head_dim, dtype=torch.bfloat16)
            cache.update(k, v, i)
        ids = torch.zeros(batch, 1, dtype=torch.long)
        pos = torch.full((batch, 1), context, dtype=torch.long)
    stack = getattr(getattr(model, "model", None), "layers", None)
    cache_layers = getattr(cache, "layers", None)
    if share and isinstance(stack, torch.nn.ModuleList) and cache_layers is not None \
            and len(cache_layers) == len(stack) and names.get(id(stack)) == "model.layers":
        from fabric.capture.torch_layers import LayerShare
        layers = LayerShare(torch, list(stack), cache_layers, "model.layers.", modules, rec, routed)
    h1 = torch.nn.modules.module.register_module_forward_pre_hook(pre)
    h2 = torch.nn.modules.module.register_module_forward_hook(post)
    try:
        with torch.inference_mode(), rec.mode:
            import inspect
            kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
            model(input_ids=ids, position_ids=pos, use_cache=True, **{kw: cache})
    finally:
        h1.remove()
        h2.remove()
    return (rec.ops, conf, rec.detail) if detail else (rec.ops, conf)


# ---------------------------------------------------------------- eager runtime: the recorded aten sequence

NO_KERNEL = {"empty", "new_empty", "empty_like", "empty_strided", "alias", "detach", "lift_fresh", "item",
             "_local_scalar_dense", "sym_size", "sym_numel", "is_nonzero"}



def shard_config(spec: ModelSpec, config: dict, tp: int) -> tuple[ModelSpec, dict]:
    """One tensor-parallel rank as a model of its own: heads, KV heads, (expert) intermediate sizes and the vocabulary
    divided by tp (replicated modules keep their sizes), the head size pinned. Recording it gives the rank's kernels
    with their sharded shapes directly (what a plain-PyTorch TP shard runs)."""
    import dataclasses
    sh = lambda n: -(-n // tp)  # noqa: E731
    cfg = dict(config)
    kv = sh(spec.kv_heads) if spec.family != "mla_moe" else spec.heads // tp
    cfg.update(num_attention_heads=spec.heads // tp, num_key_value_heads=kv, vocab_size=sh(spec.vocab))
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):   # ids of the full vocabulary: not in the shard's
        cfg[k] = None
    if spec.family != "mla_moe":
        cfg["head_dim"] = spec.head_dim
    if "intermediate_size" in cfg:
        cfg["intermediate_size"] = sh(cfg["intermediate_size"])
    if cfg.get("moe_intermediate_size"):
        cfg["moe_intermediate_size"] = sh(cfg["moe_intermediate_size"])
    sspec = dataclasses.replace(spec, heads=spec.heads // tp, kv_heads=kv if spec.family != "mla_moe"
                                else spec.kv_heads, vocab=sh(spec.vocab))
    return sspec, cfg


def eager_graph(spec: ModelSpec, config: dict, context: int, tp: int, batch: int = 1, seed: int = 0) \
        -> list[LogicalOp]:
    """The eager runtime's kernels of one TP rank from the recorded aten dispatch sequence of a TP-sharded copy of the
    model (shard_config): every recorded op that launches a kernel (not a view, not an allocation) becomes one
    LogicalOp of type "aten" (fabric.capture.runtime.aten_parts costs it by shape), in dispatch order on one stream.
    Collectives: an all-reduce after the embedding, after each row-parallel projection of attention (o_proj) and
    of a dense MLP (down_proj), after each MoE block (routed + shared partial sums), an all-gather after the LM head."""
    sspec, cfg = shard_config(spec, config, tp)
    _, conf, detail = record(sspec, cfg, context, batch=batch, seed=seed, detail=True)
    mlp_moe = {f"model.layers.{i}.mlp" for i in range(spec.layers) if spec.layer_is_moe(i)}
    kern = []
    for d in detail:
        n = d["name"]
        inplace = n.endswith("_") and not n.startswith("_")
        if n in NO_KERNEL or not d["outs"] or (d["alias"] and not inplace):
            continue
        kern.append(d)

    last_of, last_under = {}, {}     # the last kernel of each module; of each module or any module inside it
    for k, d in enumerate(kern):
        parts = d["module"].split(".")
        last_of[d["module"]] = k
        for j in range(1, len(parts) + 1):
            last_under[".".join(parts[:j])] = k

    tp_plan = dict(getattr(conf, "base_model_tp_plan", None) or {})
    if spec.family == "mla_moe":
        tp_plan = {**MLA_TP_OVERRIDE, **tp_plan}
    # row-parallel modules outside MoE blocks (o_proj, down_proj, and whatever else the model's TP plan marks
    # rowwise, e.g. Phi's dense / fc2): their partial sums are all-reduced
    rowwise = {m for m in last_of if m and ".".join(m.split(".")[:4]) not in mlp_moe
               and _style(tp_plan, m, "") == "rowwise"}
    reduce_at, gather_at = set(), set()
    if tp > 1:
        reduce_at.add(last_of.get("model.embed_tokens"))
        for i in range(spec.layers):
            p = f"model.layers.{i}"
            reduce_at.add(last_of.get(f"{p}.self_attn.o_proj"))
            m = f"{p}.mlp"
            reduce_at.add(last_under.get(m) if m in mlp_moe else last_of.get(f"{m}.down_proj"))
        reduce_at.update(last_of[m] for m in rowwise)
        gather_at.add(last_of.get("lm_head"))
    reduce_at.discard(None)
    gather_at.discard(None)
    out = []
    for k, d in enumerate(kern):
        mod = d["module"]
        layer = int(mod.split(".")[2]) if mod.startswith("model.layers.") else -1
        dims = dict(aten=d["name"], ins=tuple(d["ins"]), outs=tuple(d["outs"]), hidden=spec.hidden,
                    vocab_local=sspec.vocab)
        out.append(LogicalOp(layer, f"{d['name']}#{k}", "aten", mod or "model", "aten", dims,
                             reduce_after=k in reduce_at, gather_after=k in gather_at))
    return out


# ---------------------------------------------------------------- fusion: recording -> logical graph

class _View:
    """The recorded ops grouped by module path."""

    def __init__(self, ops):
        self.by_module = defaultdict(list)
        for name, mod, shapes in ops:
            self.by_module[mod].append((name, shapes))

    def find(self, module: str, op: str) -> list[list]:
        return [s for n, s in self.by_module.get(module, []) if n == op]

    def linear(self, module: str) -> tuple[int, int, tuple]:
        """(in, out, input shape) of the first linear recorded in `module`."""
        lins = self.find(module, "linear")
        if not lins:
            raise ConfigError(f"torch capture: no linear recorded in {module}")
        out_f, in_f = lins[0][1]
        return in_f, out_f, lins[0][0]

    def norm(self, module: str) -> tuple[int, int]:
        """(width, vectors per token) of an RMSNorm: the weight multiply and the squared input."""
        width = [s[0][0] for s in self.find(module, "mul") if s and s[0] is not None and len(s[0]) == 1][0]
        x = self.find(module, "pow")[0][0]
        numel = 1
        for d in x:
            numel *= d
        tokens = x[0] * (x[1] if len(x) > 3 or (len(x) == 3 and x[-1] == width) else 1)
        return width, numel // (tokens * width)


def _style(plan: dict, module: str, default: str) -> str:
    key = module[len("model."):] if module.startswith("model.") else module
    for pat, style in plan.items():
        if fnmatch.fnmatchcase(key, pat):
            return {"packed_colwise": "colwise", "colwise_rep": "colwise", "local_colwise": "colwise",
                    "local_rowwise": "rowwise"}.get(style, style)
    return default


def torch_graph(spec: ModelSpec, config: dict, context: int, batch: int = 1, seed: int = 0) -> list[LogicalOp]:
    ops, conf = record(spec, config, context, batch=batch, seed=seed, routed=False)
    v = _View(ops)
    tp_plan = dict(getattr(conf, "base_model_tp_plan", None) or {})
    if spec.family == "mla_moe":
        tp_plan = {**MLA_TP_OVERRIDE, **tp_plan}
    n_layers = conf.num_hidden_layers
    adds = [len(v.find(f"model.layers.{i}", "add")) for i in range(n_layers)]

    emb = v.find("model.embed_tokens", "embedding")[0]
    vocab, hidden = emb[0]
    graph = [LogicalOp(-1, "embed", "embedding", "model.embed_tokens", "vocab", dict(vocab=vocab, hidden=hidden),
                       reduce_after=True)]
    for i in range(n_layers):
        p = f"model.layers.{i}"
        a = f"{p}.self_attn"
        w, n = v.norm(f"{p}.input_layernorm")
        graph.append(LogicalOp(i, "input_norm", "norm", f"{p}.input_layernorm", "replicated",
                               dict(width=w, n=n, add=int(i > 0 and adds[i - 1] >= 2))))
        sdpa = v.find(a, "scaled_dot_product_attention")[0]
        q_shape, k_shape, v_shape = sdpa[0], sdpa[1], sdpa[2]
        heads, ctx = q_shape[1], k_shape[2]
        if spec.family == "mla_moe":
            qa_in, q_lora, _ = v.linear(f"{a}.q_a_proj")
            _, kva_out, _ = v.linear(f"{a}.kv_a_proj_with_mqa")
            kv_lora, kvb_out, kvb_x = v.linear(f"{a}.kv_b_proj")
            qb_in, qb_out, _ = v.linear(f"{a}.q_b_proj")
            rope = kva_out - kv_lora
            nope, v_dim = q_shape[3] - rope, v_shape[3]
            assert kvb_out == heads * (nope + v_dim) and qb_out == heads * (nope + rope), "unexpected MLA shapes"
            assert kvb_x[-2] == ctx
            qw, qn = v.norm(f"{a}.q_a_layernorm")
            kw, kn = v.norm(f"{a}.kv_a_layernorm")
            graph += [
                LogicalOp(i, "qkv_a_proj", "linear", a, _style(tp_plan, f"{a}.q_a_proj", "replicated"),
                          {"in": qa_in, "out": q_lora + kva_out}),
                LogicalOp(i, "q_a_norm", "norm", f"{a}.q_a_layernorm", "replicated", dict(width=qw, n=qn, add=0)),
                LogicalOp(i, "kv_a_norm", "norm", f"{a}.kv_a_layernorm", "replicated", dict(width=kw, n=kn, add=0),
                          stream=1, after=("qkv_a_proj",)),
                LogicalOp(i, "q_b_proj", "linear", f"{a}.q_b_proj", _style(tp_plan, f"{a}.q_b_proj", "colwise"),
                          {"in": qb_in, "out": qb_out}, after=("q_a_norm",)),
                LogicalOp(i, "rope_kv_append", "rope_mla", a, "heads", dict(heads=heads, rope=rope, kv_lora=kv_lora),
                          after=("q_b_proj", "kv_a_norm")),
                LogicalOp(i, "w_uk", "mla_absorb_k", f"{a}.kv_b_proj", "heads",
                          dict(heads=heads, nope=nope, kv_lora=kv_lora)),
                LogicalOp(i, "attention", "mla_attention", a, "heads",
                          dict(heads=heads, kv_lora=kv_lora, rope=rope, ctx=ctx)),
                LogicalOp(i, "w_uv", "mla_absorb_v", f"{a}.kv_b_proj", "heads",
                          dict(heads=heads, kv_lora=kv_lora, v_dim=v_dim)),
            ]
        else:
            h_in, q_out, _ = v.linear(f"{a}.q_proj")
            _, k_out, _ = v.linear(f"{a}.k_proj")
            _, v_out, _ = v.linear(f"{a}.v_proj")
            hd = q_shape[3]
            kv_heads = k_out // hd
            assert q_out == heads * hd and v_out == k_out
            graph.append(LogicalOp(i, "qkv_proj", "qkv_linear", a, _style(tp_plan, f"{a}.q_proj", "colwise"),
                                   {"in": h_in, "heads": heads, "kv_heads": kv_heads, "head_dim": hd}))
            rope_after = None
            if v.find(f"{a}.q_norm", "pow"):
                qw, qn = v.norm(f"{a}.q_norm")
                kw, kn = v.norm(f"{a}.k_norm")
                graph += [LogicalOp(i, "q_norm", "norm", f"{a}.q_norm", "heads", dict(width=qw, n=qn, add=0)),
                          LogicalOp(i, "k_norm", "norm", f"{a}.k_norm", "kv_heads", dict(width=kw, n=kn, add=0),
                                    stream=1, after=("qkv_proj",))]
                rope_after = ("q_norm", "k_norm")
            graph += [LogicalOp(i, "rope_kv_append", "rope_gqa", a, "heads",
                                dict(heads=heads, kv_heads=kv_heads, head_dim=hd), after=rope_after),
                      LogicalOp(i, "attention", "gqa_attention", a, "heads",
                                dict(heads=heads, kv_heads=kv_heads, head_dim=hd, ctx=ctx))]
        o_in, o_out, _ = v.linear(f"{a}.o_proj")
        o_style = _style(tp_plan, f"{a}.o_proj", "replicated")
        graph.append(LogicalOp(i, "o_proj", "linear", f"{a}.o_proj", o_style, {"in": o_in, "out": o_out},
                               reduce_after=o_style == "rowwise"))
        w, n = v.norm(f"{p}.post_attention_layernorm")
        graph.append(LogicalOp(i, "post_norm", "norm", f"{p}.post_attention_layernorm", "replicated",
                               dict(width=w, n=n, add=int(adds[i] >= 1))))
        m = f"{p}.mlp"
        if v.find(f"{m}.gate", "linear"):
            graph += _moe(v, tp_plan, i, m)
        else:
            g_in, g_out, _ = v.linear(f"{m}.gate_proj")
            _, u_out, _ = v.linear(f"{m}.up_proj")
            d_in, d_out, _ = v.linear(f"{m}.down_proj")
            d_style = _style(tp_plan, f"{m}.down_proj", "replicated")
            graph += [LogicalOp(i, "gate_up_proj", "linear", m, _style(tp_plan, f"{m}.gate_proj", "replicated"),
                                {"in": g_in, "out": g_out + u_out}),
                      LogicalOp(i, "act", "act", f"{m}.act_fn", "colwise", dict(width=g_out)),
                      LogicalOp(i, "down_proj", "linear", f"{m}.down_proj", d_style, {"in": d_in, "out": d_out},
                                reduce_after=d_style == "rowwise")]
    w, n = v.norm("model.norm")
    last_add = int(adds[-1] >= 2) if adds else 0
    h_in, h_out, _ = v.linear("lm_head")
    graph += [LogicalOp(-1, "final_norm", "norm", "model.norm", "replicated", dict(width=w, n=n, add=last_add)),
              LogicalOp(-1, "lm_head", "linear", "lm_head", "vocab", {"in": h_in, "out": h_out}, gather_after=True)]
    return graph


def _moe(v: _View, tp_plan: dict, i: int, m: str) -> list[LogicalOp]:
    hidden, n_exp, _ = v.linear(f"{m}.gate")
    topks = v.find(f"{m}.gate", "topk")
    final = [s for s in topks if len(s[0]) == 2 and s[0][1] == n_exp][-1]
    k = final[1]
    groups = [s for s in topks if len(s[0]) == 2 and s[0][1] != n_exp]
    n_group, topk_group = (groups[0][0][1], groups[0][1]) if groups else (1, 1)
    ex = f"{m}.experts"
    n_all = v.find(ex, "select")[0][0][0]
    inter = v.find(ex, "linear")[0][1][0] // 2
    has_shared = bool(v.find(f"{m}.shared_experts.gate_proj", "linear"))
    s = 1 if has_shared else 0
    if _style(tp_plan, ex, "experts") not in ("moe_tp_experts", "experts", "ep_router"):
        raise ConfigError(f"torch capture: unexpected parallel style for {ex}")
    out = [
        LogicalOp(i, "moe_gate", "router", f"{m}.gate", "replicated", {"in": hidden, "experts": n_exp}, stream=s,
                  after=("post_norm",)),
        LogicalOp(i, "moe_topk", "topk", f"{m}.gate", "replicated",
                  dict(experts=n_exp, topk=k, n_group=n_group, topk_group=topk_group), stream=s),
        LogicalOp(i, "experts_gate_up", "experts_gate_up", ex, "experts",
                  dict(experts=n_all, topk=k, hidden=hidden, inter=inter), stream=s),
        LogicalOp(i, "experts_act", "experts_act", ex, "experts", dict(topk=k, inter=inter), stream=s),
        LogicalOp(i, "experts_down", "experts_down", ex, "experts",
                  dict(experts=n_all, topk=k, hidden=hidden, inter=inter), stream=s),
    ]
    if has_shared:
        sm = f"{m}.shared_experts"
        g_in, g_out, _ = v.linear(f"{sm}.gate_proj")
        _, u_out, _ = v.linear(f"{sm}.up_proj")
        d_in, d_out, _ = v.linear(f"{sm}.down_proj")
        out += [LogicalOp(i, "shared_gate_up", "linear", sm, _style(tp_plan, f"{sm}.gate_proj", "replicated"),
                          {"in": g_in, "out": g_out + u_out}, after=("post_norm",)),
                LogicalOp(i, "shared_act", "act", f"{sm}.act_fn", "colwise", dict(width=g_out)),
                LogicalOp(i, "shared_down", "linear", f"{sm}.down_proj",
                          _style(tp_plan, f"{sm}.down_proj", "replicated"), {"in": d_in, "out": d_out})]
    out.append(LogicalOp(i, "moe_combine", "moe_combine", m, "replicated", dict(topk=k, hidden=hidden, shared=s),
                         after=("experts_down", "shared_down") if s else ("experts_down",), reduce_after=True))
    return out
