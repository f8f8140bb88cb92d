"""`quiet`: other libraries' output goes to the log file, our own lines and warnings stay on the terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROGRAM = """
import logging, sys
from lightning_otel.runtime.output import quiet
with quiet(sys.argv[1]) as console:
    print("a library's chatter")
    logging.getLogger("some_library").warning("a library's warning")
    logging.getLogger("lightning_otel.trainer").warning("no runner has claimed any of the 4 rollouts")
    console.print("our progress line")
logging.getLogger("lightning_otel.trainer").warning("after quiet")
"""


def test_our_warnings_reach_the_terminal_and_the_log_while_other_output_goes_to_the_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(log)], capture_output=True, text=True, timeout=60, check=True
    )
    terminal, logged = done.stdout + done.stderr, log.read_text()
    assert "WARNING lightning_otel.trainer: no runner has claimed any of the 4 rollouts" in terminal
    assert "our progress line" in terminal
    assert "a library's chatter" not in terminal and "a library's warning" not in terminal
    assert "no runner has claimed any of the 4 rollouts" in logged and "a library's chatter" in logged
    assert "after quiet" in terminal and "after quiet" not in logged  # the handlers leave with `quiet`
    assert terminal.count("no runner has claimed") == 1
