"""Terminal I/O of the commands: input lines (a file or stdin) and output lines (a file or
stdout), with the failures of both as one-line errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

BOM = "\ufeff"  # a UTF-8 byte order mark: dropped from the start of every input, as text tools do


def read_lines(path: str, what: str = "--input") -> list[str]:
    """Lines of a UTF-8 text file (.gz allowed), split on "\\n" only, without a leading BOM."""
    from ...data.corpus import read_lines as read_corpus_lines

    if Path(path).is_dir():
        raise ValueError(f"{what} {path} is a directory, not a text file")
    lines = read_corpus_lines(path)
    if lines:
        lines[0] = lines[0].removeprefix(BOM)
    return lines


def read_input_lines(path: str | None) -> list[str]:
    """Lines of FILE (or of stdin, read as UTF-8 whatever the locale), split on "\\n" only, without
    a leading BOM."""
    if path is not None:
        return read_lines(path)
    if sys.stdin is None:
        raise ValueError("standard input is closed; give --input FILE")
    if hasattr(sys.stdin, "buffer"):
        data = sys.stdin.buffer.read()
    else:
        data = sys.stdin.read().encode("utf-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"stdin is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    lines = text.removeprefix(BOM).split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]


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
