"""--compare FILE with several nccl-tests runs in it, and rows behind a launcher's rank tag (issue 32 item 6)."""
import pytest
from click.testing import CliRunner

from fabric.cli.probe import main as probe
from fabric.errors import ConfigError
from fabric.experiments import nccl_tests

HEADER = ("# Collective test starting: {binary}\n"
          "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
          "busbw  #wrong\n")
ROW = "{size:12d} {count:13d}     float     sum      -1  {t:7.2f}  {a:6.2f}  {b:6.2f}       0  {t:7.2f}  {a:6.2f}  {b:6.2f}  0\n"


def run_text(binary: str, times: dict, n: int = 8, tag: str = "") -> str:
    f = 2 * (n - 1) / n
    out = tag + HEADER.format(binary=binary).replace("\n#", "\n" + tag + "#")
    for size, t in times.items():
        a = size / t / 1e3
        out += tag + ROW.format(size=size, count=size // 4, t=t, a=a, b=a * f)
    return out + tag + "# Out of bounds values : 0 OK\n" + tag + "# Avg bus bandwidth    : 1.0\n"


ONE = {1 << 20: 20.0, 2 << 20: 21.0, 4 << 20: 22.0}
TWO = {1 << 20: 40.0, 2 << 20: 41.0, 4 << 20: 42.0}


def test_a_file_of_two_runs_is_listed_not_merged(tmp_path):
    p = tmp_path / "two.txt"
    p.write_text(run_text("all_reduce_perf", ONE) + run_text("all_reduce_perf", TWO))
    with pytest.raises(ConfigError) as e:
        nccl_tests.read(p)
    msg = str(e.value)
    assert "holds 2 nccl-tests runs" in msg and "--table N" in msg
    assert "1: allreduce 1048576-4194304 B, 3 rows" in msg and "2: allreduce 1048576-4194304 B, 3 rows" in msg
    first, second = nccl_tests.read(p, 1), nccl_tests.read(p, 2)
    assert [r.measured_us for r in first.rows] == list(ONE.values())
    assert [r.measured_us for r in second.rows] == list(TWO.values())
    assert (second.table, second.tables, second.ranks) == (2, 2, 8)
    with pytest.raises(ConfigError, match=r"--table=3 is out of range"):
        nccl_tests.read(p, 3)


def test_runs_without_a_header_between_them_split_where_sizes_start_again():
    body = run_text("all_reduce_perf", ONE)
    rows = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
    t = nccl_tests.parse("\n".join(rows + rows), "x_all_reduce.txt", table=2)
    assert t.tables == 2 and len(t.rows) == 3


def test_rank_tagged_rows_are_read():
    for tag in ("0: ", "[1,0]<stdout>:"):
        t = nccl_tests.parse(run_text("all_gather_perf", ONE, tag=tag), "log.txt")
        assert t.op == "allgather" and [r.size for r in t.rows] == list(ONE)


def test_cli_lists_the_runs_and_takes_table(tmp_path):
    p = tmp_path / "two.txt"
    p.write_text(run_text("all_reduce_perf", ONE) + run_text("all_reduce_perf", TWO))
    r = CliRunner().invoke(probe, ["collective", "--op", "allreduce", "--compare", str(p), "--preset", "sd200",
                                   "--ranks", "8", "--quiet"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--table N" in r.output
    r = CliRunner().invoke(probe, ["collective", "--op", "allreduce", "--compare", str(p), "--table", "2",
                                   "--preset", "sd200", "--ranks", "8", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "run 2 of 2" in r.output and "40.00" in r.output
    r = CliRunner().invoke(probe, ["collective", "--op", "allreduce", "--bytes", "8", "--table", "1", "--quiet"])
    assert r.exit_code == 2 and "give --compare FILE too" in r.output
