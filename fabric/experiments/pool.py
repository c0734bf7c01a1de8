"""Independent runs on every core: `pmap` runs calls in a pool of worker processes, results in the order asked.

Each call builds its own topology and engine, so a run in a worker is the run in this process (the kernel is
deterministic): results are identical to serial ones, only the wall clock changes. jobs=1 runs in this process.
Workers are forked (Linux, macOS with the fork context), so nothing but the call and its result is pickled.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed

from fabric.config import machine_cores as default_jobs   # the cores this process may use


def _call(job):
    fn, args = job
    return fn(*args)


def pmap(fn, arg_tuples, jobs: int | None = None, progress=None) -> list:
    """[fn(*a) for a in arg_tuples], over `jobs` processes (default: default_jobs()); fn must be a module-level
    function. Longest calls first is the caller's business (the pool hands calls out in order). `progress()` is
    called once per result, as results arrive."""
    calls = [tuple(a) for a in arg_tuples]
    jobs = default_jobs() if jobs is None else int(jobs)
    tick = progress or (lambda: None)
    if jobs <= 1 or len(calls) <= 1:
        out = []
        for a in calls:
            out.append(fn(*a))
            tick()
        return out
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:              # pragma: no cover - no fork on this platform
        ctx = None
    with ProcessPoolExecutor(max_workers=min(jobs, len(calls)), mp_context=ctx) as ex:
        futs = [ex.submit(_call, (fn, a)) for a in calls]     # handed out in this order as workers free up
        for _ in as_completed(futs):
            tick()
        return [f.result() for f in futs]
