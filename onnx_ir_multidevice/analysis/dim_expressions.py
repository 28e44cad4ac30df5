"""Symbolic dimensions written as expressions, parsed and evaluated safely.

Exporters name dimensions by expressions of the input dims: PyTorch's dynamo exporter writes
``32*h32`` or ``past_seq + seq``, Ultralytics exports (through onnxruntime's symbolic shape
inference) ``floor(height/2 - 1/2) + 1``, sympy-style ``Max(1, s0)`` or ``s0**2`` appear too.
:func:`parse_dim` reads such a ``dim_param`` once (results are cached) into a
:class:`DimExpression` that names its free symbols and evaluates at integer bindings.

The grammar (no ``eval``, no attribute access, nothing but integer arithmetic)::

    expr   := term (('+' | '-') term)*
    term   := unary (('*' | '/' | '//' | '%') unary)*
    unary  := ('-' | '+') unary | power
    power  := atom ('**' unary)?
    atom   := INTEGER | NAME | FUNCTION '(' expr (',' expr)* ')' | '(' expr ')'

``/`` is exact (rational) division, ``//`` and ``%`` floor division and modulo as in Python,
``**`` takes a non-negative integer exponent; the functions are ``floor``, ``ceil`` (also
``ceiling``), ``min``/``max`` (also sympy's ``Min``/``Max``), ``mod``/``Mod`` and ``abs``. A
name is a letter or ``_`` followed by letters, digits, ``_`` or ``.`` (Paddle writes
``p2o.DynamicDimension.0``). An expression evaluates to a dimension only when its value is an
integer; anything else (a fraction, a division by zero, a name without a value) is ``None``.
A ``dim_param`` that does not parse (``"?"``) is not an expression: :func:`parse_dim` returns
``None`` and the dimension counts as unnamed.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["DimExpression", "parse_dim"]

import dataclasses
import functools
import math
import re
from collections.abc import Iterator, Mapping
from fractions import Fraction

_TOKEN = re.compile(
    r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)|(?P<op>\*\*|//|[-+*/%(),]))"
)
_FUNCTIONS: dict[str, tuple[int, int]] = {  # name -> (least, most) arguments
    "floor": (1, 1),
    "ceil": (1, 1),
    "ceiling": (1, 1),
    "abs": (1, 1),
    "min": (1, 64),
    "max": (1, 64),
    "mod": (2, 2),
}
_MAX_EXPONENT = 64
_MAX_LENGTH = 1000

# A parsed expression is a tree of tuples: ("int", n), ("name", s), (op, a, b), ("neg", a),
# ("call", function, args).
_Tree = tuple


class _Undefined(Exception):
    """The expression has no integer value at the given bindings."""


@dataclasses.dataclass(frozen=True)
class DimExpression:
    """A parsed dimension expression (see the module docstring).

    .. versionadded:: 0.1
    """

    text: str
    """The ``dim_param`` as written."""

    names: frozenset[str]
    """The free symbols (dimension names) the expression reads."""

    tree: _Tree = dataclasses.field(repr=False, compare=False)
    """The parse tree (private layout)."""

    @property
    def is_symbol(self) -> bool:
        """Whether the expression is one plain name (``"seq"``), not a computation."""
        return self.tree[0] == "name"

    def evaluate(self, bindings: Mapping[str, int]) -> int | None:
        """Return the integer value at ``bindings``, or ``None`` if it has none.

        ``None`` when a name has no binding, a division by zero happens, the result is not an
        integer, or an exponent is negative or larger than 64.
        """
        try:
            value = _evaluate(self.tree, bindings)
        except (_Undefined, ZeroDivisionError, OverflowError):
            return None
        if value.denominator != 1:
            return None
        return int(value)


@functools.lru_cache(maxsize=4096)
def parse_dim(text: str) -> DimExpression | None:
    """Parse a ``dim_param``; ``None`` when it is not an expression of the grammar.

    Example:
        >>> parse_dim("floor(height/2 - 1/2) + 1").evaluate({"height": 640})
        320
        >>> sorted(parse_dim("past_seq + seq").names)
        ['past_seq', 'seq']
        >>> parse_dim("?") is None
        True

    .. versionadded:: 0.1
    """
    if not isinstance(text, str) or not text.strip() or len(text) > _MAX_LENGTH:
        return None
    tokens = _tokenize(text)
    if tokens is None:
        return None
    parser = _Parser(tokens)
    try:
        tree = parser.expr()
    except _Undefined:
        return None
    if parser.position != len(tokens):
        return None
    return DimExpression(text, frozenset(_names(tree)), tree)


def _tokenize(text: str) -> list[tuple[str, str]] | None:
    tokens = []
    position = 0
    end = len(text.rstrip())
    while position < end:
        match = _TOKEN.match(text, position)
        if match is None:
            return None
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


class _Parser:
    """Recursive descent over the tokens (raises ``_Undefined`` on a syntax error)."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.position = 0
        self.depth = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, op: str) -> bool:
        token = self.peek()
        if token is not None and token == ("op", op):
            self.position += 1
            return True
        return False

    def expect(self, op: str) -> None:
        if not self.take(op):
            raise _Undefined(f"expected {op!r}")

    def expr(self) -> _Tree:
        self.depth += 1
        if self.depth > 100:
            raise _Undefined("too deeply nested")
        tree = self.term()
        while True:
            if self.take("+"):
                tree = ("+", tree, self.term())
            elif self.take("-"):
                tree = ("-", tree, self.term())
            else:
                self.depth -= 1
                return tree

    def term(self) -> _Tree:
        tree = self.unary()
        while True:
            for op in ("*", "//", "/", "%"):
                if self.take(op):
                    tree = (op, tree, self.unary())
                    break
            else:
                return tree

    def unary(self) -> _Tree:
        if self.take("-"):
            return ("neg", self.unary())
        if self.take("+"):
            return self.unary()
        return self.power()

    def power(self) -> _Tree:
        base = self.atom()
        if self.take("**"):
            return ("**", base, self.unary())
        return base

    def atom(self) -> _Tree:
        token = self.peek()
        if token is None:
            raise _Undefined("unexpected end")
        kind, text = token
        self.position += 1
        if kind == "int":
            return ("int", int(text))
        if kind == "name":
            function = text.lower()
            if function in _FUNCTIONS and self.take("("):
                args = [self.expr()]
                while self.take(","):
                    args.append(self.expr())
                self.expect(")")
                least, most = _FUNCTIONS[function]
                if not least <= len(args) <= most:
                    raise _Undefined(f"{text} takes {least} to {most} arguments")
                return ("call", "ceil" if function == "ceiling" else function, tuple(args))
            return ("name", text)
        if text == "(":
            tree = self.expr()
            self.expect(")")
            return tree
        raise _Undefined(f"unexpected {text!r}")


def _names(tree: _Tree) -> Iterator[str]:
    kind = tree[0]
    if kind == "name":
        yield tree[1]
    elif kind == "call":
        for arg in tree[2]:
            yield from _names(arg)
    elif kind == "neg":
        yield from _names(tree[1])
    elif kind != "int":
        yield from _names(tree[1])
        yield from _names(tree[2])


def _evaluate(tree: _Tree, bindings: Mapping[str, int]) -> Fraction:
    kind = tree[0]
    if kind == "int":
        return Fraction(tree[1])
    if kind == "name":
        value = bindings.get(tree[1])
        if value is None:
            raise _Undefined(tree[1])
        return Fraction(value)
    if kind == "neg":
        return -_evaluate(tree[1], bindings)
    if kind == "call":
        args = [_evaluate(arg, bindings) for arg in tree[2]]
        function = tree[1]
        if function == "floor":
            return Fraction(math.floor(args[0]))
        if function == "ceil":
            return Fraction(math.ceil(args[0]))
        if function == "abs":
            return abs(args[0])
        if function == "min":
            return min(args)
        if function == "max":
            return max(args)
        return args[0] % args[1]  # mod
    a = _evaluate(tree[1], bindings)
    b = _evaluate(tree[2], bindings)
    if kind == "+":
        return a + b
    if kind == "-":
        return a - b
    if kind == "*":
        return a * b
    if kind == "/":
        return a / b
    if kind == "//":
        return Fraction(a // b)
    if kind == "%":
        return a % b
    # "**": a non-negative integer exponent only
    if b.denominator != 1 or not 0 <= b <= _MAX_EXPONENT:
        raise _Undefined("exponent")
    return a ** int(b)
