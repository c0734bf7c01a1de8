"""Parsers for the calibration tables (fabric/data/calibration/; the PCIe and P2P files of the full calibration
set are read only when CAL points to a folder that has them: `CAL=/path/to/calibration python fit.py`).

Every collective table becomes rows  (table, op, bytes, t_oop_us, t_ip_us)  (t_ip or t_oop may be None).
`measured(row)` gives the value the fit uses: min(oop, ip) (noise and first-call effects only ever slow a call).

Quirks (see also NOTES.md):
  * A100 1-node table: single process `-g 8` (one host thread launches 8 kernels per call, no CUDA graph) -> ~35 us
    floor that is mostly host launch, not fabric.  NCCL 2.19.3.
  * B200 table: NCCL 2.27 symmetric-memory kernels, CUDA graph, one process per GPU (per the thread). The 8 B
    out-of-place value 12.44 us is a first-call outlier (in-place 3.06) -> min() removes it.
  * H200 2x8 table: one process per NODE driving 8 GPUs (nThread 1 nGpus 8) -> same multi-launch floor as A100;
    NCCL_MIN_NCHANNELS=32; 16 MB out-of-place 304 us vs in-place 208 us (noise). Non-monotonic 128K->256K (LL->other
    protocol switch of NCCL's tuner).
  * H200 2x1 table: 1 GPU per node, one RDMA NIC each (GCP gIB plugin). Bandwidth step 32M->64M (20.8->29.8 GB/s).
  * MSCCL++ file: only 1 KB latencies (in-place, CUDA graph -G 1) and 1 GiB (and 4 GiB) busbw; NCCL 2.17.1. The
    1-node AllReduce 1G busbw appears as 231.45 (ndmv4 doc) and 132.31 (performance.md); we take 231.45 and flag it.
    Only the NCCL columns are used (MSCCL/MSCCL++ columns are other libraries).
  * PCIe file: 4x A100-PCIE all_reduce -g 4 (full table) and 8x RTX 5090 -g 8 (7 sizes quoted in prose).
"""
import os
import re

CAL = os.environ.get("CAL", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fabric", "data",
                                        "calibration"))

FILES = {
    "a100_1x8_g8": "1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt",
    "b200_1x8_sym": "1node_8xB200_nccl227_symmetric_allreduce_issue333.txt",
    "h200_2x8_roce": "2node_8xH200_RoCE400G_spectrumx_openshift.txt",
    "h200_2x1_roce": "2node_1xH200_RoCE_gke_dranet.txt",
}
MSCCLPP = "mscclpp_NDv4_NDmv4_A100_IB200G_latency.txt"
PCIE = "p2pBandwidthLatencyTest_PCIe_systems.txt"
P2P_A100 = "p2pBandwidthLatencyTest_8xA100-SXM4-80GB.txt"

_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+"
                  r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$")


def parse_nccl_tests(text, table, op="allreduce"):
    """nccl-tests stdout (size count type redop root time algbw busbw #wrong time algbw busbw #wrong)."""
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            rows.append(dict(table=table, op=op, bytes=int(m.group(1)),
                             t_oop=float(m.group(6)), t_ip=float(m.group(10))))
    return rows


def _busfactor(op, n):
    return 2.0 * (n - 1) / n if op == "allreduce" else (n - 1) / n


def parse_mscclpp(text):
    """NCCL columns only. Sections '1 node, 8 gpus/node', '2 nodes, 1 gpu/node', '2 nodes, 8 gpus/node'."""
    rows, sec = [], None
    secmap = {"1 node, 8 gpus/node": ("a100ib_1x8_graph", 8), "2 nodes, 1 gpu/node": ("a100ib_2x1_graph", 2),
              "2 nodes, 8 gpus/node": ("a100ib_2x8_graph", 16)}
    ops = ["allgather", "allreduce", "alltoall"]
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("###"):
            sec = secmap.get(s.strip("# ").strip())
            continue
        if sec is None or not s.startswith("|"):
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        size = cells[0]
        if size not in ("1K", "1G", "4G"):
            continue
        table, n = sec
        for op, cell in zip(ops, cells[1:4]):
            v = re.findall(r"[\d.]+", cell)
            if not v or cell.strip() == "-":
                continue
            if size == "1K":
                rows.append(dict(table=table, op=op, bytes=1024, t_oop=None, t_ip=float(v[0])))
            else:
                nbytes = (1 << 30) * (4 if size == "4G" else 1)
                busbw = float(v[0])  # first number = ndmv4 value where two are given
                algbw = busbw / _busfactor(op, n)
                rows.append(dict(table=table, op=op, bytes=nbytes, t_oop=None, t_ip=nbytes / (algbw * 1e3),
                                 note="from busbw %.2f GB/s" % busbw))
    return rows


def parse_pcie(text):
    rows = []
    part = text.split("all_reduce_perf -b 8 -e 128M -f 2 -g 4", 1)[1].split("# Out of bounds", 1)[0]
    rows += parse_nccl_tests(part, "a100pcie_1x4_g4")
    m = re.search(r"nccl-tests 2\.18\.2.*?:(.*?)\(out-of-place", text, re.S)
    for size, a, b in re.findall(r"(\d+ ?(?:B|MiB))\s*->\s*([\d.]+)/([\d.]+) us", m.group(1)):
        num, unit = re.match(r"(\d+) ?(B|MiB)", size).groups()
        nbytes = int(num) * (1 << 20 if unit == "MiB" else 1)
        rows.append(dict(table="rtx5090_1x8_g8", op="allreduce", bytes=nbytes, t_oop=float(a), t_ip=float(b)))
    return rows


def parse_p2p_matrix(text, title):
    """Return the GPU matrix (list of rows) that follows a line starting with `title`."""
    lines = text.splitlines()
    for i, l in enumerate(lines):
        if l.strip().startswith(title):
            mat = []
            for l2 in lines[i + 2:]:
                nums = l2.split()
                if not nums or not nums[0].isdigit():
                    break
                mat.append([float(x) for x in nums[1:]])
            return mat
    return None


def p2p_summary():
    """Off-diagonal means of the A100 NVSwitch p2pBandwidthLatencyTest matrices."""
    text = open(os.path.join(CAL, P2P_A100)).read()
    out = {}
    for key, title in [("uni_bw_GBps", "Unidirectional P2P=Enabled"), ("bidir_bw_GBps", "Bidirectional P2P=Enabled"),
                       ("p2p_write_lat_us", "P2P=Enabled Latency")]:
        m = parse_p2p_matrix(text, title)
        off = [m[i][j] for i in range(len(m)) for j in range(len(m)) if i != j]
        out[key] = sum(off) / len(off)
    return out


def measured(r):
    vals = [v for v in (r["t_oop"], r["t_ip"]) if v is not None]
    return min(vals)


def load_all(include_pcie=True):
    rows = []
    for table, fn in FILES.items():
        rows += parse_nccl_tests(open(os.path.join(CAL, fn)).read(), table)
    rows += parse_mscclpp(open(os.path.join(CAL, MSCCLPP)).read())
    if include_pcie and os.path.exists(os.path.join(CAL, PCIE)):
        rows += parse_pcie(open(os.path.join(CAL, PCIE)).read())
    return rows


if __name__ == "__main__":
    rows = load_all()
    from collections import Counter
    c = Counter((r["table"], r["op"]) for r in rows)
    for k, v in sorted(c.items()):
        sel = [r for r in rows if (r["table"], r["op"]) == k]
        print("%-18s %-10s %3d rows  %s..%s B  t=%.2f..%.2f us" % (k[0], k[1], v, sel[0]["bytes"], sel[-1]["bytes"],
              measured(sel[0]), measured(sel[-1])))
    if os.path.exists(os.path.join(CAL, P2P_A100)):
        print("A100 NVSwitch p2p:", {k: round(v, 2) for k, v in p2p_summary().items()})
