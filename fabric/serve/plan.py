"""How a deployment uses its ranks: `--plan` text -> ServePlan.

    tp=64                 tensor parallelism over 64 ranks (attention, dense MLPs and experts all sharded)
    attn=dp,ep=64         data-parallel attention (each rank its own sequences and their KV), experts spread over 64
    attn=tp8,ep=64        attention tensor-parallel in groups of 8 (8 such groups), experts over all 64
    replicas=2            that many independent copies of the deployment side by side, each with its own requests
    tbo=on                two micro-batches per step, one's expert all-to-all overlapping the other's compute
    weights=fp8           weight dtype (bf16, fp8, int8, int4; default bf16)
    handover=layered      a prefill pool's KV hand-over: after the prefill (default) or layer by layer while it runs

An attention group (attn_tp ranks) holds one set of sequences; a step runs every group's batch at once (their
expert all-to-all ties them together), so the step is as long as its busiest group's.
"""
from __future__ import annotations

from dataclasses import dataclass

from fabric.errors import ConfigError

KEYS = ("tp", "attn", "ep", "ranks", "replicas", "tbo", "weights", "handover")
HANDOVERS = ("after", "layered")
WEIGHT_DTYPES = ("bf16", "fp8", "int8", "int4")


@dataclass(frozen=True)
class ServePlan:
    attn_tp: int            # ranks per attention group (tensor-parallel attention)
    ep: int = 1             # expert-parallel ranks (1: experts are tensor-parallel with the attention)
    replicas: int = 1
    tbo: bool = False
    weight_dtype: str = "bf16"
    text: str = ""
    flag: str = "--plan"    # the option it came from, for messages (--prefill / --decode when disaggregated)
    handover: str = "after"  # a prefill pool's KV hand-over (HANDOVERS)

    @property
    def ranks(self) -> int:
        """Ranks of one replica."""
        return max(self.attn_tp, self.ep)

    @property
    def dp(self) -> int:
        """Attention groups per replica."""
        return self.ranks // self.attn_tp

    @property
    def groups(self) -> int:
        """Attention groups in the whole deployment (each runs its own batch)."""
        return self.dp * self.replicas

    @property
    def total_ranks(self) -> int:
        return self.ranks * self.replicas

    def describe(self) -> str:
        attn = "dp" if self.attn_tp == 1 and self.ep > 1 else f"tp{self.attn_tp}"
        moe = f", ep {self.ep}" if self.ep > 1 else ""
        return (f"{self.replicas} x {self.ranks} ranks (attention {attn}, {self.dp} group(s) per replica{moe}), "
                f"weights {self.weight_dtype}" + (", two-batch overlap" if self.tbo else ""))


def _int(key: str, value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise ConfigError(f"plan key {key}={value!r} must be a whole number") from None
    if not 1 <= v <= 65536:
        raise ConfigError(f"plan key {key}={v} must be in [1, 65536]")
    return v


def parse_plan(text: str, flag: str = "--plan") -> ServePlan:
    """ServePlan from 'k=v,k=v'; the model-dependent checks are check_plan's. flag: the option, for messages."""
    kv: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not value.strip():
            raise ConfigError(f"{flag} {text!r}: {part!r} is not KEY=VALUE (e.g. tp=64 or attn=dp,ep=64)")
        if key not in KEYS:
            raise ConfigError(f"{flag} {text!r}: unknown key {key!r}; use {', '.join(KEYS)}")
        if key in kv:
            raise ConfigError(f"{flag} {text!r}: {key} given twice")
        kv[key] = value.strip()
    if not kv:
        raise ConfigError(f"{flag} is empty; e.g. tp=64 or attn=dp,ep=64")
    ep = _int("ep", kv["ep"]) if "ep" in kv else 1
    tp = _int("tp", kv["tp"]) if "tp" in kv else None
    attn = kv.get("attn")
    if attn is not None:
        if attn == "dp":
            attn_tp = 1
        elif attn.startswith("tp") and attn[2:].isdigit():
            attn_tp = _int("attn", attn[2:])
        elif attn == "tp":
            attn_tp = tp or ep
        else:
            raise ConfigError(f"{flag}: attn={attn!r} must be dp, tp or tpN (e.g. attn=tp8)")
        if tp is not None and tp != attn_tp:
            raise ConfigError(f"{flag}: tp={tp} and attn={attn} disagree; give one of them")
    else:
        attn_tp = tp if tp is not None else ep
    if ep > 1 and ep % attn_tp:
        raise ConfigError(f"{flag}: ep={ep} must be a multiple of the attention group ({attn_tp} ranks), so that "
                          f"whole attention groups share the expert-parallel ranks")
    if ep > 1 and attn_tp > ep:
        raise ConfigError(f"{flag}: attention over {attn_tp} ranks with experts over only {ep}; use ep >= "
                          f"{attn_tp} or ep=1")
    if ep == 1 and attn_tp == 1 and attn == "dp":
        raise ConfigError(f"{flag}: attn=dp needs experts spread over the ranks (ep=N, a MoE model); for a dense "
                          "model use tp=1,replicas=N")
    plan = ServePlan(attn_tp=attn_tp, ep=ep, replicas=_int("replicas", kv.get("replicas", "1")),
                     tbo=_onoff(kv.get("tbo", "off"), flag), weight_dtype=kv.get("weights", "bf16"), text=text,
                     flag=flag, handover=kv.get("handover", "after"))
    if "handover" in kv and flag != "--prefill":
        raise ConfigError(f"{flag} {text!r}: handover= is how a prefill pool hands its KV over; give it in --prefill")
    if plan.handover not in HANDOVERS:
        raise ConfigError(f"{flag}: handover={plan.handover!r} must be one of {', '.join(HANDOVERS)}")
    if plan.weight_dtype not in WEIGHT_DTYPES:
        raise ConfigError(f"{flag}: weights={plan.weight_dtype!r} must be one of {', '.join(WEIGHT_DTYPES)}")
    if "ranks" in kv and _int("ranks", kv["ranks"]) != plan.ranks:
        raise ConfigError(f"{flag}: ranks={kv['ranks']} but the plan uses {plan.ranks} ranks per replica "
                          f"(max of the attention group and ep)")
    return plan


def _onoff(v: str, flag: str) -> bool:
    if v not in ("on", "off"):
        raise ConfigError(f"{flag}: tbo={v!r} must be on or off")
    return v == "on"


def check_plan(plan: ServePlan, spec, serving_ranks: int, preset: str) -> None:
    """Refuse a plan the model or the fabric cannot run, in one line naming the fix."""
    if spec.heads % plan.attn_tp:
        raise ConfigError(f"{plan.flag} {plan.text!r}: attention over {plan.attn_tp} ranks does not divide the "
                          f"{spec.heads} heads of {spec.name}")
    if plan.ep > 1 and not spec.is_moe:
        raise ConfigError(f"{plan.flag} {plan.text!r}: ep={plan.ep} needs a mixture-of-experts model; {spec.name} is "
                          f"dense")
    if plan.ep > 1 and spec.n_experts % plan.ep:
        raise ConfigError(f"{plan.flag} {plan.text!r}: ep={plan.ep} does not divide the {spec.n_experts} routed "
                          f"experts of {spec.name}")
    if plan.tbo and plan.ep == 1:
        raise ConfigError(f"{plan.flag} {plan.text!r}: tbo=on overlaps the expert all-to-all; it needs ep > 1")
    if plan.total_ranks > serving_ranks:
        raise ConfigError(f"{plan.flag} {plan.text!r} needs {plan.total_ranks} ranks but preset {preset!r} has "
                          f"{serving_ranks} serving accelerators; use fewer replicas or a larger preset")
