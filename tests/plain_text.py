"""Text the command line prints is for people: a check shared by the CLI tests."""

from __future__ import annotations

import re

#: What must not appear in text the command line prints for people.
NOT_PLAIN = re.compile(r"``|\b\w+=(True|False)\b|\w+=\{|\(s\)|\(es\)|\(ies\)|\b1 (shards|stages)\b")


def assert_plain(text: str) -> None:
    """``text`` is for people on a command line: no Python syntax (but in a remark that says
    it is for Python: "--force (force=True in Python)"), reST or ``(s)`` plurals."""
    text = re.sub(r"[^()]*\bin Python\b[^()]*", "", text)
    found = NOT_PLAIN.search(text)
    assert found is None, (found, text[-3000:])
