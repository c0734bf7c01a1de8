"""Not a fault but a run's possible end: names what a run that stopped with work pending waits for.

What a run that stopped with work pending waits for: the kernel's stuck report (Engine.stuck_report) with channel
names, as JSON-ready rows and as the block of text a SimulationError carries (docs/kernel.md, "A stuck run")."""
from fabric._check_build import kernel

HOLDS = {kernel.HOLD_NONE: "", kernel.HOLD_PIPELINE: "still in the switch pipeline",
         kernel.HOLD_TAG: "waits for a read tag", kernel.HOLD_GRANT: "waits for an end-to-end grant"}


def report(raw: dict, topo) -> dict:
    """JSON-ready: "channels" (channels holding unacknowledged units or queued packets), "queues" (one row per
    non-empty queue: its head, what the head needs and has, what else holds it), "cycle" (the queue rows that form a
    cycle of credit waits, each head waiting for credits on the channel the next row's head arrived on; [] if
    none), names added where a topology names its channels and nodes."""
    ch_name = topo.channel_name if hasattr(topo, "channel_name") else (lambda c: f"channel {c}")
    node_name = (lambda n: str(topo.node_names[n])) if hasattr(topo, "node_names") else (lambda n: f"node {n}")
    channels = [dict(r, name=ch_name(r["channel"])) for r in raw["channels"]]
    cols = raw["queues"]
    queues = []
    for i in range(len(cols["channel"])):
        row = {k: int(cols[k][i]) for k in kernel.WAIT_COLS}
        row.update(name=ch_name(row["channel"]), from_name=ch_name(row["in_ch"]) if row["in_ch"] >= 0 else None,
                   src_name=node_name(row["src"]), dst_name=node_name(row["dst"]), hold=HOLDS[row["hold"]])
        queues.append(row)
    return dict(channels=channels, queues=queues, cycle=[queues[i] for i in raw["cycle"]])


def _head(q: dict) -> str:
    return (f"transfer {q['xfer']} ({q['src_name']} -> {q['dst_name']}) needs {q['needed']} credits of "
            f"{q['name']} VC{q['vc']}, {q['credits']} available" + (f", {q['hold']}" if q["hold"] else ""))


def text(rep: dict, limit: int = 12) -> str:
    """The report as lines: the cycle of credit waits (or that there is none), then each stuck channel with the
    heads of its queues; at most `limit` lines per part."""
    cycle, lines = rep["cycle"], []
    if cycle:
        ring = " -> ".join(f"{q['from_name']} VC{q['in_vc']}" for q in cycle + cycle[:1])
        lines.append(f"credit deadlock, a cycle of {len(cycle)} channels (each one's head waits for credits on the "
                     f"next): {ring}")
        lines += [f"  {q['from_name']} VC{q['in_vc']}: {q['queued']} packets wait at its end; head: {_head(q)}"
                  for q in cycle[:limit]]
    else:
        lines.append("no cycle of credit waits (not a credit deadlock)")
    lines += _more(len(cycle), limit)
    by_channel = {}
    for q in rep["queues"]:
        by_channel.setdefault(q["channel"], []).append(q)
    shown = 0
    for r in rep["channels"][:limit]:
        lines.append(f"{r['name']}: {r['unacked']} unacked, {r['queued']} queued, credits {r['credits']}"
                     + (" (link down)" if r["down"] else ""))
        for q in by_channel.get(r["channel"], [])[:limit - shown]:
            where = f"from {q['from_name']} VC{q['in_vc']}: {q['queued']} packets" if q["in_ch"] >= 0 else \
                f"injected: {q['queued']} transfer{'s' if q['queued'] != 1 else ''}"
            lines.append(f"  {where}; head: {_head(q)}")
            shown += 1
    return "\n".join(lines + _more(len(rep["channels"]), limit))


def _more(n: int, limit: int) -> list:
    return [f"  ... and {n - limit} more"] if n > limit else []
