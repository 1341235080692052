"""Reads alnair_shm.h, the ABI's one definition, into its constants, enums and struct members: a parser for the
restricted C the header is written in, so layout.py builds the mirror from the header and cannot drift from it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# The member types the header may use; char only as an array (a fixed-size string).
SCALARS = ("uint8_t", "int32_t", "uint32_t", "uint64_t", "char")
_TOKEN = re.compile(r"\s*(?:(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b|[A-Za-z_]\w*|(\S))")  # numbers, names, the rest
_DIRECTIVE = re.compile(r"#\s*(\w+)\s*(.*)")


class HeaderError(ValueError):
    """The header uses C outside the subset read here; the message names the file and line."""


@dataclass(frozen=True)
class Member:
    name: str
    type: str  # one of SCALARS, or the name of a struct defined before (alnair_cuda_copy)
    dims: tuple[int, ...]  # array dimensions, outermost first; () for a scalar
    line: int

    @property
    def is_struct(self) -> bool:
        return self.type not in SCALARS


@dataclass
class Header:
    integers: dict[str, int] = field(default_factory=dict)  # #define NAME 123u, and every enumerator
    strings: dict[str, str] = field(default_factory=dict)  # #define NAME "text"
    enums: dict[str, dict[str, int]] = field(default_factory=dict)  # enumerators by enum, in order
    structs: dict[str, list[Member]] = field(default_factory=dict)  # members by struct, in order


def read(path: Path) -> Header:
    return parse(path.read_text(), path.name)


def parse(text: str, filename: str = "alnair_shm.h") -> Header:
    """The header's declarations. Conditional blocks other than the include guard (#ifndef) are skipped: they hold
    C++ linkage and compile-time checks, never the layout. Anything else outside the subset raises HeaderError."""
    return _Parser(filename).parse(_without_comments(text))


def _without_comments(text: str) -> str:
    """Comments blanked, their newlines kept, so every line keeps its number."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: "\n" * m.group().count("\n") + " ", text, flags=re.S)


class _Parser:
    def __init__(self, filename: str):
        self.filename, self.header = filename, Header()
        self.tokens: list[tuple[str, int]] = []  # (text, line) of the C outside directives
        self.at = 0

    def error(self, line: int, message: str) -> HeaderError:
        return HeaderError(f"{self.filename}:{line}: {message}")

    def parse(self, text: str) -> Header:
        skipping: list[bool] = []  # per open conditional: whether its lines are skipped
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            directive = _DIRECTIVE.match(line.strip())
            if directive:
                self.directive(number, directive.group(1), directive.group(2), skipping)
            elif not any(skipping):
                self.tokens += [(self.token(number, m), number) for m in _TOKEN.finditer(line) if m.group().strip()]
        if skipping:
            raise self.error(len(lines), "a conditional block is not closed")
        while self.at < len(self.tokens):
            self.declaration()
        return self.header

    def token(self, line: int, match: re.Match) -> str:
        if match.group(1) and match.group(1) not in "{}[];,=":
            raise self.error(line, f"unsupported {match.group(1)!r}")
        return match.group().strip()

    def directive(self, line: int, name: str, rest: str, skipping: list[bool]) -> None:
        words = rest.split(None, 1)
        if name in ("if", "ifdef", "ifndef"):
            skipping.append(name != "ifndef")  # the include guard's block is the header itself
        elif name == "endif":
            if not skipping:
                raise self.error(line, "#endif without its #if")
            skipping.pop()
        elif any(skipping) or name == "include" or (name == "define" and len(words) == 1):
            pass  # skipped, a system header, or the guard's own macro
        elif name == "define" and len(words) == 2:
            self.define(line, *words)
        else:
            raise self.error(line, f"unsupported directive #{name} {rest}".rstrip())

    def define(self, line: int, name: str, value: str) -> None:
        string = re.fullmatch(r'"([^"\\]*)"', value.strip())
        if string:
            self.header.strings[name] = string.group(1)
        else:
            self.header.integers[name] = self.literal(
                line, value.strip(), f"#define {name}: only an integer or a plain string"
            )

    def literal(self, line: int, text: str, what: str) -> int:
        number = re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*", text)
        if not number:
            raise self.error(line, f"{what}, not {text!r}")
        digits = number.group(1)
        return int(digits, 16) if digits[:2] in ("0x", "0X") else int(digits)

    def peek(self) -> str:
        if self.at == len(self.tokens):
            raise self.error(self.tokens[-1][1], "the header ends inside a declaration")
        return self.tokens[self.at][0]

    def next(self, expected: str | None = None) -> tuple[str, int]:
        text = self.peek()
        line = self.tokens[self.at][1]
        if expected is not None and text != expected:
            raise self.error(line, f"expected {expected!r}, found {text!r}")
        self.at += 1
        return text, line

    def name(self) -> tuple[str, int]:
        text, line = self.next()
        if not re.fullmatch(r"[A-Za-z_]\w*", text):
            raise self.error(line, f"expected a name, found {text!r}")
        return text, line

    def integer(self) -> int:
        """A number or an integer constant defined above."""
        text, line = self.next()
        if text in self.header.integers:
            return self.header.integers[text]
        return self.literal(line, text, "expected a number or an integer constant defined above")

    def declaration(self) -> None:
        keyword, line = self.next()
        if keyword not in ("struct", "enum"):
            raise self.error(line, f"expected a struct or enum declaration, found {keyword!r}")
        name, _ = self.name()
        self.next("{")
        if keyword == "enum":
            self.header.enums[name] = self.enumerators()
        else:
            self.header.structs[name] = self.members()
        self.next(";")

    def enumerators(self) -> dict[str, int]:
        """Up to and with the closing brace; an enumerator without a value is one more than the last."""
        values: dict[str, int] = {}
        value = 0
        while self.peek() != "}":
            name, _ = self.name()
            if self.peek() == "=":
                self.next("=")
                value = self.integer()
            values[name] = self.header.integers[name] = value
            value += 1
            if self.peek() != "}":
                self.next(",")
        self.next("}")
        return values

    def members(self) -> list[Member]:
        """Up to and with the closing brace: one member per declaration, arrays of any dimensions."""
        members = []
        while self.peek() != "}":
            type_name, line = self.name()
            if type_name == "struct":
                type_name, line = self.name()
                if type_name not in self.header.structs:
                    raise self.error(line, f"struct {type_name} is not defined above")
            elif type_name not in SCALARS:
                raise self.error(
                    line,
                    f"unsupported type {type_name!r} (the mirror reads {', '.join(SCALARS)} and structs defined above)",
                )
            name, _ = self.name()
            dims = []
            while self.peek() == "[":
                self.next("[")
                dims.append(self.integer())
                self.next("]")
            if type_name == "char" and not dims:
                raise self.error(line, f"{name}: char only as an array (a fixed-size string)")
            self.next(";")
            members.append(Member(name, type_name, tuple(dims), line))
        self.next("}")
        return members
