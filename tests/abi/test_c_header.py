"""The header parser reads the restricted C alnair_shm.h is written in, and refuses anything else naming the line,
so the mirror built from it never guesses."""

from __future__ import annotations

import re
import textwrap

import pytest

from alnair.abi.c_header import HeaderError, Member, parse

GOOD = textwrap.dedent("""\
    #ifndef GUARD_H
    #define GUARD_H
    #include <stdint.h>
    #ifdef __cplusplus
    extern "C" {
    #endif
    #define N 4u /* a comment */
    #define MAGIC 0x41ULL
    #define PREFIX "alnair."
    enum kind { A = 1, B, C = N, };
    /* a comment
       over lines */
    struct inner { uint32_t a; int32_t b; };
    struct outer {
        uint64_t x;            // a line comment
        char name[N];
        struct inner rows[2][N];
        uint8_t bytes[16];
    };
    #if defined(__STDC_VERSION__)
    _Static_assert(sizeof(struct outer) == 1, "skipped: compile-time checks");
    #endif
    #endif
    """)


def test_constants_enums_and_structs_are_read_in_order():
    h = parse(GOOD)
    assert h.integers == {"N": 4, "MAGIC": 0x41, "A": 1, "B": 2, "C": 4}
    assert h.strings == {"PREFIX": "alnair."}
    assert h.enums == {"kind": {"A": 1, "B": 2, "C": 4}}
    assert h.structs["outer"] == [
        Member("x", "uint64_t", (), 15),
        Member("name", "char", (4,), 16),
        Member("rows", "inner", (2, 4), 17),
        Member("bytes", "uint8_t", (16,), 18),
    ]
    assert h.structs["outer"][2].is_struct and not h.structs["outer"][0].is_struct


@pytest.mark.parametrize(
    "line, why",
    [
        ("struct s { double d; };", "unsupported type 'double'"),
        ("struct s { uint32_t a : 3; };", "unsupported ':'"),
        ("struct s { uint64_t *p; };", "unsupported '*'"),
        ("struct s { uint32_t a, b; };", "expected ';', found ','"),
        ("struct s { char c; };", "c: char only as an array"),
        ("struct s { uint8_t a[M]; };", "expected a number or an integer constant defined above, not 'M'"),
        ("struct s { struct t inner; };", "struct t is not defined above"),
        ("union u { uint32_t a; };", "expected a struct or enum declaration, found 'union'"),
        ("#define TWICE (2 * 3)", "#define TWICE: only an integer or a plain string, not '(2 * 3)'"),
        ("#else", "unsupported directive #else"),
        ("typedef uint32_t u32;", "expected a struct or enum declaration, found 'typedef'"),
    ],
)
def test_c_outside_the_subset_is_refused_naming_its_line(line, why):
    with pytest.raises(HeaderError, match="^" + re.escape(f"x.h:3: {why}")):
        parse(f"#define OK 1\n\n{line}\n", "x.h")


def test_an_unclosed_block_is_refused():
    with pytest.raises(HeaderError, match="x.h:2: a conditional block is not closed"):
        parse("#ifndef G\nstruct s { uint32_t a; };\n", "x.h")
    with pytest.raises(HeaderError, match="x.h:1: the header ends inside a declaration"):
        parse("struct s { uint32_t a;", "x.h")
