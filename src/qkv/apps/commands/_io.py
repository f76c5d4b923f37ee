"""Terminal I/O of the commands: input lines (a file or stdin) and output lines (a file or
stdout), with the failures of both as one-line errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

BOM = "\ufeff"  # a UTF-8 byte order mark: dropped from the start of every input, as text tools do


def read_lines(path: str, what: str = "--input") -> list[str]:
    """All the lines of a UTF-8 text file (see `file_lines`)."""
    return list(file_lines(path, what))


def file_lines(path: str, what: str = "--input") -> Iterator[str]:
    """Lines of a UTF-8 text file (.gz allowed), one at a time, split on "\\n" only, without a
    leading BOM; a line that is not UTF-8 is a ValueError naming the file and the line."""
    from ...data.corpus import iter_lines

    if Path(path).is_dir():
        raise ValueError(f"{what} {path} is a directory, not a text file")
    return iter_lines(path)


def count_lines(path: str, what: str = "--input") -> int:
    """How many lines a text file has, every one of them checked as `file_lines` reads it: one
    pass that holds a line at a time, so that a bad line is refused before any work."""
    return sum(1 for _ in file_lines(path, what))


def input_lines(path: str | None) -> Iterator[str]:
    """Lines of FILE (`file_lines`) or of stdin (read as UTF-8 whatever the locale), one at a time
    as they are asked for, split on "\\n" only, without a leading BOM. A closed stdin is refused
    now; a line that is not UTF-8, when it is read."""
    if path is not None:
        return file_lines(path)
    if sys.stdin is None:
        raise ValueError("standard input is closed; give --input FILE")
    buffer = getattr(sys.stdin, "buffer", None)  # None: a text-only stdin
    return _stdin_lines(sys.stdin if buffer is None else buffer)


def _stdin_lines(stdin: Iterable[bytes | str]) -> Iterator[str]:
    for number, raw in enumerate(stdin, start=1):
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as e:
            raise ValueError(
                f"stdin:{number}: invalid UTF-8 ({e.reason} at byte {e.start})"
            ) from None
        line = line.removesuffix("\n").removesuffix("\r")
        yield line.removeprefix(BOM) if number == 1 else line


def read_input_lines(path: str | None) -> list[str]:
    """All the lines of FILE or of stdin (see `input_lines`)."""
    return list(input_lines(path))


class OutputError(ValueError):
    """The output cannot be written (a full disk, a closed stdout, ...): one line, no traceback.
    on_stdout: the failed output is stdout, whose buffer must not be flushed again at exit."""

    def __init__(self, message: str, on_stdout: bool = False) -> None:
        super().__init__(message)
        self.on_stdout = on_stdout


class Output:
    """Lines written as UTF-8 to FILE or stdout, each ending in "\\n" (a newline inside a line
    becomes a space), and flushed at once: what is written stays written if the run is stopped."""

    def __init__(self, path: str | None = None) -> None:
        self.name = "standard output" if path is None else path
        self._own = path is not None
        if path is not None:
            try:
                self._file = open(path, "wb")  # noqa: SIM115 (closed by close())
            except OSError as e:
                raise OutputError(f"cannot write {path}: {e.strerror}") from None
        elif sys.stdout is None:  # the shell closed it (`>&-`)
            raise OutputError("standard output is closed; nowhere to write the translations")
        else:
            sys.stdout.flush()
            self._file = getattr(sys.stdout, "buffer", None)  # None: a text-only stdout

    def write(self, lines: Sequence[str]) -> None:
        text = "".join(line.replace("\r", " ").replace("\n", " ") + "\n" for line in lines)
        try:
            if self._file is None:
                sys.stdout.write(text)
                sys.stdout.flush()
            else:
                self._file.write(text.encode("utf-8"))
                self._file.flush()
        except BrokenPipeError:
            if not self._own:
                raise  # the reader of stdout has gone: main() stops quietly
            raise OutputError(f"cannot write to {self.name}: its reader has gone") from None
        except (OSError, ValueError) as e:  # ValueError: written to a closed file
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            message = f"cannot write to {self.name}: {reason}"
            raise OutputError(message, on_stdout=not self._own) from None

    def close(self) -> None:
        if self._own:
            try:
                self._file.close()
            except OSError as e:
                raise OutputError(f"cannot write to {self.name}: {e.strerror or e}") from None


def check_output_path(path: str, inputs: Sequence[str | os.PathLike[str] | None] = ()) -> None:
    """Refuse, before any work, an output file that cannot be written (a directory, a missing
    folder, no permission) or that is one of the inputs; an existing file is left as it is."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"--output {path} is a directory")
    if not target.parent.is_dir():
        raise ValueError(f"--output {path}: there is no folder {target.parent}")
    existed = target.exists()
    for name in inputs:
        if existed and name is not None and Path(name).exists() and target.samefile(name):
            raise ValueError(f"--output {path} is an input file; writing would overwrite it")
    try:
        with open(target, "ab"):  # appends nothing: truncates nothing
            pass
    except OSError as e:
        raise ValueError(f"cannot write --output {path}: {e.strerror}") from None
    if not existed:
        target.unlink(missing_ok=True)


def error_line(text: str) -> None:
    """One line on stderr, if there is a stderr."""
    if sys.stderr is not None:
        print(text, file=sys.stderr)


def detach_stdout() -> None:
    """Point stdout's file descriptor at /dev/null, so that Python's flush at exit cannot fail
    again on what is left in its buffer (and print "Exception ignored ...")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no stdout, or not a file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
