"""A small recursive-descent parser for CEL (the cel-spec grammar), for static analysis only.

The Rust engine parses the expression again to evaluate it; this tree feeds the checks and the
cost estimate in :mod:`dra_jupyter.selectors.cost` and the source rewrites in
:mod:`dra_jupyter.selectors.engine`. Like cel-go, chains of ``&&`` and ``||`` become
balanced trees, and ``-`` in front of a number literal is part of the literal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

NodeKind = Literal["literal", "ident", "select", "index", "call", "list", "map", "cond", "op"]
MAX_DEPTH = 100
"""Deepest tree accepted (upstream: 250); keeps every recursive walk far from Python's limit."""

# fmt: off
RESERVED = frozenset((
    "as", "break", "const", "continue", "else", "for", "function", "if", "import", "let", "loop",
    "package", "namespace", "return", "var", "void", "while",
))
# fmt: on


@dataclass(frozen=True, slots=True)
class Node:
    """One expression. ``start``/``end`` delimit its source text.

    * ``literal``: ``name`` is the type (int, uint, double, string, bytes, bool, null), ``value``;
    * ``ident``: ``name``; ``select``: ``target``.``name``; ``index``: ``target[args[0]]``;
    * ``call``: ``name`` with ``args``, on ``target`` for the method form ``target.name(...)``;
    * ``list``: ``args``; ``map``: ``args`` = key, value, key, value, ...;
    * ``cond``: ``args`` = condition, if-true, if-false; ``op``: operator ``name`` on ``args``.
    """

    kind: NodeKind
    start: int
    end: int
    name: str = ""
    args: tuple[Node, ...] = ()
    target: Node | None = None
    value: object = None

    def children(self) -> tuple[Node, ...]:
        """Direct sub-expressions, in source order."""
        return self.args if self.target is None else (self.target, *self.args)


class CelSyntaxError(ValueError):
    """The expression is not CEL, or uses syntax that the engine does not support."""

    def __init__(self, message: str, position: int, *, unsupported: bool = False) -> None:
        self.message = message
        self.position = position
        self.unsupported = unsupported
        super().__init__(message if unsupported else f"{message} at column {position + 1}")


_TOKEN = re.compile(
    r"""(?P<space>\s+|//[^\n]*)
    | (?P<double>(?:[0-9]+\.[0-9]+|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
    | (?P<int>0[xX][0-9a-fA-F]+[uU]?|[0-9]+[uU]?)
    | (?P<quote>(?:[rR][bB]?|[bB][rR]?)?(?:\"\"\"|'''|"|'))
    | (?P<ident>[_a-zA-Z][_a-zA-Z0-9]*)
    | (?P<punct>==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.,\[\](){}])""",
    re.VERBOSE,
)
_ESCAPE = re.compile(r"\\(?:([abfnrtv\\'\"`?])|[xX]([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|"
                     r"U([0-9a-fA-F]{8})|([0-3][0-7]{2})|(.?))", re.DOTALL)  # fmt: skip
_SIMPLE_ESCAPES = dict(zip("abfnrtv\\'\"`?", "\a\b\f\n\r\t\v\\'\"`?", strict=True))
_RELATIONS = frozenset(("<", "<=", ">=", ">", "==", "!=", "in"))
_BINARY = (frozenset(("+", "-")), frozenset(("*", "/", "%")))


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # double, int, string, bytes, ident, punct, end
    text: str
    start: int
    end: int
    value: object = None


def _unescape(body: str, position: int) -> str:
    def one(match: re.Match[str]) -> str:
        simple, hex2, hex4, hex8, octal, bad = match.groups()
        if simple is not None:
            return _SIMPLE_ESCAPES[simple]
        if bad is not None:
            raise CelSyntaxError(f"invalid escape sequence '\\{bad}'", position + match.start())
        return chr(int(hex2 or hex4 or hex8, 16) if octal is None else int(octal, 8))

    return _ESCAPE.sub(one, body)


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise CelSyntaxError(f"unexpected character {text[pos]!r}", pos)
        kind, lexeme = match.lastgroup or "", match.group()
        if kind == "quote":
            prefix = lexeme.rstrip("'\"").lower()
            quote = lexeme[len(prefix) :]
            close = match.end()
            while not text.startswith(quote, close):
                if close >= len(text) or (len(quote) == 1 and text[close] in "\r\n"):
                    raise CelSyntaxError("unterminated string literal", pos)
                close += 2 if text[close] == "\\" and "r" not in prefix else 1
            body = text[match.end() : close]
            value = body if "r" in prefix else _unescape(body, match.end())
            kind = "bytes" if "b" in prefix else "string"
            tokens.append(
                _Token(kind, text[pos : close + len(quote)], pos, close + len(quote), value)
            )
            pos = close + len(quote)
            continue
        if kind != "space":
            tokens.append(_Token(kind, lexeme, pos, match.end()))
        pos = match.end()
    tokens.append(_Token("end", "", len(text), len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def at(self, *texts: str) -> bool:
        return self.tok.kind == "punct" and self.tok.text in texts

    def take(self) -> _Token:
        token = self.tok
        self.i += 1
        return token

    def expect(self, text: str) -> _Token:
        if not self.at(text):
            found = f"'{self.tok.text}'" if self.tok.text else "the end of the expression"
            raise CelSyntaxError(f"expected '{text}' but found {found}", self.tok.start)
        return self.take()

    def expr(self) -> Node:
        cond = self.logic("||")
        if not self.at("?"):
            return cond
        self.take()
        if_true = self.logic("||")
        self.expect(":")
        if_false = self.expr()
        return Node("cond", cond.start, if_false.end, args=(cond, if_true, if_false))

    def logic(self, op: str) -> Node:
        terms = [self.logic("&&") if op == "||" else self.binary(0)]
        while self.at(op):
            self.take()
            terms.append(self.logic("&&") if op == "||" else self.binary(0))
        return self._balance(op, terms)

    def _balance(self, op: str, terms: list[Node]) -> Node:
        if len(terms) == 1:
            return terms[0]
        left, right = (
            self._balance(op, terms[: len(terms) // 2]),
            self._balance(op, terms[len(terms) // 2 :]),
        )
        return Node("op", left.start, right.end, op, (left, right))

    def binary(self, level: int) -> Node:
        if level == 0:
            ops: frozenset[str] = _RELATIONS
        else:
            ops = _BINARY[level - 1]
        left = self.binary(level + 1) if level < len(_BINARY) else self.unary()
        while self.at(*ops) or (level == 0 and self.tok.kind == "ident" and self.tok.text == "in"):
            op = self.take().text
            right = self.binary(level + 1) if level < len(_BINARY) else self.unary()
            left = Node("op", left.start, right.end, op, (left, right))
        return left

    def unary(self) -> Node:
        if self.at("!", "-"):
            op = self.take()
            nxt = self.tok
            if op.text == "-" and nxt.kind in ("int", "double") and nxt.start == op.end:
                literal = self.member()
                if literal.kind == "literal":  # a negative number literal, as in cel-go
                    value = -literal.value if isinstance(literal.value, int | float) else 0
                    return Node("literal", op.start, literal.end, literal.name, value=value)
                return Node("op", op.start, literal.end, "-", (literal,))
            operand = self.unary()
            return Node("op", op.start, operand.end, op.text, (operand,))
        return self.member()

    def member(self) -> Node:
        node = self.primary()
        while True:
            if self.at(".") and self.tokens[self.i + 1].text == "?":
                raise CelSyntaxError(
                    "optional field selection (.?) is not supported by dra-jupyter's CEL engine; "
                    "use has(...) instead", self.tok.start, unsupported=True)  # fmt: skip
            if self.at("."):
                self.take()
                name = self.identifier()
                if self.at("("):
                    args, end = self.arguments(")")
                    node = Node("call", node.start, end, name.text, args, node)
                else:
                    node = Node("select", node.start, name.end, name.text, target=node)
            elif self.at("["):
                self.take()
                self.no_optional("optional index ([?...])", "use 'key in map' first")
                index = self.expr()
                node = Node("index", node.start, self.expect("]").end, args=(index,), target=node)
            elif self.at("{") and node.kind in ("ident", "select"):
                raise CelSyntaxError(
                    "message construction (Type{...}) is not supported: DRA selectors have no "
                    "message types", self.tok.start, unsupported=True)  # fmt: skip
            else:
                return node

    def no_optional(self, what: str, remedy: str) -> None:
        if self.at("?"):
            raise CelSyntaxError(
                f"{what} is not supported by dra-jupyter's CEL engine; {remedy}",
                self.tok.start,
                unsupported=True,
            )

    def identifier(self) -> _Token:
        token = self.take()
        if token.kind != "ident" or token.text in ("in", "true", "false", "null"):
            found = f"'{token.text}'" if token.text else "the end of the expression"
            raise CelSyntaxError(f"expected an identifier but found {found}", token.start)
        if token.text in RESERVED:
            raise CelSyntaxError(f"'{token.text}' is a reserved word", token.start)
        return token

    def arguments(self, close: str) -> tuple[tuple[Node, ...], int]:
        self.take()
        args: list[Node] = []
        while not self.at(close):
            if close != ")":
                self.no_optional("an optional element ([?x] or {?k: v})", "use a conditional")
            args.append(self.expr())
            if close == "}":
                self.expect(":")
                args.append(self.expr())
            if not self.at(close):
                self.expect(",")
                if close == ")" and self.at(")"):
                    raise CelSyntaxError("expected an operand but found ')'", self.tok.start)
        return tuple(args), self.take().end

    def primary(self) -> Node:
        token = self.tok
        if token.kind in ("int", "double", "string", "bytes"):
            self.take()
            kind = "uint" if token.kind == "int" and token.text[-1] in "uU" else token.kind
            return Node("literal", token.start, token.end, kind, value=_literal(token))
        if token.kind == "ident" and token.text in ("true", "false", "null"):
            self.take()
            kind, value = ("null", None) if token.text == "null" else ("bool", token.text == "true")
            return Node("literal", token.start, token.end, kind, value=value)
        if self.at("."):  # a leading dot names the root scope: ".device"
            self.take()
        if self.tok.kind == "ident":
            name = self.identifier()
            if self.at("("):
                args, end = self.arguments(")")
                return Node("call", token.start, end, name.text, args)
            return Node("ident", token.start, name.end, name.text)
        if self.at("("):  # the span takes in the parentheses, so that rewrites keep them
            self.take()
            inner = self.expr()
            return replace(inner, start=token.start, end=self.expect(")").end)
        if self.at("[", "{"):
            args, end = self.arguments("]" if token.text == "[" else "}")
            return Node("list" if token.text == "[" else "map", token.start, end, args=args)
        found = f"'{token.text}'" if token.text else "the end of the expression"
        raise CelSyntaxError(f"expected an operand but found {found}", token.start)


def _literal(token: _Token) -> object:
    if token.kind in ("string", "bytes"):
        return token.value
    text = token.text.rstrip("uU")
    if token.kind == "double":
        return float(text)
    digits = text[2:] if text[:2].lower() == "0x" else text
    if len(digits.lstrip("0")) > 20:  # more than any 64-bit integer (Python refuses 4,300)
        raise CelSyntaxError("integer literal out of range (CEL integers are 64-bit)", token.start)
    return int(text, 16) if text[:2].lower() == "0x" else int(text)


def parse(text: str) -> Node:
    """Parse a CEL expression; raise :class:`CelSyntaxError` for anything that is not CEL."""
    parser = _Parser(text)
    try:
        node = parser.expr()
    except RecursionError:
        raise CelSyntaxError(f"expression nests deeper than {MAX_DEPTH} levels", 0) from None
    if parser.tok.kind != "end":
        raise CelSyntaxError(f"unexpected '{parser.tok.text}'", parser.tok.start)
    depth, stack = 0, [(node, 1)]
    while stack:
        current, level = stack.pop()
        depth = max(depth, level)
        stack.extend((child, level + 1) for child in current.children())
    if depth > MAX_DEPTH:
        raise CelSyntaxError(f"expression nests deeper than {MAX_DEPTH} levels", 0)
    return node
