"""The doc test's block grammar: mistakes in markers and fences fail, never pass silently; and
the pages themselves: each parses, and their links between each other resolve."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.readme_blocks import ReadmeFormatError, read_blocks
from tests.integration.readme.test_readme import (
    NOT_RUN,
    PAGES,
    README,
    ROOT,
    page_name,
    shell_lines,
)

_FENCE = re.compile(r"^ *```")
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*$")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "README.md"
    path.write_text(text)
    return path


def test_blocks_keep_order_sections_lines_and_markers(tmp_path: Path) -> None:
    readme = write(
        tmp_path,
        "# Top\n\n## Use\n\n```python\nx = 1\n```\n\n<!-- readme-test: skip: needs Docker -->\n"
        "```bash\ndocker compose up\n```\n\n<!-- readme-test: background 10s -->\n"
        "```bash\nlakestream compactor run\n```\n\n```text\noutput\n```\n",
    )
    blocks = read_blocks(readme)
    assert [(b.lang, b.line, b.section) for b in blocks] == [
        ("python", 6, "Use"),
        ("bash", 11, "Use"),
        ("bash", 16, "Use"),
        ("text", 20, "Use"),
    ]
    assert [b.runs for b in blocks] == [True, False, True, False]
    assert blocks[1].skip == "needs Docker"
    assert blocks[2].background_s == 10


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- readme-test: sometimes -->\n```bash\nls\n```\n", "unknown readme-test marker"),
        ("<!-- readme-test: skip: -->\n```bash\nls\n```\n", "unknown readme-test marker"),
        ("<!-- readme-test: background 10 -->\n```bash\nls\n```\n", "unknown readme-test"),
        ("<!-- readme-test: skip: later -->\n\n```bash\nls\n```\n", "right before a fenced"),
        ("<!-- readme-test: background 5s -->\n```python\nx = 1\n```\n", "applies to shell"),
        ("```\nwhat is this\n```\n", "needs a language"),
        ("```python\nx = 1\n", "never closed"),
    ],
)
def test_grammar_mistakes_fail_with_their_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ReadmeFormatError, match=message):
        read_blocks(write(tmp_path, text))


def test_console_blocks_run_prompts_only_keeping_line_numbers(tmp_path: Path) -> None:
    readme = write(tmp_path, "```console\n$ echo a \\\n  b\na b\n$ true\n```\n")
    (block,) = read_blocks(readme)
    assert shell_lines(block) == ["echo a \\", "  b", "", "true"]


def test_grammar_mistakes_name_the_page(tmp_path: Path) -> None:
    page = write(tmp_path, "text\n```\nwhat is this\n```\n")
    with pytest.raises(ReadmeFormatError, match=r"^docs/ops\.md:2: "):
        read_blocks(page, "docs/ops.md")


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_the_real_pages_parse(page: Path) -> None:
    blocks = read_blocks(page, page_name(page))
    assert all(b.page == page_name(page) for b in blocks)


def test_the_readme_has_blocks_that_run() -> None:
    assert any(b.runs for b in read_blocks(README))


def test_pages_left_out_exist() -> None:
    assert all((ROOT / name).is_file() for name in NOT_RUN)


def _outside_fences(path: Path) -> list[str]:
    """The page's lines that are not inside a fenced block (a ``# comment`` in a YAML block is
    no heading, a Python subscript call no link)."""
    lines, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            inside = not inside
        elif not inside:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces
    as hyphens; a repeated heading gets ``-1``, ``-2``..."""
    seen: Counter[str] = Counter()
    found = set()
    for line in _outside_fences(path):
        heading = _HEADING.match(line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group("title").lower()).replace(" ", "-")
            found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
            seen[slug] += 1
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_links_between_pages_resolve(page: Path) -> None:
    """Every relative link names a file that exists and, into a Markdown page, a heading it
    has: moving a section between pages must move its links too."""
    broken = []
    for line in _outside_fences(page):
        for link in _LINK.finditer(line):
            target = link.group("target")
            if "://" in target or target.startswith("mailto:"):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists() or (
                anchor and dest.suffix == ".md" and anchor not in anchors(dest)
            ):
                broken.append(target)
    assert not broken, f"{page_name(page)}: links that lead nowhere: {broken}"
