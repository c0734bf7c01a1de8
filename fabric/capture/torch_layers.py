"""Record each kind of decoder layer once: the torch engine's recording of the other layers is a renamed copy.

DeepSeek-R1 has 61 decoder layers of two kinds (3 dense, 58 MoE); every layer of a kind dispatches the same aten
ops with the same shapes, only its module path (`model.layers.<i>`) differs. Running every layer's forward through
the meta device costs ~0.1 ms per op in torch's Python meta kernels, so `LayerShare` wraps each layer's forward:

- layers are grouped by a signature: every submodule's type, parameter and buffer shapes and dtypes and plain
  attributes (int, float, str, bool, None and tuples of them; `layer_idx` aside), and the cache layer's type and
  plain attributes. Per-layer differences a model sets up at construction (dense vs MoE, sliding vs global
  attention, no-RoPE layers) land in different groups.
- the first layer of a group runs for real; so does the second, and its ops must equal the first's renamed (a
  forward that reads its index at run time then fails the check and the whole group runs for real, as before).
- every later layer appends the first's ops with the module path renamed, and returns its input (a layer maps
  hidden states to hidden states of the same shape, dtype and strides: checked on the first, else no sharing).
- routed experts (`routed=True`, the eager runtime) depend on the layer through the routing oracle: their segments
  are not copied but run for real on the copied layer's own experts module with the first layer's inputs.

The recording (ops and detail) is the one running every layer gives; tests/test_torch_layers.py compares them.
"""
from __future__ import annotations

import itertools

PLAIN = (bool, int, float, str, type(None))


def _freeze(v):
    """A hashable form of a plain attribute value, or None when it is not plain."""
    if isinstance(v, PLAIN):
        return (v,)
    if isinstance(v, (tuple, list)):
        items = [_freeze(x) for x in v]
        return None if any(x is None for x in items) else (tuple(items),)
    return None


def _attrs(obj) -> tuple:
    out = []
    for k, v in sorted(vars(obj).items()):
        f = _freeze(v) if k != "layer_idx" else None
        if f is not None:
            out.append((k, f))
    return tuple(out)


def signature(layer, cache_layer) -> tuple:
    """What makes two decoder layers dispatch the same ops, their index aside."""
    parts = []
    for n, m in layer.named_modules():
        tensors = itertools.chain(m.named_parameters(recurse=False), m.named_buffers(recurse=False))
        parts.append((n, type(m).__qualname__, _attrs(m),
                      tuple((k, tuple(t.shape), str(t.dtype)) for k, t in tensors)))
    parts.append((type(cache_layer).__qualname__, _attrs(cache_layer)))
    return tuple(parts)


class _Group:
    def __init__(self):
        self.first = None          # (layer, start, end, expert segments) of the first layer run
        self.shared = None         # None: not decided yet; True: copy the first layer; False: run every layer


class LayerShare:
    """Wraps the forward of each layer in `layers` (path prefix `prefix`, e.g. "model.layers.") so that a recorder
    `rec` (ops, and detail when not None) records each group of identical layers once (module docstring)."""

    def __init__(self, torch, layers, cache_layers, prefix: str, modules: dict, rec, routed: bool):
        self.torch, self.prefix, self.modules, self.rec, self.routed = torch, prefix, modules, rec, routed
        self.segments: list = []   # expert segments of the layer running for real: (start, end, path suffix, inputs)
        self.renamed: dict = {}
        groups: dict = {}
        for i, (layer, cl) in enumerate(zip(layers, cache_layers)):
            g = groups.setdefault(signature(layer, cl), _Group())
            layer.forward = self._wrap(i, g, layer.forward)

    def _wrap(self, i: int, g: _Group, forward):
        def run(*args, **kwargs):
            x = args[0] if args else kwargs.get("hidden_states")
            if g.shared:
                self._copy(i, g.first)
                return x
            self.segments = []
            start = len(self.rec.ops)
            out = forward(*args, **kwargs)
            cur = (i, start, len(self.rec.ops), self.segments)
            if g.first is None:
                g.first = cur
                T = self.torch.Tensor
                if not (isinstance(x, T) and isinstance(out, T) and out.shape == x.shape and out.dtype == x.dtype
                        and out.stride() == x.stride()):
                    g.shared = False
            elif g.shared is None:
                g.shared = self._same(g.first, cur)
            return out
        return run

    def experts_ran(self, path: str, start: int, inputs: tuple) -> None:
        """Called by the recorder's experts forward (module `path`, its ops from `start` on) after it ran: routed
        experts are rerun in copied layers, not copied."""
        if self.routed:
            self.segments.append((start, len(self.rec.ops), path[len(self.prefix):].partition(".")[2], inputs))

    def _rename(self, module: str, src: int, dst: int) -> str:
        key = (module, src, dst)
        if key not in self.renamed:
            head = f"{self.prefix}{src}"
            self.renamed[key] = (f"{self.prefix}{dst}{module[len(head):]}"
                                 if module == head or module.startswith(head + ".") else module)
        return self.renamed[key]

    def _outside(self, rec):
        """Indices of a layer's ops outside its routed-expert segments."""
        _, start, end, segs = rec
        j = start
        for a, b, _, _ in segs:
            yield from range(j, a)
            j = b
        yield from range(j, end)

    def _same(self, first, cur) -> bool:
        ops, det = self.rec.ops, self.rec.detail
        a, b = list(self._outside(first)), list(self._outside(cur))
        if len(a) != len(b):
            return False
        src, dst = first[0], cur[0]
        for j, k in zip(a, b):
            name, mod, shapes = ops[j]
            if (name, self._rename(mod, src, dst), shapes) != ops[k]:
                return False
            if det is not None and {**det[j], "module": self._rename(det[j]["module"], src, dst)} != det[k]:
                return False
        return True

    def _copy(self, dst: int, first) -> None:
        src, start, end, segs = first
        ops, det = self.rec.ops, self.rec.detail
        self.segments = []         # the rerun experts report here, not into the first layer's segments
        j = start
        for a, b, suffix, inputs in segs + [(end, end, None, None)]:
            for k in range(j, a):
                name, mod, shapes = ops[k]
                m = self._rename(mod, src, dst)
                ops.append((name, m, shapes))
                if det is not None:
                    det.append({**det[k], "module": m})
            if suffix is not None:
                self.modules[f"{self.prefix}{dst}.{suffix}"](*inputs)
            j = b
