"""Lines of the text files users hand in (corpora, shards to annotate), read the same way everywhere:
UTF-8 with or without a byte-order mark (which would otherwise become part of the first token),
any line end, and bytes that are not UTF-8 found and named by line instead of replaced or raised
from deep inside a decoder."""

import re
from pathlib import Path
from typing import Iterator, Optional, Tuple, Union

# Undecodable bytes read with "surrogateescape" become the lone surrogates U+DC80..U+DCFF, which
# strict UTF-8 never decodes to, so one search finds them.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def text_lines(path: Union[str, Path]) -> Iterator[Tuple[int, str, Optional[str]]]:
    """(line number, line without its line end, problem) for each line of a file. problem is None,
    or says which byte of the line is not UTF-8; the line then shows such bytes as U+FFFD."""
    with Path(path).open(encoding="utf-8-sig", errors="surrogateescape") as file:
        for number, line in enumerate(file, 1):
            line = line.rstrip("\n")
            bad = _NOT_UTF8.search(line)
            if bad is None:
                yield number, line, None
                continue
            problem = f"not UTF-8 text (byte 0x{ord(bad.group()) - 0xDC00:02x} at character {bad.start() + 1})"
            yield number, line.encode("utf8", "surrogateescape").decode("utf8", "replace"), problem


def utf8_lines(path: Union[str, Path]) -> Iterator[Tuple[int, str]]:
    """(line number, line) of a file that must be UTF-8 text: the first bad line is a ValueError
    naming the file, the line and the byte."""
    for number, line, problem in text_lines(path):
        if problem is not None:
            raise ValueError(f"{path}:{number}: {problem}; save the file as UTF-8 first "
                             "(e.g. iconv -f latin1 -t utf-8 IN > OUT)")
        yield number, line
