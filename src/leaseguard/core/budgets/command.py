"""One pg_cron job's command: rendered from one template, and read back from cron.job.

Every job of the pipeline runs as ONE command from ONE template::

    set statement_timeout = '3s'; select "public"."claim_stats_projection_job_v1"();

`render_command` fills it; `parse_live_command` reads a live command back through a small
tokenizer and a recursive-descent parser of the same two-statement grammar, refusing
anything else (such a job is reported and never rewritten). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

from psycopg import sql
from psycopg.abc import AdaptContext

from leaseguard.core.budgets.names import FunctionName
from leaseguard.core.budgets.units import MAX_BUDGET_MS, format_budget, parse_budget_ms, shown
from leaseguard.core.errors import ConfigError

# The one template every job's command is rendered from, composed by psycopg.sql (the library
# made for SQL from parts): the budget as a quoted literal, the function as a quoted identifier.
COMMAND_TEMPLATE = sql.SQL("set statement_timeout = {budget}; select {function}();")


def render_command(
    function: FunctionName, budget_ms: int, context: AdaptContext | None = None
) -> str:
    """The job's command from COMMAND_TEMPLATE, with psycopg quoting both parts."""
    if isinstance(budget_ms, bool) or not 0 < budget_ms <= MAX_BUDGET_MS:
        raise ConfigError(f"budget of {function} must be 1..{MAX_BUDGET_MS} ms")
    command = COMMAND_TEMPLATE.format(
        budget=sql.Literal(format_budget(budget_ms)), function=function.identifier()
    )
    return command.as_string(context)


@dataclass(frozen=True)
class ParsedCommand:
    """What a live command does: its statement budget (None: none set) and the function."""

    budget_ms: int | None
    function: FunctionName


class UnparseableCommand(ValueError):
    """A live command outside the narrow grammar this module understands; never rewritten."""


_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      | (?P<qident>"(?:[^"]|"")+")
      | (?P<string>'(?:[^']|'')*')
      | (?P<number>[0-9]+(?:\.[0-9]+)?)
      | (?P<punct>[;=.()])""",
    re.VERBOSE | re.ASCII,
)
_GRAMMAR = "only [SET statement_timeout = <budget>;] SELECT <function>(); is understood"


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    offset: int

    @property
    def word(self) -> str | None:
        return self.text.lower() if self.kind == "word" else None


def _tokens(command: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(command):
        match = _TOKEN.match(command, pos)
        if match is None:
            raise UnparseableCommand(
                f"unexpected character {command[pos]!r} at offset {pos}: {_GRAMMAR}"
            )
        kind = match.lastgroup or ""
        if kind != "ws":
            tokens.append(_Token(kind, match.group(), pos))
        pos = match.end()
    return tokens


class _Parser:
    """Recursive descent over the two-statement grammar; anything else is refused."""

    def __init__(self, command: str) -> None:
        self.tokens = _tokens(command)
        self.pos = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, what: str) -> _Token:
        token = self.peek()
        if token is None:
            raise UnparseableCommand(f"the command ends where {what} was expected: {_GRAMMAR}")
        self.pos += 1
        return token

    def expect(self, kind: str, text: str, what: str) -> None:
        token = self.take(what)
        if token.kind != kind or token.text.lower() != text:
            self.unexpected(token, what)

    def unexpected(self, token: _Token, what: str) -> NoReturn:
        raise UnparseableCommand(
            f"expected {what} at offset {token.offset}, found {shown(token.text)}: {_GRAMMAR}"
        )

    def parse(self) -> ParsedCommand:
        budget_ms = None
        first = self.peek()
        if first is not None and first.word == "set":
            budget_ms = self.set_statement()
        self.expect("word", "select", "SELECT")
        function = self.function_name()
        self.expect("punct", "(", "'(' (a call without arguments)")
        self.expect("punct", ")", "')' (a call without arguments)")
        token = self.peek()
        if token is not None and token.text == ";":
            self.pos += 1
        token = self.peek()
        if token is not None:
            self.unexpected(token, "the end of the command")
        return ParsedCommand(budget_ms, function)

    def set_statement(self) -> int:
        self.pos += 1
        token = self.take("statement_timeout")
        if token.word == "local":
            raise UnparseableCommand(f"SET LOCAL is not understood: {_GRAMMAR}")
        if token.word == "session":
            token = self.take("statement_timeout")
        if token.word != "statement_timeout":
            raise UnparseableCommand(
                f"the command sets {shown(token.text)}, not statement_timeout: {_GRAMMAR}"
            )
        token = self.take("'=' or TO")
        if token.text != "=" and token.word != "to":
            self.unexpected(token, "'=' or TO")
        value = self.take("a statement_timeout value")
        if value.kind == "string":
            text = value.text[1:-1].replace("''", "'")
        elif value.kind == "number":
            text = value.text
        else:
            self.unexpected(value, "a statement_timeout value")
        try:
            budget_ms = parse_budget_ms(text, where="statement_timeout")
        except ConfigError as exc:
            raise UnparseableCommand(str(exc)) from None
        self.expect("punct", ";", "';' after SET")
        return budget_ms

    def function_name(self) -> FunctionName:
        first = self.identifier()
        token = self.peek()
        if token is None or token.text != ".":
            return FunctionName(None, first)
        self.pos += 1
        return FunctionName(first, self.identifier())

    def identifier(self) -> str:
        token = self.take("a function name")
        if token.kind == "word":
            return token.text.lower()  # PostgreSQL folds unquoted names
        if token.kind == "qident":
            return token.text[1:-1].replace('""', '"')
        self.unexpected(token, "a function name")


def parse_live_command(command: str) -> ParsedCommand:
    """(budget, function) of a pg_cron command; UnparseableCommand for anything else.

    Tolerated: keyword case, spacing, ``=`` or ``TO``, a quoted or bare value, quoted or bare
    identifiers, a trailing semicolon. Refused: other SETs, more statements, arguments,
    comments, anything not in the grammar -- such a job is reported and left untouched.
    """
    return _Parser(command).parse()
