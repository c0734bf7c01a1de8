"""`fabric-probe collective` (issue 16 item 7): nccl-tests columns, --json rows, --compare against an nccl-tests
output file (fabric.experiments.nccl_tests), size suffixes."""
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabric.errors import ConfigError
from fabric.experiments import nccl_tests
from fabric.experiments.probe_collective import compare, probe_sizes, sizes, table

DATA = Path(__file__).parent / "data"
EXCERPT = DATA / "nccl_tests_allreduce_8xA100_excerpt.txt"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "calibration"


def cli(args):
    from fabric.cli.probe_collective import collective_cmd
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    return runner.invoke(collective_cmd, args)


def err_of(r) -> str:
    return (r.stderr if hasattr(r, "stderr") and r.stderr else r.output).strip()


# ---------------------------------------------------------------- the parser

def test_excerpt_parses():
    t = nccl_tests.read(EXCERPT)
    assert t.op == "allreduce" and t.ranks == 8
    assert t.sizes[:3] == [8, 16, 32] and t.sizes[-1] == 16777216 and len(t.rows) == 15
    r = t.rows[0]
    assert (r.count, r.type, r.redop, r.root) == (2, "float", "sum", -1)
    assert r.oop_time_us == 34.84 and r.ip_time_us == 36.18 and r.measured_us == 34.84   # the smaller
    assert t.rows[-1].measured_us == 271.67


def test_rows_without_root_and_unchecked_results():
    text = """# nccl-tests, older layout without root, -c 0
#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
        1024           256     float     sum    12.50    0.08    0.14    N/A    12.00    0.09    0.15    N/A
     1048576        262144     float     sum    50.00   20.97   36.70    N/A    51.00   20.56   35.98    N/A
"""
    t = nccl_tests.parse(text, "all_reduce_perf.txt")
    assert t.op == "allreduce" and [r.measured_us for r in t.rows] == [12.0, 50.0] and t.ranks == 8


def test_not_nccl_tests_output_is_refused():
    with pytest.raises(ConfigError, match="no nccl-tests rows"):
        nccl_tests.parse("Device: 0, NVIDIA A100\n   D\\D     0      1\n     0   1.92   2.31\n", "p2p.txt")


@pytest.mark.skipif(not SHARED.is_dir(), reason="no ../shared/calibration checkout (CI)")
def test_every_nccl_tests_file_of_the_calibration_set_parses():
    parsed, refused = {}, set()
    for f in sorted(SHARED.glob("*.txt")):
        try:
            parsed[f.name] = nccl_tests.read(f)
        except ConfigError:
            refused.add(f.name)
    # a markdown latency table and a CUDA P2P matrix are not nccl-tests output (the PCIe file embeds a table)
    assert refused <= {"mscclpp_NDv4_NDmv4_A100_IB200G_latency.txt", "p2pBandwidthLatencyTest_8xA100-SXM4-80GB.txt"}
    assert parsed["p2pBandwidthLatencyTest_PCIe_systems.txt"].ranks == 4
    expected = {"1node_8xA100-SXM4-80GB_allreduce_8B-128MB.txt": (8, 25),
                "1node_8xB200_nccl227_symmetric_allreduce_issue333.txt": (8, 31),
                "2node_1xH200_RoCE_gke_dranet.txt": (2, 24),
                "2node_8xH200_RoCE400G_spectrumx_openshift.txt": (16, 25)}
    for name, (ranks, n) in expected.items():
        t = parsed[name]
        assert t.op == "allreduce" and t.ranks == ranks and len(t.rows) == n, name
        assert all(r.measured_us > 0 for r in t.rows)


def test_geomean_error():
    assert nccl_tests.geomean_error([2.0, 0.5], [1.0, 1.0]) == pytest.approx(1.0)
    assert nccl_tests.geomean_error([1.1, 1.1], [1.0, 1.0]) == pytest.approx(0.1)
    assert nccl_tests.geomean_error([3.0], [3.0]) == 0.0


# ---------------------------------------------------------------- sizes

@pytest.mark.parametrize("text, value", [("8", 8), ("64K", 65536), ("1M", 1 << 20), ("1G", 1 << 30),
                                         ("2g", 2 << 30), ("128MB", 128 << 20), (4096, 4096)])
def test_size_suffixes_are_powers_of_1024(text, value):
    assert nccl_tests.parse_size(text) == value


@pytest.mark.parametrize("text", ["abc", "0", "1.3", "-8", "1X"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ConfigError):
        nccl_tests.parse_size(text, "--max-bytes")


def test_sweep_accepts_suffixes():
    got = sizes("8", "1G")
    assert got[0] == 8 and got[-1] == 1 << 30 and len(got) == 28


def test_compare_without_sizes_sweeps_the_files_sizes():
    t = nccl_tests.read(EXCERPT)
    assert probe_sizes(measured=t) == t.sizes
    assert probe_sizes(max_bytes="4K", measured=t) == [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


# ---------------------------------------------------------------- the table and --compare

def test_table_has_nccl_tests_columns_and_library_choice():
    rows = [dict(op="allreduce", bytes=1024, ranks=8, time_us=10.0, algbw_gbps=0.1, busbw_gbps=0.18,
                 algorithm="ring", protocol="LL", channels=4),
            dict(op="allreduce", bytes=2048, ranks=8, time_us=11.0, algbw_gbps=0.2, busbw_gbps=0.33,
                 algorithm="oneshot")]
    text = table(rows)
    head = text.splitlines()[0].split()
    assert head == ["size", "count", "type", "redop", "time", "algbw", "busbw", "algorithm", "protocol", "channels"]
    line1, line2 = text.splitlines()[2:]
    assert line1.split() == ["1024", "256", "float", "sum", "10.00", "0.10", "0.18", "ring", "LL", "4"]
    assert line2.split()[-3:] == ["oneshot", "-", "-"]
    ag = table([dict(rows[0], op="allgather")]).splitlines()[2].split()
    assert ag[1:4] == ["32", "float", "none"]            # per-rank count for allgather, as nccl-tests


def test_compare_ratios_and_geomean():
    t = nccl_tests.read(EXCERPT)
    rows = [dict(bytes=8, time_us=34.84 * 2), dict(bytes=16, time_us=35.44 / 2), dict(bytes=3, time_us=1.0)]
    cmp = compare(rows, t)
    assert [o["bytes"] for o in cmp["rows"]] == [8, 16]
    assert [o["ratio"] for o in cmp["rows"]] == pytest.approx([2.0, 0.5])
    assert cmp["geomean_error"] == pytest.approx(1.0)


def test_cli_compare_prints_ratios_and_geomean(tmp_path):
    out = tmp_path / "c.json"
    r = cli(["--op", "allreduce", "--ranks", "8", "--compare", str(EXCERPT), "--max-bytes", "1K",
             "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "pred/meas" in r.output and "geomean error" in r.output
    data = json.loads(out.read_text())
    assert [x["bytes"] for x in data["rows"]] == [8, 16, 32, 64, 128, 256, 512, 1024]
    for x in data["rows"]:
        for key in ("bytes", "time_us", "algbw_gbps", "busbw_gbps", "algorithm", "protocol", "channels",
                    "measured_us", "ratio"):
            assert key in x, key
    want = math.exp(sum(abs(math.log(x["ratio"])) for x in data["rows"]) / len(data["rows"])) - 1
    assert data["compare"]["geomean_error"] == pytest.approx(want)
    assert f"geomean error {100 * want:.1f}%" in r.output


def test_cli_sweep_with_suffixes_and_json_keys(tmp_path):
    out = tmp_path / "c.json"
    r = cli(["--op", "allreduce", "--ranks", "8", "--min-bytes", "1K", "--max-bytes", "4K", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert data["meta"]["config"]["topology"] and data["meta"]["version"]
    assert [x["bytes"] for x in rows] == [1024, 2048, 4096]
    assert {"bytes", "time_us", "algbw_gbps", "busbw_gbps", "algorithm", "protocol", "channels"} <= set(rows[0])
    header = r.output.splitlines()[1].split()
    assert header[:7] == ["size", "count", "type", "redop", "time", "algbw", "busbw"]


@pytest.mark.parametrize("args, needle", [
    (["--op", "allreduce", "--max-bytes", "1X", "--min-bytes", "8"], "--max-bytes"),
    (["--op", "allreduce", "--min-bytes", "1M", "--max-bytes", "1K"], "--min-bytes"),
    (["--op", "allreduce", "--bytes", "8", "--max-bytes", "1K"], "either --bytes"),
    (["--op", "allreduce"], "--compare FILE"),
    (["--op", "allreduce", "--compare", "/nonexistent/file.txt"], "does not exist"),
    (["--op", "allgather", "--compare", str(EXCERPT)], "allreduce table"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, needle):
    r = cli(args)
    assert r.exit_code == 2, r.output
    err = err_of(r)
    assert needle in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_compare_file_that_is_not_nccl_tests(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("just some notes\n")
    r = cli(["--op", "allreduce", "--compare", str(f)])
    assert r.exit_code == 2 and "no nccl-tests rows" in err_of(r) and len(err_of(r).splitlines()) == 1
