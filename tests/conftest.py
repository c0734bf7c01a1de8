"""Shared test set-up: hypothesis profiles and a printed seed, a per-test time limit and a memory cap, so that a bug
fails a test instead of hanging or swapping CI.

- Seed: every hypothesis test of a session runs from one seed, printed in the header and again after a failure;
  rerun with `FABRIC_TEST_SEED=N` (or hypothesis' own `--hypothesis-seed=N`) to replay the same examples.
- Time: each test gets FABRIC_TEST_TIMEOUT seconds (default 120; `@pytest.mark.timeout(s)` per test; benchmark
  tests 1800; 0 = off). SIGALRM fails the test with a TestTimeout (the kernel runs in slices of a few 0.1 s and
  returns to Python between them); if even that cannot interrupt it (a hang inside C), 30 s later
  (FABRIC_TEST_HANG_GRACE) a line names the
  test and the seed and faulthandler dumps every thread's stack, both to the terminal's stderr (fd 2 as it was
  before pytest captured it: a dump into the capture would die with the process), and ends the process, so CI
  fails with the stack instead of hanging.
- Memory: the process's address space is capped at FABRIC_TEST_MEM_MB (default 8 GiB + 256 MiB per core, at most
  3/4 of the machine, at least 4 GiB; 0 = off): an allocation beyond it raises MemoryError in the test that made it.
"""
import faulthandler
import os
import random
import signal
import sys
import threading

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))   # tests/strategies.py

settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          print_blob=True)
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

DEFAULT_TIMEOUT_S = 120.0
BENCHMARK_TIMEOUT_S = 1800.0
# past the limit, a test stuck in C (SIGALRM cannot interrupt it) ends the process this much later
HANG_GRACE_S = float(os.environ.get("FABRIC_TEST_HANG_GRACE", 30.0))
_SEED = None
_STDERR_FD = None              # the terminal's stderr, kept before pytest captures fd 2 (hang dumps go there)


class TestTimeout(BaseException):
    """A test ran past its time limit (tests/conftest.py). Not an Exception: hypothesis would take one for a failing
    example and go on shrinking (rerunning the slow example, with no alarm left) until the hang guard ends the
    process; a BaseException ends the test at once, as KeyboardInterrupt would."""
    __test__ = False


def _machine_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20)
    except (ValueError, OSError, AttributeError):
        return 16 << 10


def pytest_configure(config):
    global _SEED, _STDERR_FD
    _STDERR_FD = os.dup(2)          # captured around each test: a dump written to fd 2 then dies with the process
    config.addinivalue_line("markers", "timeout(seconds): this test's time limit (tests/conftest.py)")
    from hypothesis import core, settings
    forced = config.getoption("hypothesis_seed", None)
    env = os.environ.get("FABRIC_TEST_SEED")
    if forced is not None:
        _SEED = forced
    elif env or not settings.default.derandomize:
        _SEED = int(env) if env else random.SystemRandom().randrange(1 << 32)
        if settings.default.derandomize:       # hypothesis' CI profile ignores seeds: a seed given beats it
            settings.register_profile("fabric-seeded", parent=settings.default, derandomize=False)
            settings.load_profile("fabric-seeded")
        core.global_force_seed = _SEED
    # else: hypothesis' CI profile (CI set): the same examples on every run, no seed to print (_SEED None)
    # address space, not resident memory: every thread reserves a stack and a malloc arena, hence the per-core term
    default_mb = max(4 << 10, min((8 << 10) + 256 * (os.cpu_count() or 1), _machine_mb() * 3 // 4))
    mem_mb = int(os.environ.get("FABRIC_TEST_MEM_MB", default_mb))
    if mem_mb > 0:
        try:
            import resource
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            cap = mem_mb << 20
            if hard != resource.RLIM_INFINITY:
                cap = min(cap, hard)
            if soft == resource.RLIM_INFINITY or soft > cap:
                resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        except (ImportError, ValueError, OSError):      # not POSIX, or a tighter limit already
            pass


def _seed_note() -> str:
    return str(_SEED) if _SEED is not None else "none (CI profile)"


def pytest_report_header(config):
    seed = (f"hypothesis seed: {_SEED} (replay: FABRIC_TEST_SEED={_SEED} or --hypothesis-seed={_SEED})"
            if _SEED is not None else "hypothesis: CI profile, derandomized (the same examples on every run)")
    return f"{seed}; time limit {os.environ.get('FABRIC_TEST_TIMEOUT', DEFAULT_TIMEOUT_S)} s per test"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if exitstatus not in (0, 5) and _SEED is not None:
        terminalreporter.write_line(f"hypothesis seed of this session: {_SEED}; rerun with "
                                    f"FABRIC_TEST_SEED={_SEED} to replay the same examples")


def _limit(item) -> float:
    m = item.get_closest_marker("timeout")
    if m is not None and m.args:
        return float(m.args[0])
    base = float(os.environ.get("FABRIC_TEST_TIMEOUT", DEFAULT_TIMEOUT_S))
    if base > 0 and item.get_closest_marker("benchmark") is not None:
        return max(base, BENCHMARK_TIMEOUT_S)
    return base


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    limit = _limit(item)
    usable = limit > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expire(signum, frame):
        raise TestTimeout(f"{item.nodeid} ran past its {limit:g} s limit (FABRIC_TEST_TIMEOUT, "
                          f"@pytest.mark.timeout); hypothesis seed {_seed_note()}")

    def stuck():                    # a thread: runs while the kernel's loop is stuck without the GIL
        os.write(out, f"\n{item.nodeid} is stuck past its {limit:g} s limit where SIGALRM cannot interrupt it; "
                      f"hypothesis seed {_seed_note()}; every thread's stack follows, then the process ends\n".encode())

    out = _STDERR_FD if _STDERR_FD is not None else sys.stderr.fileno()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit, 1.0)    # and every second after: code that runs on past the first
                                                        # TestTimeout (a state machine's teardown) is stopped too
    notice = threading.Timer(limit + HANG_GRACE_S - 1, stuck)
    notice.daemon = True
    notice.start()
    faulthandler.dump_traceback_later(limit + HANG_GRACE_S, exit=True, file=out)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        notice.cancel()
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)
