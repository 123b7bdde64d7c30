"""Reading a log again after its stream broke, without passing anything on twice.

The log endpoint has no byte offset to resume from (`tail` counts lines, from the end, at the time
of the call), so the client remembers what it passed on (`Printed`) and, on the next read, drops
what it already had (`Resume`):

- **Exact**: when what was passed on began at the log's first byte and is at most `WHOLE_MAX`
  bytes, the whole log is read again and its first `size` bytes are skipped. A workload's log only
  grows (a process appends to its output file, a container to its log), so this is byte-exact.
- **Best effort**, for a longer log or one first read with `tail`: the last lines passed on (P: up
  to `KEEP_LINES` lines, `KEEP_BYTES` bytes) are kept, the read asks for that many lines and
  `MARGIN_LINES` more, and passes on what follows the first place where P stands whole in the
  answer. This is exact when the workload wrote fewer than `MARGIN_LINES` lines while the stream
  was down and P is not repeated, line for line, in the lines before it. With more written, the
  answer begins inside P or after it: the part of P it holds is dropped, and if it holds none,
  lines may be missing (`gap` says so). With repeated output (the same lines again), an earlier
  copy of P may be taken for it: those lines come twice (never fewer lines than were written).

Pure: no I/O here (logstream.py reads and writes)."""

from __future__ import annotations

from dataclasses import dataclass, field

WHOLE_MAX = 8 * 1024 * 1024  # read the whole log again up to this size (exact); past it, a tail
KEEP_BYTES = 1024 * 1024  # how much of its end is kept for a tail resume
KEEP_LINES = 2000  # at most this many lines of it
MARGIN_LINES = 1000  # the tail asked for reaches this many lines further back: new lines written meanwhile
MAX_TAIL = 100_000  # the server's largest tail


@dataclass
class Printed:
    """What was passed on of one log: its size, whether it began at the log's first byte, and its
    last whole lines (plus a line still being written)."""

    from_start: bool
    size: int = 0
    recent: bytearray = field(default_factory=bytearray)
    recent_lines: int = 0  # newlines in `recent`
    aligned: bool = True  # False once a line longer than KEEP_BYTES left `recent` without a line start

    def add(self, data: bytes) -> None:
        if not data:
            return
        self.size += len(data)
        self.recent += data
        self.recent_lines += data.count(b"\n")
        self._trim()

    def _trim(self) -> None:
        """Drop whole lines from the front until KEEP_BYTES and KEEP_LINES hold, once either is
        passed twice over (so a chatty log does not move the buffer at every chunk)."""
        if len(self.recent) <= 2 * KEEP_BYTES and self.recent_lines <= 2 * KEEP_LINES:
            return
        excess_lines = self.recent_lines - KEEP_LINES
        cut = len(self.recent) - KEEP_BYTES
        start = 0
        if excess_lines > 0:
            for _ in range(excess_lines):
                start = self.recent.index(b"\n", start) + 1
        if cut > start:
            newline = self.recent.find(b"\n", cut - 1)
            if newline < 0:  # one line longer than KEEP_BYTES: no line start left to align on
                self.recent.clear()
                self.recent_lines, self.aligned = 0, False
                return
            start = newline + 1
        self.recent_lines -= self.recent.count(b"\n", 0, start)
        del self.recent[:start]

    def resume(self, tail: int | None) -> tuple[int | None, Resume]:
        """The `tail` to ask for on the next read (None: the whole log) and the filter its answer
        goes through. `tail`: what the first read asked for."""
        if self.size == 0:  # nothing passed on yet: ask again what was asked
            return tail, Resume()
        if self.from_start and self.size <= WHOLE_MAX:
            return None, Resume(skip=self.size)
        if not self.recent:
            return 0, Resume(gap=True)  # nothing to align on: go on from what comes next
        lines = self.recent_lines + (0 if self.recent.endswith(b"\n") else 1)
        window = min(MAX_TAIL, lines + MARGIN_LINES)
        return window, Resume(overlap=bytes(self.recent), window=window)


class Resume:
    """Filters the answer of a read that resumes: `feed` each chunk, then `end` once the answer is
    complete; each returns the bytes to pass on. `gap` is True once it is known that lines may be
    missing between what was passed on before and what this read passes on.

    With `overlap` (the last lines passed on, P) the answer is the log's last `window` lines (W):
    the first place where P stands whole in W, at a line start, is where the new output begins.
    If W holds no whole P (more than the margin was written meanwhile), W begins inside P: the
    longest end of P that begins W is dropped; failing that, nothing is (a gap)."""

    def __init__(self, *, skip: int = 0, overlap: bytes = b"", window: int = 0, gap: bool = False) -> None:
        self.skip = skip
        self.overlap = overlap
        self.window = window
        self.gap = gap
        self._held = bytearray()
        self._lines = 0
        self._searched = 0  # where the search for a whole P goes on from
        self._settled = not overlap

    def feed(self, data: bytes) -> bytes:
        if self.skip:
            dropped = min(self.skip, len(data))
            self.skip -= dropped
            data = data[dropped:]
        if self._settled:
            return data
        self._held += data
        self._lines += data.count(b"\n")
        after = self._after_whole()
        if after is not None:
            return self._settle(after)
        if self._lines >= self.window:  # the whole window is here and holds no whole P
            return self._settle(self._after_end())
        return b""

    def end(self) -> bytes:
        """The rest, once the answer is complete. (A whole log shorter than what was skipped, one
        truncated or rotated, passes nothing on.)"""
        if self._settled:
            return b""
        after = self._after_whole()
        return self._settle(after if after is not None else self._after_end())

    def _after_whole(self) -> int | None:
        """Where the first whole P at a line start of what is held ends; None if none yet."""
        held, size = self._held, len(self.overlap)
        at = held.find(self.overlap, self._searched)
        while at != -1:
            if at == 0 or held[at - 1] == 0x0A:
                return at + size
            at = held.find(self.overlap, at + 1)
        self._searched = max(0, len(held) - size + 1)
        return None

    def _after_end(self) -> int:
        """Where the longest end of P that begins what is held stops (0, and a gap, if none)."""
        held = bytes(self._held)
        for start in _line_starts(self.overlap):
            if held.startswith(self.overlap[start:]):
                return len(self.overlap) - start
        self.gap = bool(held)  # the answer does not reach back to what was passed on
        return 0

    def _settle(self, after: int) -> bytes:
        self._settled = True
        rest = bytes(self._held[after:])
        self._held.clear()
        return rest


def _line_starts(text: bytes) -> list[int]:
    """Where the lines of `text` begin after its first, first to last, without the empty end
    after a last newline: the candidate starts of an overlap shorter than all of it."""
    starts = []
    at = text.find(b"\n")
    while at != -1 and at + 1 < len(text):
        starts.append(at + 1)
        at = text.find(b"\n", at + 1)
    return starts
