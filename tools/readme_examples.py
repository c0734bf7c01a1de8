"""Run every `$ command` in README.md's ```console blocks; with --write, refresh the outputs in place.

tests/test_readme.py runs the same commands and compares their output, ignoring lines that carry wall-clock
figures (they differ from run to run by nature).
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)
VOLATILE = re.compile(r"wall|events/s|\[#|M events", re.I)


def examples(text: str) -> list[tuple[str, str]]:
    """(command, expected output) for every `$ ` line of every console block."""
    out = []
    for block in BLOCK.findall(text):
        cmd, lines = None, []
        for line in block.splitlines():
            if line.startswith("$ "):
                if cmd:
                    out.append((cmd, "\n".join(lines)))
                cmd, lines = line[2:], []
            else:
                lines.append(line)
        if cmd:
            out.append((cmd, "\n".join(lines)))
    return out


def run(cmd: str) -> str:
    p = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=600)
    return (p.stdout + p.stderr).rstrip("\n")


def stable(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if not VOLATILE.search(line)]


def main() -> None:
    text = README.read_text()
    if "--write" in sys.argv:
        def refresh(m):
            body = "".join(f"$ {cmd}\n{run(cmd)}\n" for cmd, _ in examples(m.group(0)))
            return f"```console\n{body}```"
        README.write_text(BLOCK.sub(refresh, text))
    for cmd, expected in examples(README.read_text()):
        same = stable(run(cmd)) == stable(expected)
        print(f"{'ok  ' if same else 'DIFF'} {cmd}")


if __name__ == "__main__":
    main()
