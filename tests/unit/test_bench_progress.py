from io import StringIO

from rich.console import Console

from hocket.bench.progress import RankProgress


def test_progress_in_a_pipe_prints_one_line_per_step():
    buffer = StringIO()
    steps = ["check sequential", "check ring(1)", "time 4 candidates"]
    with RankProgress(total=len(steps), enabled=True, console=Console(file=buffer, width=120)) as progress:
        for step in steps:
            progress.step(step)
    lines = buffer.getvalue().splitlines()
    assert len(lines) == len(steps) + 1
    for i, (line, step) in enumerate(zip(lines, steps)):
        assert line.startswith(f"[{i}/{len(steps)}") and line.endswith(step)
    assert lines[-1].startswith(f"[{len(steps)}/{len(steps)}") and lines[-1].endswith("done")


def test_disabled_progress_prints_nothing():
    buffer = StringIO()
    with RankProgress(total=2, enabled=False, console=Console(file=buffer)) as progress:
        progress.step("x")
    assert buffer.getvalue() == ""
