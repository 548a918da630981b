"""What a process gives back: its output as it comes (``OutputChunk``) and how it ended
(``ExecResult``).

A module of its own, below ``process`` and ``errors``, which both speak of them
(``CommandExitError`` carries the result of the command that failed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias, get_args

from ._generated import StreamName, TerminalStatus

__all__ = ["ExecResult", "OutputChunk", "StreamName", "Terminal", "terminal_of"]

Terminal: TypeAlias = TerminalStatus
"""How a process ended (``TerminalStatusSchema``, src/protocol/process.ts)."""

_TERMINALS: tuple[Terminal, ...] = get_args(Terminal)


def terminal_of(value: object) -> Terminal:
    """The server's ``terminal``; a missing or unknown one (a newer server's word) reads as ``exited``."""
    for t in _TERMINALS:
        if value == t:
            return t
    return "exited"


@dataclass(frozen=True)
class OutputChunk:
    """One piece of output: ``text`` is ``data`` decoded (incomplete characters carried on)."""

    stream: StreamName
    seq: int
    data: bytes
    text: str


@dataclass(frozen=True)
class ExecResult:
    """How a process ended and (unless ``collect=False``) what it printed.

    ``dropped_bytes``: output the server no longer had when the SDK caught up after a drop (more
    than its retention came meanwhile; docs/protocol.md); 0 when every byte arrived.
    """

    process_id: str
    argv: tuple[str, ...]
    exit_code: int
    terminal: Terminal
    signal: str | None
    sandbox_denied: bool
    stdout: str
    stderr: str
    pty: str
    stdout_bytes: bytes
    stderr_bytes: bytes
    pty_bytes: bytes
    dropped_bytes: int = 0

    @property
    def output(self) -> str:
        """stdout, or the terminal's output for a PTY process."""
        return self.pty if self.pty_bytes else self.stdout
