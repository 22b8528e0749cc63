"""pytest plugin (loaded with `-p pytest_results`): writes {nodeid: outcome}
as JSON to $LATTICE_RESULTS at the end of the session.

outcome is "failed" if any phase (setup, call, teardown) failed or errored,
else "skipped" if the test was skipped or xfailed, else "passed". A file that
fails to import/collect is recorded under its own path as "failed", so the
skip list can name it.
"""

import json
import os

_outcomes = {}
_messages = {}  # nodeid -> the failure's error line, for skip-list reasons


def _record(nodeid, outcome):
    if _outcomes.get(nodeid) == "failed":
        return
    if outcome == "failed" or nodeid not in _outcomes or outcome == "skipped":
        _outcomes[nodeid] = outcome


def pytest_runtest_logreport(report):
    if report.failed:
        _record(report.nodeid, "failed")
        _messages.setdefault(report.nodeid, _error_line(report))
    elif report.skipped:
        _record(report.nodeid, "skipped")
    elif report.when == "call":
        _record(report.nodeid, "passed")


def _error_line(report):
    """The last 'E   ...' line of the traceback: the exception and its text."""
    text = getattr(report, "longreprtext", "") or ""
    lines = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    return lines[0] if lines else text.strip().splitlines()[-1] if text.strip() else ""


def pytest_collectreport(report):
    if report.failed:
        _record(report.nodeid or "<collection>", "failed")


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("LATTICE_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump(_outcomes, f, indent=0, sort_keys=True)
        with open(path + ".messages", "w") as f:
            json.dump(_messages, f, indent=0, sort_keys=True)
