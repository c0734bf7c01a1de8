"""Hypothesis strategies shared by the property tests."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from fabric.config import load_config
from fabric.network import build
from fabric.taskgraph import transfer_graph


@st.composite
def error_models(draw, ber):
    """PHY error options on top of a raw BER: none, an FEC (light RS(272,258), t = 7, which leaves errors to recover
    at a high raw BER), Gilbert-Elliott bursts, or both; control messages in the flits or with wire bytes."""
    over = {"link.control_wire_bytes": draw(st.sampled_from([0, 0, 8, 300]))}
    kind = draw(st.sampled_from(["plain", "fec", "burst", "fec+burst"]))
    if "fec" in kind:
        over.update({"phy.fec_n": 272, "phy.fec_k": 258, "phy.ber": draw(st.floats(1e-4, 1.5e-3))})
    if "burst" in kind:
        over.update({"phy.ge_bad_ber": draw(st.floats(1e-6, 1e-3 if "fec" in kind else 2e-5)),
                     "phy.ge_good_dwell_ns": draw(st.floats(200.0, 5000.0)),
                     "phy.ge_bad_dwell_ns": draw(st.floats(5.0, 100.0))})
    return over


@st.composite
def link_configs(draw, max_ber=1e-4):
    """Random data-link parameters: credit pools, buffers, tiny wrapping sequence numbers, BER up to max_ber."""
    payload = draw(st.sampled_from([64, 128, 256, 512]))
    flits = -(-(payload + 16) // 248)
    ber = draw(st.one_of(st.just(0.0), st.floats(1e-9, max_ber, allow_nan=False))) if max_ber > 0 else 0.0
    errors = draw(error_models(ber)) if max_ber > 0 else {}
    # keep a unit's error probability below ~0.4 so that progress is possible at all
    if errors.get("phy.ber", ber) > 2e-5 or errors.get("phy.ge_bad_ber", 0) > 2e-5:
        payload = 64
        flits = 1
    return load_config(overrides={
        "txn.max_payload_bytes": payload,
        "txn.max_read_request_bytes": payload,
        "txn.read_tags": draw(st.integers(1, 16)),
        "phy.ber": ber,
        "link.seq_bits": draw(st.integers(2, 12)),
        "link.credit_pool_flits": draw(st.integers(flits, 64)),
        "link.replay_buffer_flits": draw(st.integers(flits, 64)),
        "link.ack_every_packets": draw(st.integers(1, 16)),
        "link.credit_update_flits": draw(st.integers(1, 16)),
        "link.retrain_ns": draw(st.sampled_from([100.0, 1000.0])),
        "sim.seed": draw(st.integers(0, 2**32)),
        **errors,
    })


@st.composite
def link_traffic(draw, max_transfers=6):
    """Stores and loads in both directions of a two-node link, as a task graph with no dependencies."""
    n = draw(st.integers(1, max_transfers))
    src = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), np.int32)
    op = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), np.int8)
    nbytes = np.array(draw(st.lists(st.integers(1, 6000), min_size=n, max_size=n)), np.int64)
    return transfer_graph(src, 1 - src, nbytes, op)


@st.composite
def link_faults(draw, max_faults=4):
    """Deterministic faults on either channel: corrupt flits (bursts), lost Ack/Nak, lost UpdateFC, retrains."""
    faults = []
    for _ in range(draw(st.integers(0, max_faults))):
        kind = draw(st.sampled_from(["corrupt_flit", "lose_ack", "lose_credit", "retrain"]))
        ch = draw(st.integers(0, 1))
        if kind == "retrain":
            faults.append((kind, ch, draw(st.integers(0, 20_000_000)), 1))
        else:
            faults.append((kind, ch, draw(st.integers(0 if kind == "corrupt_flit" else 1, 40)),
                           draw(st.integers(1, 8)) if kind == "corrupt_flit" else 1))
    return faults


TOPOLOGIES = [
    {"topology.kind": "accel_mesh", "topology.accel_mesh.mesh_dims": "2x2x2"},
    {"topology.kind": "accel_mesh", "topology.accel_mesh.mesh_dims": "3x2x1"},
    {"topology.kind": "accel_torus", "topology.accel_mesh.mesh_dims": "3x3x1", "topology.accel_mesh.wrap": "true",
     "link.vcs": "4"},
    {"topology.kind": "sd200", "topology.sd200.switch_mesh_dims": "2x2x1", "topology.accels_per_domain": "2"},
    {"topology.kind": "scaleout_roce", "topology.scaleout.hosts": "2", "topology.accels_per_domain": "2",
     "topology.scaleout.nics_per_host": "2"},
]


@st.composite
def fabric_case(draw):
    """A small random fabric (mesh, torus, sd200, scale-out), data-link parameters, BER, random stores and loads
    and injected faults: (cfg, topo, graph, faults)."""
    over = dict(draw(st.sampled_from(TOPOLOGIES)))
    payload = draw(st.sampled_from([64, 256, 1024]))
    over.update({"txn.max_payload_bytes": payload, "txn.max_read_request_bytes": payload,
                 "txn.read_tags": draw(st.integers(1, 8)),
                 "link.credit_pool_flits": draw(st.integers(5, 32)),
                 "link.replay_buffer_flits": draw(st.integers(5, 32)),
                 "link.seq_bits": draw(st.integers(3, 12)),
                 "endpoint.e2e_window_bytes": draw(st.integers(payload, 8 * payload)),
                 "phy.ber": draw(st.sampled_from([0.0, 1e-7, 1e-6, 2e-5])),
                 "sim.seed": draw(st.integers(0, 1000))})
    over.update(draw(error_models(over["phy.ber"])))
    if over.get("phy.ge_bad_ber", 0) > 2e-5 or over["phy.ber"] > 2e-5:
        over.update({"txn.max_payload_bytes": 64, "txn.max_read_request_bytes": 64})
    cfg = load_config(overrides=over)
    topo = build(cfg)
    R = topo.n_ranks
    n = draw(st.integers(1, 24))
    src = np.array(draw(st.lists(st.integers(0, R - 1), min_size=n, max_size=n)), np.int32)
    off = np.array(draw(st.lists(st.integers(1, R - 1), min_size=n, max_size=n)), np.int32)
    dst = (src + off) % R
    op = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), np.int8)
    nbytes = np.array(draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n)), np.int64)
    graph = transfer_graph(src, dst, nbytes, op)
    faults = [(draw(st.sampled_from(["corrupt_flit", "lose_ack", "lose_credit"])),
               draw(st.integers(0, topo.n_channels - 1)), draw(st.integers(1, 30)), draw(st.integers(1, 4)))
              for _ in range(draw(st.integers(0, 3)))]
    return cfg, topo, graph, faults


@st.composite
def permanent_faults(draw, topo, max_faults=3, horizon_us=6.0):
    """Random permanent faults on topo, as fabric.faults specs: links down, flapping or losing lanes (all of a
    node pair's parallel links, or one), switches down, at random times in [0, horizon_us]."""
    links = sorted({(min(int(u), int(v)), max(int(u), int(v))) for u, v in zip(topo.ch_src, topo.ch_dst)})
    switches = [n for n in range(topo.n_nodes) if topo.node_kind[n] == 1]
    name = topo.node_names
    specs = []
    for _ in range(draw(st.integers(1, max_faults))):
        t = round(draw(st.floats(0.0, horizon_us)), 3)
        if switches and draw(st.integers(0, 4)) == 0:
            specs.append(f"switch:{name[draw(st.sampled_from(switches))]}:down@{t}")
            continue
        u, v = draw(st.sampled_from(links))
        lanes = int(((topo.ch_src == u) & (topo.ch_dst == v)).sum())
        where = f"{name[u]}-{name[v]}" + (f"#{draw(st.integers(0, lanes - 1))}" if draw(st.booleans()) else "")
        action = draw(st.sampled_from(["down", "flap", "lanes"]))
        if action == "flap":
            specs.append(f"link:{where}:flap@{t}-{round(t + draw(st.floats(0.01, horizon_us)), 3)}")
        elif action == "lanes":
            specs.append(f"link:{where}:lanes={draw(st.sampled_from([1, 2, 4]))}@{t}")
        else:
            specs.append(f"link:{where}:down@{t}")
    return tuple(specs)
