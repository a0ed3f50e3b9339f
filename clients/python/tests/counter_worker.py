"""A worker process of the mutual exclusion test: increments a file-based
counter n times under lock NAME, each time reading, pausing and writing
(the race a missing lock would lose), and appends the fencing token of
each increment to a log.

    python counter_worker.py URL NAME COUNTER_FILE LOG_FILE N
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import dlm  # noqa: E402


def main() -> None:
    url, name, counter, log, n = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5])
    with dlm.Client(url, label="counter worker") as client:
        for _ in range(n):
            with client.lock(name, ttl=10) as lease:
                value = int(counter.read_text() or "0")
                time.sleep(0.002)
                lease.check()
                counter.write_text(str(value + 1))
                with log.open("a") as f:
                    f.write(f"{lease.token}\n")


if __name__ == "__main__":
    main()
