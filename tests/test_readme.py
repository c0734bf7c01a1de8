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


def test_the_first_screen_says_what_the_tool_is_then_how_to_set_it_up():
    """The README opens with what fabric is and the question it answers, then the two set-up commands; CI runs the
    second verbatim as .ci/run extracts it (the third line of the first ```bash block, fence included)."""
    text = rx.README.read_text()
    intro, rest = text.split("```bash\n", 1)
    assert len(intro.splitlines()) < 15 and "emulator of scale-up AI interconnects" in intro
    assert "what time per" in intro and "output token" in intro
    block = ["```bash", *rest.split("\n```", 1)[0].splitlines()]
    assert block[1].startswith("pip install -e .") and "fabric-replay" in block[1]
    assert "pip install" in block[2] and block[2].endswith("python -m pytest")
    ci = (rx.README.parent / ".ci" / "run").read_text()
    assert "sed -n 3p" in ci and "^```bash$" in ci
    assert text.index("## The main job") < text.index("## Serving a workload")


def test_the_readme_claims_no_release_it_does_not_have():
    text = rx.README.read_text()
    assert "pip install scaleup-fabric" not in text and "No wheel or sdist is on PyPI" in text
