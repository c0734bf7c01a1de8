"""Unified address space: windows, translation round trips, overlap refusal, Unsupported Request, memory model."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.address import (GIB, HOST_BASE, STATUS_OK, STATUS_UR, AddressError, AddressMap, Memory, Window,
                            WindowTable, build_address_map, ingress_cost_ps)
from fabric.config import load_config
from fabric.errors import FabricError
from fabric.network import build

CFG = load_config(preset="sd200")
TOPO = build(CFG)
AMAP = build_address_map(TOPO, CFG)
W = 64 * GIB


def test_layout_local_then_shadow_windows():
    assert AMAP.window_bytes == W and sorted(AMAP.domains) == list(range(8))
    for h, table in AMAP.domains.items():
        assert len(table) == 64                                   # sees all 64 accelerators: 8x its own
        local = [w for w in table.windows if not w.shadow]
        assert [w.rank for w in local] == list(range(8 * h, 8 * h + 8))
        assert local[0].base == HOST_BASE                         # local windows first
        assert all(w.shadow == (w.rank // 8 != h) for w in table.windows)
        assert sum(w.size for w in table.windows) == 8 * sum(w.size for w in local)
    assert [w.base for w in AMAP.global_windows.windows] == [r * W for r in range(64)]


ranks = st.integers(0, 63)
domains = st.integers(0, 7)
offsets = st.integers(0, W - 1)


@given(domains, ranks, offsets)
def test_round_trip_host_global_host(domain, rank, offset):
    h = AMAP.host_addr(domain, rank, offset)
    tr = AMAP.translate(domain, h)
    assert tr.ok and tr.status == STATUS_OK and tr.error == ""
    assert tr.global_addr == AMAP.global_addr(rank, offset) and tr.dst_rank == rank
    assert tr.is_shadow == (rank // 8 != domain)
    assert AMAP.locate(tr.global_addr) == (rank, offset)
    back = AMAP.to_host(domain, tr.global_addr)
    assert back.ok and back.host_addr == h and back.dst_rank == rank and back.is_shadow == tr.is_shadow


@given(domains, st.integers(0, 1 << 62))
def test_any_address_translates_consistently_or_is_unsupported(domain, addr):
    tr = AMAP.translate(domain, addr)
    if tr.ok:
        assert AMAP.to_host(domain, tr.global_addr).host_addr == addr
    else:
        assert tr.status == STATUS_UR and "Unsupported Request" in tr.error
        assert (tr.global_addr, tr.dst_rank, tr.is_shadow) == (-1, -1, False)
        assert not HOST_BASE <= addr < HOST_BASE + 64 * W


@given(st.integers(0, 7), st.integers(0, 127), st.integers(-4, 4))
def test_unsupported_request_outside_every_window(domain, rank, delta):
    top = HOST_BASE + 64 * W
    for addr in (0, HOST_BASE - 1, top, top + rank * W + abs(delta)):
        tr = AMAP.translate(domain, addr)
        assert tr.status == STATUS_UR and not tr.ok
    # an access straddling a window boundary is refused as a whole, never split or truncated
    edge = AMAP.host_addr(domain, rank % 64, W - 8)
    assert AMAP.translate(domain, edge, 8).ok
    assert AMAP.translate(domain, edge, 9).status == STATUS_UR
    assert AMAP.to_host(domain, 64 * W + abs(delta)).status == STATUS_UR


def test_translate_array_matches_scalar():
    rng = np.random.default_rng(3)
    addrs = np.concatenate([rng.integers(HOST_BASE - W, HOST_BASE + 65 * W, 500),
                            [HOST_BASE, HOST_BASE + 64 * W - 1, HOST_BASE + 64 * W, 0]])
    for domain in (0, 5):
        status, g, r, sh = AMAP.translate_array(domain, addrs, 4)
        for i, a in enumerate(addrs.tolist()):
            tr = AMAP.translate(domain, a, 4)
            assert (status[i], g[i], r[i], bool(sh[i])) == (tr.status, tr.global_addr, tr.dst_rank, tr.is_shadow)


def test_overlapping_or_empty_windows_are_refused():
    assert issubclass(AddressError, FabricError)
    with pytest.raises(AddressError, match="overlaps"):
        WindowTable([Window(0, 100, 0, 0), Window(99, 10, 1, 1000)])
    with pytest.raises(AddressError, match="size 0"):
        WindowTable([Window(0, 0, 0, 0)])
    with pytest.raises(AddressError, match="63-bit"):
        AddressMap([0] * 4, 1 << 62)                              # 4 windows of 2^62 B do not fit
    WindowTable([Window(0, 100, 0, 0), Window(100, 10, 1, 1000)])  # touching is fine
    with pytest.raises(AddressError, match="does not exist"):
        AMAP.translate(99, HOST_BASE)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 50)), min_size=2, max_size=8))
def test_window_table_accepts_exactly_the_disjoint_sets(spans):
    wins = [Window(b, n, i, 10_000 * i) for i, (b, n) in enumerate(spans)]
    cover = [set(range(b, b + n)) for b, n in spans]
    disjoint = all(not (cover[i] & cover[j]) for i in range(len(cover)) for j in range(i))
    if disjoint:
        t = WindowTable(wins)
        for i, (b, n) in enumerate(spans):
            assert t.windows[t.find(b + n - 1)].rank == i
    else:
        with pytest.raises(AddressError):
            WindowTable(wins)


def test_memory_store_through_shadow_windows_and_read_back_everywhere():
    mem = Memory(AMAP)
    for src in range(64):                      # every accelerator writes into every other one via its host's view
        domain = src // 8
        for dst in range(64):
            if dst == src:
                continue
            payload = bytes([src, dst]) * 3 + src.to_bytes(2, "little")
            tr = mem.store(domain, AMAP.host_addr(domain, dst, src * 8), payload)
            assert tr.ok and tr.dst_rank == dst and tr.is_shadow == (dst // 8 != domain)
    for dst in range(64):
        for src in range(64):
            if dst == src:
                continue
            want = bytes([src, dst]) * 3 + src.to_bytes(2, "little")
            for reader in (0, dst // 8, (dst // 8 + 3) % 8):   # read back from any host domain
                tr, got = mem.load(reader, AMAP.host_addr(reader, dst, src * 8), 8)
                assert tr.ok and got == want
            assert mem.load_global(AMAP.global_addr(dst, src * 8), 8) == (STATUS_OK, want)


def test_memory_unsupported_request_never_corrupts():
    mem = Memory(AMAP)
    mem.store(0, AMAP.host_addr(0, 9, W - 4), b"abcd")
    before = [mem.checksum(r) for r in range(64)]
    tr = mem.store(0, AMAP.host_addr(0, 9, W - 4), b"abcdefgh")      # runs 4 bytes past rank 9's window
    assert tr.status == STATUS_UR and "Unsupported Request" in tr.error
    tr = mem.store(3, HOST_BASE + 64 * W, b"x")
    assert tr.status == STATUS_UR
    assert mem.load(3, 12345, 4) == (mem.load(3, 12345, 4)[0], None)
    assert mem.store_global(64 * W, b"x") == STATUS_UR
    assert [mem.checksum(r) for r in range(64)] == before
    assert mem.load(0, AMAP.host_addr(0, 9, W - 4), 4)[1] == b"abcd"


def test_memory_spans_pages():
    mem = Memory(AMAP)
    data = bytes(range(256)) * 40                                     # 10 KiB across 4 KiB pages
    assert mem.store(2, AMAP.host_addr(2, 40, 4000), data).ok
    assert mem.load(6, AMAP.host_addr(6, 40, 4000), len(data))[1] == data
    assert mem.load(6, AMAP.host_addr(6, 40, 0), 16)[1] == bytes(16)   # unwritten memory reads as zero


def test_ingress_cost_charges_forwarding_only_for_shadow_windows():
    e = CFG.endpoint
    assert ingress_cost_ps(CFG, False) == round(1000 * e.translation_ns)
    assert ingress_cost_ps(CFG, True) == round(1000 * (e.translation_ns + e.p2p_forward_ns))


def test_address_map_of_other_topologies():
    for preset in ("scaleout-roce", "sd200-accel-mesh", "link"):
        cfg = load_config(preset=preset)
        t = build(cfg)
        amap = build_address_map(t, cfg)
        for h in amap.domains:
            assert len(amap.domains[h]) == t.n_ranks
        r = t.n_ranks - 1
        tr = amap.translate(0, amap.host_addr(0, r, 7))
        assert tr.ok and tr.dst_rank == r
    amap = build_address_map(TOPO, load_config(overrides={"topology.accel_mem_gib": 96}))
    assert amap.window_bytes == 96 * GIB
