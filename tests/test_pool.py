"""fabric.experiments.pool: independent runs over worker processes give the serial results, in the order asked."""
from fabric.config import load_config
from fabric.experiments import pool
from fabric.experiments.probe_collective import probe_collective


def _time(nbytes: int, ranks: int) -> float:
    return probe_collective(load_config("sd200"), "allreduce", nbytes, ranks=ranks)["time_us"]


def test_parallel_results_equal_serial_in_order_with_one_tick_each():
    args = [(b, r) for b in (4096, 65536) for r in (8, 16)]
    ticks = []
    par = pool.pmap(_time, args, jobs=2, progress=lambda: ticks.append(1))
    assert par == pool.pmap(_time, args, jobs=1) == [_time(*a) for a in args]
    assert len(ticks) == len(args) and len(set(par)) == len(par)
