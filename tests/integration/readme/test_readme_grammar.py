"""The README doc-test's block grammar: mistakes in markers and fences fail, never pass silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.readme_blocks import ReadmeFormatError, read_blocks
from tests.integration.readme.test_readme import README, shell_lines


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


def test_the_real_readme_parses() -> None:
    assert any(b.runs for b in read_blocks(README))
