#!/usr/bin/env bash
# Build both extensions (the packet kernel, fabric._kernel.kernel, and the array passes, fabric._arrays) with
# AddressSanitizer in a scratch copy and run the tests that drive them hardest. Both index raw C arrays (no Cython
# bounds checks apply), so this is how out-of-bounds access is caught.
# The tests' address-space cap is off here: ASan reserves terabytes of virtual shadow memory.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
cp -r "$src"/{pyx,fabric,tests,traces,setup.py,pyproject.toml} "$work"/
cd "$work"
rm -f fabric/_kernel/*.so fabric/*.so
CFLAGS="-fsanitize=address -fno-omit-frame-pointer -O1 -g" LDFLAGS="-fsanitize=address" \
    python setup.py build_ext --inplace >/dev/null
FABRIC_TEST_MEM_MB=0 ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD="$(gcc -print-file-name=libasan.so)" HYPOTHESIS_PROFILE=dev \
    python -m pytest -q -p no:cacheprovider tests/test_link_properties.py tests/test_fabric_properties.py \
    tests/test_event_queue.py tests/test_replay.py tests/test_watchdog.py tests/test_routing.py \
    tests/test_replay_ring.py tests/test_arbitration.py tests/test_phy_countdown.py tests/test_faults.py tests/test_migration.py \
    tests/test_retire_transfers.py tests/test_parts.py tests/test_taskgraph.py tests/test_lower.py tests/test_report.py \
    tests/test_translation.py "$@"
