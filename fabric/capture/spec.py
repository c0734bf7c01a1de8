"""Model specifications: the architecture numbers a capture needs, read from an HF-style config.json.

Built-in configs live in fabric/capture/models/<name>.json (copies of the public config files' relevant fields).
Supported architectures: DeepSeek-V3 family (MLA + MoE: deepseek_v3, deepseek_v2, kimi_k2), Qwen3-MoE (GQA + MoE)
and Llama (GQA + dense MLP).
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from fabric.errors import ConfigError

MLA_TYPES = ("deepseek_v3", "deepseek_v2", "kimi_k2")
QWEN_MOE_TYPES = ("qwen3_moe", "qwen2_moe")
LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_type: str
    family: str                 # "mla_moe", "gqa_moe" or "gqa_dense"
    hidden: int
    layers: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int               # GQA head size
    q_lora: int = 0             # MLA
    kv_lora: int = 0
    nope: int = 0
    rope: int = 0
    v_dim: int = 0
    inter: int = 0              # dense MLP intermediate
    moe_inter: int = 0
    n_experts: int = 0
    topk: int = 0
    n_shared: int = 0
    n_group: int = 1
    topk_group: int = 1
    qk_norm: bool = False
    dense_layers: tuple = ()    # layer indices with a dense MLP (all layers when the model has no experts)
    config: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    def layer_is_moe(self, i: int) -> bool:
        return self.is_moe and i not in self.dense_layers


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("fabric.capture").joinpath("models").iterdir()
                  if p.name.endswith(".json"))


def builtin_config(name: str) -> dict:
    if name not in builtin_names():
        close = difflib.get_close_matches(name, builtin_names(), n=2)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise ConfigError(f"unknown model {name!r}{hint} (built-in: {', '.join(builtin_names())}; "
                          f"or pass --hf-config config.json)")
    return json.loads(resources.files("fabric.capture").joinpath("models", f"{name}.json").read_text())


def load_hf_config(path) -> dict:
    """An HF config.json, or the one in a model directory (a checkpoint or hub snapshot folder)."""
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ConfigError(f"--hf-config directory {str(p)!r} holds no config.json; pass the model's folder or "
                              f"its config.json")
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        d = json.loads(p.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p} is not valid JSON: {exc}") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{p} must hold a JSON object (an HF config.json)")
    return d


def _get(d: dict, key: str, name: str, default=None, lo: int = 0):
    v = d.get(key, default)
    if v is None:
        raise ConfigError(f"model config {name}: missing {key!r}")
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ConfigError(f"model config {name}: {key}={v!r} must be an integer >= {lo}")
    return v


def _checked(s: ModelSpec) -> ModelSpec:
    """Refuse head and expert counts no plan can split (one ConfigError line naming the config keys)."""
    if s.heads % s.kv_heads:
        raise ConfigError(f"model config {s.name}: num_attention_heads={s.heads} is not a multiple of "
                          f"num_key_value_heads={s.kv_heads}")
    if s.is_moe and not 1 <= s.topk <= s.n_experts:
        raise ConfigError(f"model config {s.name}: num_experts_per_tok={s.topk} must be in [1, {s.n_experts}]")
    return s


def generic_spec(d: dict, name: str) -> ModelSpec:
    """Any transformers decoder with the standard config fields (Mixtral, Gemma, Phi, ...): family "generic", read as
    GQA attention with a dense or routed-expert MLP. Only the torch engine's eager runtime captures such a model (its
    kernels come from the recorded aten ops); the fields here size the plan checks and the memory plan."""
    g = lambda k, default=None, lo=1: _get(d, k, name, default, lo)  # noqa: E731
    hidden, layers, vocab, heads = g("hidden_size"), g("num_hidden_layers"), g("vocab_size"), g("num_attention_heads")
    kv_heads = g("num_key_value_heads", heads)
    n_exp = d.get("num_local_experts") or d.get("num_experts") or d.get("n_routed_experts") or 0
    if isinstance(n_exp, bool) or not isinstance(n_exp, int) or n_exp < 0:
        raise ConfigError(f"model config {name}: the number of experts {n_exp!r} must be an integer >= 0")
    inter = g("intermediate_size")
    s = ModelSpec(name=name, model_type=str(d.get("model_type")), family="generic", hidden=hidden, layers=layers,
                  vocab=vocab, heads=heads, kv_heads=kv_heads, head_dim=g("head_dim", hidden // heads), inter=inter,
                  moe_inter=d.get("moe_intermediate_size") or inter, n_experts=n_exp,
                  topk=g("num_experts_per_tok", 0, 0) if n_exp else 0,
                  dense_layers=() if n_exp else tuple(range(layers)), config=dict(d))
    return _checked(s)


def spec_from_config(d: dict, name: str | None = None, generic: bool = False) -> ModelSpec:
    """Parse an HF config dict; raises ConfigError naming the field that is missing or wrong.
    generic=True: a model_type outside the built-in families is read by `generic_spec` instead of refused."""
    name = name or d.get("_name_or_path") or d.get("model_type") or "model"
    mt = d.get("model_type")
    if generic and mt not in MLA_TYPES + QWEN_MOE_TYPES + LLAMA_TYPES:
        return generic_spec(d, name)
    if mt in MLA_TYPES:
        family = "mla_moe"
    elif mt in QWEN_MOE_TYPES:
        family = "gqa_moe"
    elif mt in LLAMA_TYPES:
        family = "gqa_dense"
    else:
        raise ConfigError(f"model config {name}: model_type {mt!r} is not supported (supported: "
                          f"{', '.join(MLA_TYPES + QWEN_MOE_TYPES + LLAMA_TYPES)}; other transformers decoders "
                          f"capture with --engine torch --runtime eager)")
    g = lambda k, default=None, lo=1: _get(d, k, name, default, lo)  # noqa: E731
    hidden, layers, vocab, heads = g("hidden_size"), g("num_hidden_layers"), g("vocab_size"), g("num_attention_heads")
    kv_heads = g("num_key_value_heads", heads)
    common = dict(name=name, model_type=mt, family=family, hidden=hidden, layers=layers, vocab=vocab, heads=heads,
                  kv_heads=kv_heads, config=dict(d))
    if family == "mla_moe":
        n_exp = g("n_routed_experts", 0, 0)
        first_dense = g("first_k_dense_replace", 0, 0)
        freq = g("moe_layer_freq", 1)
        dense = tuple(i for i in range(layers) if not (n_exp and i >= first_dense and i % freq == 0))
        s = ModelSpec(head_dim=g("v_head_dim"), q_lora=g("q_lora_rank"), kv_lora=g("kv_lora_rank"),
                      nope=g("qk_nope_head_dim"), rope=g("qk_rope_head_dim"), v_dim=g("v_head_dim"),
                      inter=g("intermediate_size"), moe_inter=g("moe_intermediate_size", 0, 0), n_experts=n_exp,
                      topk=g("num_experts_per_tok", 0, 0), n_shared=g("n_shared_experts", 0, 0),
                      n_group=g("n_group", 1), topk_group=g("topk_group", 1), dense_layers=dense, **common)
        if s.n_group > 0 and s.n_experts % s.n_group:
            raise ConfigError(f"model config {name}: n_routed_experts={n_exp} is not a multiple of n_group={s.n_group}")
        if s.topk_group > s.n_group:
            raise ConfigError(f"model config {name}: topk_group={s.topk_group} exceeds n_group={s.n_group}")
    elif family == "gqa_moe":
        n_exp = g("num_experts")
        step = g("decoder_sparse_step", 1)
        only = set(d.get("mlp_only_layers") or [])
        dense = tuple(i for i in range(layers) if i in only or (i + 1) % step != 0)
        s = ModelSpec(head_dim=g("head_dim", hidden // heads), inter=g("intermediate_size"),
                      moe_inter=g("moe_intermediate_size"), n_experts=n_exp, topk=g("num_experts_per_tok"),
                      n_shared=0, qk_norm=mt == "qwen3_moe", dense_layers=dense, **common)
    else:
        s = ModelSpec(head_dim=g("head_dim", hidden // heads), inter=g("intermediate_size"),
                      qk_norm=mt == "qwen3", dense_layers=tuple(range(layers)), **common)
    return _checked(s)


def weight_dtype(d: dict) -> str:
    return DTYPES.get(str(d.get("torch_dtype", d.get("dtype", "bfloat16"))), "bf16")
