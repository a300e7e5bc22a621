"""Strict answer extraction from model responses (pure functions, no math libraries).

Stricter than math-verify's own extraction on purpose: a training reward must not be earned by a
response that never committed to an answer. `last_boxed` never falls back to an earlier box or to
"the last number in the text"; `final_boxes` reads a final answer written as several adjacent
boxes (`\\boxed{1}, \\boxed{2}`); `answer_line` is the opt-in fallback for responses without a
box (`verify.extract: answer_line`); `final_number` accepts only a bare integer after the last `=`.

Whether the text around the final box takes it back is `graft.verify.math.commitment`'s business;
`offers_alternatives` finds a hedge inside one box (`\\boxed{4 \\text{ or } 5}`).
"""

from __future__ import annotations

import re

# `\boxed` or `\fbox`, not followed by another letter (`\boxedx` is a different command).
BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# `\boxed 5`: the command, whitespace, then one token (TeX's single-argument form).
_BOX_TOKEN = re.compile(r"\s+([^\s{}$\\]+)")
_INTEGER = re.compile(r"-?[0-9]+")
# What may stand between two boxes of one final answer: math delimiters, spacing commands,
# punctuation and one "and" / "or" (`\\boxed{1}, \\boxed{2}`, `$\\boxed{3}$ and $\\boxed{4}$`).
_SPACING = re.compile(r"\$|\\[()\[\],;:! ]|\\q?quad|\\text\{\s*(?:and|or)?\s*\}|\*\*")
_JOINER = re.compile(r"[\s,;]*(?:(?:and|or|&)[\s,;]*)?", re.IGNORECASE)
_MAX_JOINER_CHARS = 40
# "The final answer is 42." / "Answer: $x = 3$" on the last line of a response.
_ANSWER_LINE = re.compile(r"\banswer\b\s*(?:is|:|=)\s*:?\s*(.+)$", re.IGNORECASE)
_LINE_WRAPPERS = re.compile(r"^(?:\*\*|\$\$?|\\\(|\\\[)+|(?:\*\*|\$\$?|\\\)|\\\])+$")


def _balanced_group(text: str, open_pos: int) -> str | None:
    """Content of the `{...}` group opening at `open_pos`, or None when it never closes.

    Escaped characters (`\\{`, `\\}`, `\\\\`) are skipped, so `\\boxed{\\{1, 2\\}}` reads whole.
    """
    depth = 0
    i = open_pos
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_pos + 1 : i]
        i += 1
    return None


def box_at(text: str, command_start: int, pos: int) -> tuple[int, int, str | None]:
    """(start, end, content) of the box whose command ends at `pos`; content None if unclosed."""
    rest = text[pos:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        open_pos = pos + len(rest) - len(stripped)
        content = _balanced_group(text, open_pos)
        if content is None:
            return command_start, len(text), None
        return command_start, open_pos + len(content) + 2, content.strip()
    token = _BOX_TOKEN.match(rest)
    if token is None:
        return command_start, len(text), None
    # A sentence may end right after the token: "\boxed 5." means 5.
    return command_start, pos + token.end(), token.group(1).rstrip(".,;:")


def after_last_box(text: str) -> str:
    """The text after the last box (all of it when there is none; "" after an unclosed one)."""
    commands = list(BOX_COMMAND.finditer(text))
    if not commands:
        return text
    return text[box_at(text, commands[-1].start(), commands[-1].end())[1] :]


def last_boxed(text: str) -> str | None:
    """Content of the LAST `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) in `text`, stripped.

    Returns None when there is no box, or when the last one is unclosed (a response cut off inside
    its final box has no answer, even if an earlier box is closed). An empty box gives "".
    """
    commands = list(BOX_COMMAND.finditer(text))
    if not commands:
        return None
    return box_at(text, commands[-1].start(), commands[-1].end())[2]


def joins(gap: str) -> bool:
    """Does `gap` only separate two boxes of one answer (commas, "and", math delimiters)?"""
    if len(gap) > _MAX_JOINER_CHARS:
        return False
    return _JOINER.fullmatch(_SPACING.sub(" ", gap)) is not None


def final_boxes(text: str) -> tuple[str, ...] | None:
    """Contents of the boxes that make up the final answer: the last box and the boxes right
    before it that are separated from it only by commas, "and"/"or" or math delimiters.

    `\\boxed{1}, \\boxed{2}, \\boxed{3}` gives ("1", "2", "3"); a box followed by more reasoning
    and then another box gives only the last one. None when `last_boxed` is None.
    """
    commands = list(BOX_COMMAND.finditer(text))
    if not commands:
        return None
    boxes = [box_at(text, m.start(), m.end()) for m in commands]
    start, _, content = boxes[-1]
    if content is None:
        return None
    out = [content]
    for prev_start, prev_end, prev_content in reversed(boxes[:-1]):
        if prev_content is None or prev_end > start or not joins(text[prev_end:start]):
            break
        out.append(prev_content)
        start = prev_start
    return tuple(reversed(out))


def answer_line(text: str) -> str | None:
    """The answer stated on the LAST non-empty line as "answer is X" / "Answer: X", or None.

    The opt-in fallback for responses without a box. Its risk: a response cut off right after
    "the answer is 4" (of "45") is read as 4; only the last line counts, so an answer announced
    earlier and then abandoned is not read.
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    match = _ANSWER_LINE.search(lines[-1])
    if match is None:
        return None
    answer = _LINE_WRAPPERS.sub("", match.group(1).strip().rstrip(".").strip()).strip()
    return answer.rstrip(".").strip() or None


def final_number(text: str) -> str | None:
    """The integer answer of a synthetic arithmetic response, or None.

    The answer is the text after the last `=` (or the whole response when there is none), and it
    must be exactly an optional minus sign and ASCII digits: "12 3", "123." or "123abc" are None.
    """
    tail = text.strip().rpartition("=")[2].strip()
    return tail if _INTEGER.fullmatch(tail) else None


_IN_BOX_HEDGE = re.compile(r"\b(?:or|either|maybe|possibly)\b|\\lor\b|\\vee\b")


def offers_alternatives(content: str) -> bool:
    """Does one box's content offer alternatives in words (`4 \\text{ or } 5`, `3 or 4`)?"""
    return _IN_BOX_HEDGE.search(content) is not None
