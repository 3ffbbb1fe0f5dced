"""What the CLI's errors must look like: one line that says what to fix."""

from __future__ import annotations


def assert_one_line_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert lines[0].startswith("taskfleet: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]
