"""Reading a log again after a break passes nothing on twice (gpupool_cli.resume, pure): byte-exact
for a log read from its start (the whole log again, what was printed skipped), by lines for a long
log or one read with --tail (the last lines printed found again in a wider tail), and a gap said
when the new answer does not reach back to what was printed."""

from __future__ import annotations

from gpupool_cli.resume import KEEP_BYTES, KEEP_LINES, MARGIN_LINES, WHOLE_MAX, Printed, Resume


def _through(resume: Resume, *chunks: bytes) -> bytes:
    return b"".join(resume.feed(chunk) for chunk in chunks) + resume.end()


def test_a_log_read_from_its_start_is_read_again_whole_and_what_was_printed_is_skipped() -> None:
    printed = Printed(from_start=True)
    printed.add(b"one\ntw")  # a break in the middle of a line
    tail, resume = printed.resume(None)
    assert tail is None and resume.skip == 6
    assert _through(resume, b"on", b"e\ntwo\nth", b"ree\n") == b"o\nthree\n"


def test_nothing_printed_yet_asks_again_what_was_asked() -> None:
    tail, resume = Printed(from_start=False).resume(5)
    assert tail == 5 and _through(resume, b"x\n") == b"x\n"


def test_a_tail_read_again_finds_the_last_lines_printed_in_a_wider_tail() -> None:
    printed = Printed(from_start=False)
    printed.add(b"b\nc\n")
    tail, resume = printed.resume(2)
    assert tail == 2 + MARGIN_LINES
    # The wider tail: older lines, the lines printed, then what was written during the break.
    assert _through(resume, b"a\nb\n", b"c\nd\n", b"e\n") == b"d\ne\n"
    assert not resume.gap


def test_a_line_half_printed_is_finished_not_repeated() -> None:
    printed = Printed(from_start=False)
    printed.add(b"a\nhal")
    tail, resume = printed.resume(2)
    assert tail == 2 + MARGIN_LINES
    assert _through(resume, b"a\nhalf\nnext\n") == b"f\nnext\n"


def test_an_answer_that_begins_inside_what_was_printed_drops_that_part() -> None:
    resume = Resume(overlap=b"a\nb\nc\n", window=3)  # more than the margin was written meanwhile
    assert resume.feed(b"b\nc\nd\n") == b"d\n" and not resume.gap


def test_an_answer_that_does_not_reach_back_is_passed_on_whole_and_said_to_leave_a_gap() -> None:
    resume = Resume(overlap=b"a\nb\n", window=2)
    assert _through(resume, b"x\ny\n", b"z\n") == b"x\ny\nz\n" and resume.gap


def test_an_answer_that_ends_before_its_window_is_full_still_settles() -> None:
    resume = Resume(overlap=b"a\nb\n", window=1002)
    assert resume.feed(b"b\n") == b""
    assert resume.end() == b""  # all of it was printed before
    assert not resume.gap


def test_repeated_lines_may_come_twice_but_never_fewer_than_written() -> None:
    resume = Resume(overlap=b"x\n", window=1001)  # the documented limit: the first copy is taken
    assert _through(resume, b"x\nx\nx\n") == b"x\nx\n"


def test_what_is_kept_is_bounded_and_begins_at_a_line() -> None:
    printed = Printed(from_start=True)
    for i in range(5 * KEEP_LINES):
        printed.add(f"line {i}\n".encode())
    assert printed.size == sum(len(f"line {i}\n") for i in range(5 * KEEP_LINES))
    assert KEEP_LINES <= printed.recent_lines <= 2 * KEEP_LINES
    assert printed.recent.startswith(b"line ") and printed.recent.count(b"\n") == printed.recent_lines
    big = b"y" * 100 + b"\n"
    for _ in range(3 * KEEP_BYTES // len(big)):
        printed.add(big)
    assert len(printed.recent) <= 2 * KEEP_BYTES and printed.recent.startswith(b"y")


def test_past_the_whole_log_limit_a_log_read_from_its_start_resumes_by_lines() -> None:
    printed = Printed(from_start=True)
    printed.add(b"z" * WHOLE_MAX + b"\nlast\n")
    tail, resume = printed.resume(None)
    assert tail is not None and resume.overlap.endswith(b"last\n") and resume.skip == 0
