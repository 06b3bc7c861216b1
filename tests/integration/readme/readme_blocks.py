"""README.md's fenced blocks, read in order, with the markers that say how to run them.

The grammar is documented in ``test_readme.py``; this module only parses, so that a marker or
fence mistake is reported with its README line before anything runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: Languages whose blocks run; everything else (text, yaml, ...) is shown, not run.
PYTHON = frozenset({"python"})
SHELL = frozenset({"bash", "sh", "console"})

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[^`\s]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*readme-test:\s*(?P<body>.*?)\s*-->\s*$")
_SKIP = re.compile(r"^skip:\s*(?P<reason>\S.*)$")
_BACKGROUND = re.compile(r"^background\s+(?P<seconds>\d+(?:\.\d+)?)s$")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*$")


class ReadmeFormatError(ValueError):
    """The README breaks the block grammar (an unknown marker, a fence without a language...)."""


@dataclass(frozen=True)
class Block:
    """One fenced block: ``line`` is the README line of its first content line (1-based)."""

    lang: str
    text: str
    line: int
    section: str
    skip: str | None = None
    background_s: float | None = None

    @property
    def runs(self) -> bool:
        return self.skip is None and (self.lang in PYTHON or self.lang in SHELL)

    def where(self, readme: Path) -> str:
        return f"{readme.name}:{self.line} (section {self.section!r}, ```{self.lang})"


@dataclass(frozen=True)
class _Marker:
    skip: str | None = None
    background_s: float | None = None


def parse_marker(body: str, line: int) -> _Marker:
    skip = _SKIP.match(body)
    if skip:
        return _Marker(skip=skip.group("reason"))
    background = _BACKGROUND.match(body)
    if background:
        return _Marker(background_s=float(background.group("seconds")))
    raise ReadmeFormatError(
        f"README.md:{line}: unknown readme-test marker {body!r} "
        "(known: 'skip: <reason>', 'background <N>s')"
    )


def read_blocks(readme: Path) -> list[Block]:
    """Every fenced block of ``readme`` in order, with its section and marker."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    section = "(top)"
    pending: tuple[_Marker, int] | None = None
    index = 0
    while index < len(lines):
        text = lines[index]
        number = index + 1
        marker = _MARKER.match(text)
        fence = _FENCE.match(text)
        heading = _HEADING.match(text)
        if pending is not None and not fence:
            raise ReadmeFormatError(
                f"README.md:{pending[1]}: a readme-test marker must be on the line right "
                "before a fenced block"
            )
        if marker:
            pending = (parse_marker(marker.group("body"), number), number)
        elif fence:
            block, index = _read_fence(lines, index, fence, section, pending)
            blocks.append(block)
            pending = None
        elif heading:
            section = heading.group("title")
        index += 1
    if pending is not None:
        raise ReadmeFormatError(f"README.md:{pending[1]}: a readme-test marker ends the file")
    return blocks


def _read_fence(
    lines: list[str],
    start: int,
    fence: re.Match[str],
    section: str,
    pending: tuple[_Marker, int] | None,
) -> tuple[Block, int]:
    """The block opened at ``start`` and the index of its closing fence."""
    lang = fence.group("lang").lower()
    if not lang:
        raise ReadmeFormatError(
            f"README.md:{start + 1}: a fenced block needs a language: ```python, ```bash "
            "(these run) or ```text (output, not run)"
        )
    indent = len(fence.group("indent"))
    closing = re.compile(rf"^ *{re.escape(fence.group('fence'))}\s*$")
    end = start + 1
    while end < len(lines) and not closing.match(lines[end]):
        end += 1
    if end == len(lines):
        raise ReadmeFormatError(f"README.md:{start + 1}: fenced block is never closed")
    content = lines[start + 1 : end]  # an indented fence (in a list item) is dedented
    body = "\n".join(line[indent:] if not line[:indent].strip() else line for line in content)
    marker = pending[0] if pending else _Marker()
    block = Block(
        lang=lang,
        text=body + "\n",
        line=start + 2,
        section=section,
        skip=marker.skip,
        background_s=marker.background_s,
    )
    if block.background_s is not None and lang not in SHELL:
        raise ReadmeFormatError(f"README.md:{start + 1}: 'background' applies to shell blocks")
    return block, end
