"""Unified address space: the switch-domain global map, per-host-domain windows, translation, a reference memory.

Layout (all windows are `topology.accel_mem_gib` GiB, the memory of one accelerator):
- Global (switch-domain) map, independent of every host domain: accelerator r owns
  [GLOBAL_BASE + r*W, GLOBAL_BASE + (r+1)*W).
- Host domain h sees every accelerator of the fabric above HOST_BASE: first *local* windows for its own
  accelerators (ascending rank), then *shadow-device* windows for every remote accelerator (ascending rank). So a
  host domain sees R/A times its own accelerator memory (8x for the 64-accelerator sd200,
  docs/sources.md §SD200 system).
- The ingress port translates host address -> global address -> destination rank; an access to a shadow window is
  cross-host P2P, forwarded through the fabric (`ingress_cost_ps` charges EndpointConfig.translation_ns, plus
  translation_miss_ns when the port's translation cache misses, plus p2p_forward_ns for shadow windows). The
  kernel does the same lookup (endpoint.pxi: window_find, translate) on the tables `kernel_tables` gives it.
- Host-memory nodes (topology.host_memory, the last n_host_memory ranks) are ranks like the accelerators: each
  belongs to its host domain, so it has a local window there and a shadow window in every other domain, and an
  accelerator of any domain reaches it through the fabric by load/store. Its window is an aperture of
  topology.accel_mem_gib (the layout gives every rank one window size, which the kernel's translation and the
  C address passes rely on) while its capacity is topology.host_memory.gib_per_node: a KV tier addresses its
  blocks through the aperture and keeps the capacity in its own accounting.
- An access that is not wholly inside one window is an Unsupported Request: `translate` returns status STATUS_UR
  with an error text (never an exception, never a wrong address) and the kernel completes the transfer with UR;
  the host's own DRAM below HOST_BASE stays outside every window (reach it through a host-memory node).
- Overlapping or empty windows are refused with AddressError when a table is built.

Buffers (docs/contracts.md §Addresses): the collective library's buffers are symmetric, at the same offsets in every
accelerator's memory and reused by every call (registered once): the window's first quarter holds the flags (the
flag from group member p at p x FLAG_SLOT_BYTES), then a quarter each for the in, out and tmp buffers
(`heap_offset`). The lowering names every store's destination (peer, buffer, offset) as a global address
(`global_addresses`); the issuing program sees it at the host address of its own domain (`AddressMap.to_host_array`,
what fabric.sim hands the kernel), and the kernel's ingress port translates it back through the domain's
shadow-window table (`kernel_tables`: the same windows, bounded to endpoint.shadow_windows entries).

`Memory` is a pure-Python functional model (sparse pages) used by tests to store through any window and read back.
"""
from __future__ import annotations

import bisect
import functools
import zlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from fabric.errors import FabricError
from fabric.phy import ps

STATUS_OK = 0
STATUS_UR = 1          # Unsupported Request: the address hits no window (PCIe completion status UR)
GIB = 1 << 30
GLOBAL_BASE = 0        # the switch-domain space is private to the fabric: it may start at 0
HOST_BASE = 1 << 44    # 16 TiB: above a host's own DRAM (64 TB over 8 hosts = 8 TB each,
                       # docs/sources.md §SD200 system) and MMIO
ADDR_LIMIT = 1 << 63   # addresses are int64 in the kernel


FLAG_SLOT_BYTES = 64   # one flag per sender: a cache line each, so flags from different senders never share one
BUF_FLAG = -1          # taskgraph.BUF_NONE: a flag store moves no data of a buffer; it lands in the flag region


class AddressError(FabricError):
    """Address windows are malformed or overlap."""


@dataclass(frozen=True)
class Window:
    """Host (or global) addresses [base, base+size) map to global [target, target+size) in accelerator `rank`."""
    base: int
    size: int
    rank: int
    target: int
    shadow: bool = False

    @property
    def end(self) -> int:
        return self.base + self.size


class Translation(NamedTuple):
    """Result of a lookup. status STATUS_OK, or STATUS_UR with the other numbers -1/False and `error` set."""
    global_addr: int
    dst_rank: int
    is_shadow: bool
    status: int = STATUS_OK
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK


class HostAddress(NamedTuple):
    """Result of the inverse lookup (global -> host address of one domain)."""
    host_addr: int
    dst_rank: int
    is_shadow: bool
    status: int = STATUS_OK
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK


class WindowTable:
    """Non-overlapping windows sorted by base, held as arrays; lookups by bisection (scalar) or searchsorted
    (arrays). `windows` (Window records) are made when first read: an AddressMap of 1024 ranks has 128 tables of
    1024 windows, which the kernel and the vectorised lookups read only as arrays."""

    def __init__(self, windows, what: str = "address map"):
        ws = sorted(windows, key=lambda w: (w.base, w.size))
        for w in ws:
            if w.size <= 0:
                raise AddressError(f"{what}: window of rank {w.rank} at {w.base:#x} has size {w.size}; must be > 0")
            if w.base < 0 or w.end > ADDR_LIMIT or w.target < 0 or w.target + w.size > ADDR_LIMIT:
                raise AddressError(f"{what}: window of rank {w.rank} [{w.base:#x}, {w.end:#x}) does not fit in "
                                   f"63-bit addresses")
        for a, b in zip(ws, ws[1:]):
            if b.base < a.end:
                raise AddressError(f"{what}: window of rank {b.rank} [{b.base:#x}, {b.end:#x}) overlaps window of "
                                   f"rank {a.rank} [{a.base:#x}, {a.end:#x})")
        self._set(what, [w.base for w in ws], [w.size for w in ws], [w.target for w in ws], [w.rank for w in ws],
                  [w.shadow for w in ws])
        self.__dict__["windows"] = ws

    @classmethod
    def of_arrays(cls, what: str, base, size, target, rank, shadow) -> "WindowTable":
        """A table of windows already checked: sorted by base, each of size > 0, inside 63-bit addresses, none
        overlapping (AddressMap's, whose layout guarantees it once its extent fits)."""
        t = cls.__new__(cls)
        t._set(what, base, size, target, rank, shadow)
        return t

    def _set(self, what, base, size, target, rank, shadow) -> None:
        self.what = what
        self.base = np.array(base, dtype=np.int64)
        self.size = np.array(size, dtype=np.int64)
        self.target = np.array(target, dtype=np.int64)
        self.rank = np.array(rank, dtype=np.int32)
        self.shadow = np.array(shadow, dtype=bool)

    @functools.cached_property
    def windows(self) -> list[Window]:
        return [Window(int(b), int(n), int(r), int(t), bool(sh))
                for b, n, r, t, sh in zip(self.base, self.size, self.rank, self.target, self.shadow)]

    @functools.cached_property
    def _bases(self) -> list[int]:
        return self.base.tolist()

    def __len__(self) -> int:
        return len(self.base)

    def find(self, addr: int, nbytes: int = 1) -> int:
        """Index of the window wholly containing [addr, addr+nbytes), or -1."""
        i = bisect.bisect_right(self._bases, addr) - 1
        if i < 0 or nbytes < 1:
            return -1
        w = self.windows[i]
        return i if addr + nbytes <= w.end else -1

    def find_array(self, addrs, nbytes=1) -> np.ndarray:
        """Vectorised `find`: int64[n] window indices, -1 where out of every window."""
        addrs = np.asarray(addrs, dtype=np.int64)
        nbytes = np.broadcast_to(np.asarray(nbytes, dtype=np.int64), addrs.shape)
        i = np.searchsorted(self.base, addrs, side="right") - 1
        safe = np.clip(i, 0, max(len(self) - 1, 0))
        inside = (i >= 0) & (nbytes >= 1) & (len(self) > 0)
        if len(self):
            inside &= addrs + nbytes <= self.base[safe] + self.size[safe]
        return np.where(inside, i, -1)


class AddressMap:
    """Global map plus one host view per domain. Build with `build_address_map(topo, cfg)` or directly."""

    def __init__(self, rank_domain, window_bytes: int, global_base: int = GLOBAL_BASE, host_base: int = HOST_BASE):
        self.rank_domain = np.asarray(rank_domain, dtype=np.int32)
        self.n_ranks = R = len(self.rank_domain)
        self.window_bytes = W = int(window_bytes)
        self.global_base, self.host_base = int(global_base), int(host_base)
        self.domains: dict[int, WindowTable] = {}
        domains = sorted(set(self.rank_domain.tolist()) - {-1})
        # slot[h][r]: where host domain h sees rank r (its local windows first, then the shadow ones, each by rank)
        self._slots = np.full((max(domains, default=-1) + 1, R), -1, np.int64)
        self._host_slot: dict[int, np.ndarray] = {}
        if not (W > 0 and min(global_base, host_base) >= 0 and max(global_base, host_base) + R * W <= ADDR_LIMIT):
            self._checked_tables(domains)          # one of its windows is malformed: it says which
        ranks = np.arange(R, dtype=np.int64)
        at = ranks * W                             # fits: checked above
        self.global_windows = WindowTable.of_arrays("global address map", global_base + at, np.full(R, W), global_base
                                                    + at, ranks, np.zeros(R, bool))
        for h in domains:
            local = self.rank_domain == h
            order = np.concatenate([np.flatnonzero(local), np.flatnonzero(~local)])
            self.domains[h] = WindowTable.of_arrays(f"host domain {h} address map", host_base + at, np.full(R, W),
                                                    global_base + order * W, order, ~local[order])
            self._slots[h, order] = ranks
            self._host_slot[h] = self._slots[h]

    def _checked_tables(self, domains) -> None:
        """The tables as Window records, each checked by WindowTable: raises AddressError naming the first bad one."""
        R, W, gb, hb = self.n_ranks, self.window_bytes, self.global_base, self.host_base
        WindowTable([Window(gb + r * W, W, r, gb + r * W) for r in range(R)], "global address map")
        for h in domains:
            order = [r for r in range(R) if self.rank_domain[r] == h] + [r for r in range(R)
                                                                          if self.rank_domain[r] != h]
            WindowTable([Window(hb + i * W, W, r, gb + r * W, shadow=bool(self.rank_domain[r] != h))
                         for i, r in enumerate(order)], f"host domain {h} address map")

    # ------------------------------------------------------------ helpers for building addresses
    def global_addr(self, rank: int, offset: int = 0) -> int:
        return self.global_base + rank * self.window_bytes + offset

    def host_addr(self, domain: int, rank: int, offset: int = 0) -> int:
        """Address at which host domain `domain` sees byte `offset` of accelerator `rank` (local or shadow)."""
        self._table(domain)
        return self.host_base + int(self._host_slot[domain][rank]) * self.window_bytes + offset

    def _table(self, domain: int) -> WindowTable:
        try:
            return self.domains[domain]
        except KeyError:
            raise AddressError(f"host domain {domain} does not exist (domains: {sorted(self.domains)})") from None

    # ------------------------------------------------------------ translation
    def translate(self, domain: int, host_addr: int, nbytes: int = 1) -> Translation:
        """Host address of `domain` -> (global address, destination rank, is_shadow); UR if outside every window."""
        t = self._table(domain)
        i = t.find(host_addr, nbytes)
        if i < 0:
            return Translation(-1, -1, False, STATUS_UR,
                               f"Unsupported Request: host domain {domain} access [{host_addr:#x}, "
                               f"{host_addr + nbytes:#x}) is not inside one window")
        w = t.windows[i]
        return Translation(w.target + (host_addr - w.base), w.rank, w.shadow)

    def to_host(self, domain: int, global_addr: int, nbytes: int = 1) -> HostAddress:
        """Inverse of `translate`: global address -> host address in `domain`; UR if outside the global map."""
        rank, off = self.locate(global_addr, nbytes)
        if rank < 0:
            return HostAddress(-1, -1, False, STATUS_UR,
                               f"Unsupported Request: global access [{global_addr:#x}, {global_addr + nbytes:#x}) "
                               f"is not inside one accelerator's window")
        self._table(domain)
        return HostAddress(self.host_addr(domain, rank, off), rank, bool(self.rank_domain[rank] != domain))

    def locate(self, global_addr: int, nbytes: int = 1) -> tuple[int, int]:
        """Global address -> (rank, offset in its memory), (-1, -1) if outside the global map."""
        i = self.global_windows.find(global_addr, nbytes)
        if i < 0:
            return -1, -1
        w = self.global_windows.windows[i]
        return w.rank, global_addr - w.base

    def to_host_array(self, domains, global_addrs) -> np.ndarray:
        """Vectorised `to_host`: host addresses in each element's own domain (int64); an address outside the global
        map, or a domain without a view, gives 0 (the host's own memory, in no window: an Unsupported Request)."""
        dom, g = np.broadcast_arrays(np.asarray(domains, np.int64), np.asarray(global_addrs, np.int64))
        who = np.clip(dom, -1, len(self._slots)).astype(np.int32).ravel()      # -1 and past the last: no view
        return self._host_addresses(g.ravel(), who, None, 0).reshape(g.shape)

    def issuer_host_array(self, ranks, global_addrs) -> np.ndarray:
        """Each global address as the domain of the rank that issues it sees it (`to_host_array` in domain
        rank_domain[rank], the rank clipped into range), a negative one (addressed by rank) -1: what the issuing
        program writes, and fabric.sim hands the kernel."""
        return self._host_addresses(np.asarray(global_addrs, np.int64), np.asarray(ranks, np.int32),
                                    self.rank_domain, -1)

    def _host_addresses(self, g, who, domain_of, unaddressed: int) -> np.ndarray:
        """One pass in C (the array passes' host_addresses: no temporaries per address, 18 M of them at 1024 ranks)."""
        from fabric._check_build import arrays
        return arrays.host_addresses(np.ascontiguousarray(g), np.ascontiguousarray(who), domain_of, self._slots,
                                     self.global_base, self.window_bytes, self.host_base, unaddressed)

    def kernel_tables(self, entries: int = 0) -> dict:
        """Every domain's window table for the kernel (Engine's xlate): CSR w_ptr over domains 0..max, w_base,
        w_size, w_target (global base) and w_rank, sorted by base; each table keeps its first `entries` windows in
        host-address order (local first, then shadow windows by rank; 0: all)."""
        n_dom = max(self.domains, default=-1) + 1
        tables = [self.domains.get(h) for h in range(n_dom)]
        keep = [min(len(t), entries or len(t)) if t is not None else 0 for t in tables]
        ptr = np.zeros(n_dom + 1, np.int64)
        np.cumsum(keep, out=ptr[1:])

        def col(name, dtype):
            parts = [getattr(t, name)[:k] for t, k in zip(tables, keep) if k]
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)
        return dict(w_ptr=ptr, w_base=col("base", np.int64), w_size=col("size", np.int64),
                    w_target=col("target", np.int64), w_rank=col("rank", np.int32))

    def translate_array(self, domain: int, host_addrs, nbytes=1):
        """Vectorised translate: (status int8, global_addr int64, dst_rank int32, is_shadow bool) arrays."""
        t = self._table(domain)
        addrs = np.asarray(host_addrs, dtype=np.int64)
        i = t.find_array(addrs, nbytes)
        ok = i >= 0
        j = np.where(ok, i, 0)
        if not len(t):
            return (np.full(addrs.shape, STATUS_UR, np.int8), np.full(addrs.shape, -1, np.int64),
                    np.full(addrs.shape, -1, np.int32), np.zeros(addrs.shape, bool))
        status = np.where(ok, STATUS_OK, STATUS_UR).astype(np.int8)
        gaddr = np.where(ok, t.target[j] + (addrs - t.base[j]), -1)
        rank = np.where(ok, t.rank[j], -1).astype(np.int32)
        shadow = ok & t.shadow[j]
        return status, gaddr, rank, shadow


def heap_offset(buf, off, src_pos, window_bytes: int) -> np.ndarray:
    """Offset in an accelerator's window of byte `off` of buffer `buf` (taskgraph BUF_IN/OUT/TMP), or of the flag
    slot of group member `src_pos` for buf BUF_FLAG (module docstring: the symmetric buffer layout)."""
    buf, off, src_pos = np.broadcast_arrays(np.asarray(buf, np.int64), np.asarray(off, np.int64),
                                            np.asarray(src_pos, np.int64))
    quarter = int(window_bytes) // 4
    return np.where(buf == BUF_FLAG, src_pos * FLAG_SLOT_BYTES, (buf + 1) * quarter + off)


def global_addresses(peer, buf, off, src_pos, window_bytes: int, global_base: int = GLOBAL_BASE) -> np.ndarray:
    """Global addresses of (peer rank, buffer, offset) (heap_offset), int64."""
    return global_base + np.asarray(peer, np.int64) * int(window_bytes) + heap_offset(buf, off, src_pos,
                                                                                      window_bytes)


def build_address_map(topo, cfg) -> AddressMap:
    """The address map of a built Topology: one window of topology.accel_mem_gib GiB per rank (host-memory ranks
    included: an aperture of their capacity)."""
    return AddressMap(topo.node_domain[:topo.n_ranks], cfg.topology.accel_mem_gib * GIB)


def ingress_cost_ps(cfg, is_shadow: bool, miss: bool = False) -> int:
    """What the ingress port charges a request: translation (plus the window-table walk when its translation
    cache misses), plus forwarding when it targets a shadow window (the kernel's translate and start_task)."""
    e = cfg.endpoint
    return ps(e.translation_ns + (e.translation_miss_ns if miss else 0.0) + (e.p2p_forward_ns if is_shadow else 0.0))


# ---------------------------------------------------------------- functional reference memory

class Memory:
    """Sparse byte-accurate memory of every accelerator, reached through an AddressMap (functional level only)."""

    PAGE = 4096

    def __init__(self, amap: AddressMap):
        self.amap = amap
        self.pages: dict[tuple[int, int], bytearray] = {}

    def _spans(self, rank: int, offset: int, n: int):
        P = self.PAGE
        pos = 0
        while pos < n:
            page, within = divmod(offset + pos, P)
            take = min(P - within, n - pos)
            yield page, within, pos, take
            pos += take

    def write_local(self, rank: int, offset: int, data: bytes) -> None:
        for page, within, pos, take in self._spans(rank, offset, len(data)):
            buf = self.pages.setdefault((rank, page), bytearray(self.PAGE))
            buf[within:within + take] = data[pos:pos + take]

    def read_local(self, rank: int, offset: int, n: int) -> bytes:
        out = bytearray(n)
        for page, within, pos, take in self._spans(rank, offset, n):
            buf = self.pages.get((rank, page))
            if buf is not None:
                out[pos:pos + take] = buf[within:within + take]
        return bytes(out)

    def store(self, domain: int, host_addr: int, data: bytes) -> Translation:
        """Posted write through host domain `domain`'s windows; UR leaves every memory untouched."""
        tr = self.amap.translate(domain, host_addr, max(len(data), 1))
        if tr.ok:
            self.write_local(tr.dst_rank, tr.global_addr - self.amap.global_addr(tr.dst_rank), data)
        return tr

    def load(self, domain: int, host_addr: int, n: int) -> tuple[Translation, bytes | None]:
        """Read through host domain `domain`'s windows; (UR result, None) outside every window."""
        tr = self.amap.translate(domain, host_addr, max(n, 1))
        if not tr.ok:
            return tr, None
        return tr, self.read_local(tr.dst_rank, tr.global_addr - self.amap.global_addr(tr.dst_rank), n)

    def store_global(self, global_addr: int, data: bytes) -> int:
        rank, off = self.amap.locate(global_addr, max(len(data), 1))
        if rank < 0:
            return STATUS_UR
        self.write_local(rank, off, data)
        return STATUS_OK

    def load_global(self, global_addr: int, n: int) -> tuple[int, bytes | None]:
        rank, off = self.amap.locate(global_addr, max(n, 1))
        if rank < 0:
            return STATUS_UR, None
        return STATUS_OK, self.read_local(rank, off, n)

    def checksum(self, rank: int) -> int:
        """CRC-32 over the rank's written pages (address order), for cheap whole-memory comparisons."""
        crc = 0
        for key in sorted(k for k in self.pages if k[0] == rank):
            crc = zlib.crc32(key[1].to_bytes(8, "little"), crc)
            crc = zlib.crc32(self.pages[key], crc)
        return crc
