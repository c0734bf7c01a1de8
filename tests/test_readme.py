"""README examples run as tests: each `$ command` in a console block must print what the README shows."""
import importlib.util
import re
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("readme_examples",
                                              Path(__file__).parent.parent / "tools" / "readme_examples.py")
rx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rx)
EXAMPLES = rx.examples(rx.README.read_text())


def test_readme_has_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("cmd, expected", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_readme_example_output(cmd, expected):
    assert rx.stable(rx.run(cmd)) == rx.stable(expected)


PY_BLOCKS = re.findall(r"```python\n(.*?)```", rx.README.read_text(), re.S)


@pytest.mark.parametrize("code", PY_BLOCKS)
def test_readme_python_example_runs(code, capsys):
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out.strip().splitlines()
    assert out and all(len(line.split()) == 3 for line in out)
