"""Tab completion for ``%dra`` and the first line of ``%%dra``: commands, keywords, and
values from this machine's inventory (device classes, models, MIG profiles), claim names
for ``release``, run names for ``logs`` and ``cancel``.

A matcher of IPython's completion API v2 (``IPCompleter.custom_matchers``), so it works in
the terminal and through a kernel's ``complete_request`` alike. Within a ``%dra`` line it
answers alone (no Python or file-name completions mixed in).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dra_jupyter.claimspec import SHORT_ATTRIBUTES
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.magics.parsing import COMMANDS, KEYWORDS, SHORT_FLAGS

if TYPE_CHECKING:
    from IPython.core.completer import CompletionContext, SimpleMatcherResult

    from dra_jupyter.api import Session

_LINE = re.compile(r"(?:^|[\s=(])%dra\s+")
_CELL = re.compile(r"^\s*%%dra\s+")
DURATIONS = ("30s", "5m", "30m", "1h", "2h", "8h")
IDENTIFIER = "dra_jupyter.magics"


@dataclass(frozen=True)
class Word:
    """The word under the cursor: where it starts in the line and its text so far."""

    start: int
    text: str


def current_word(text: str) -> tuple[list[str], Word]:
    """The finished words before the cursor and the one being typed (quotes group words)."""
    words: list[str] = []
    start, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch.isspace():
            if i > start:
                words.append(text[start:i])
            start = i + 1
    return words, Word(start, text[start:])


def _attr(device: dict[str, Any], name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    return str(next(iter(value.values()), ""))


def inventory_values(session: Session) -> dict[str, list[str]]:
    """Values to offer per keyword, from the session's inventory and ledger."""
    models: set[str] = set()
    profiles: set[str] = set()
    for s in session.inventory.slices:
        for d in s.get("spec", {}).get("devices") or ():
            if model := _attr(d, "productName") or _attr(d, "tpuGen"):
                models.add(model)
            if profile := _attr(d, "profile"):
                profiles.add(profile)
    attributes = list(SHORT_ATTRIBUTES)
    return {
        "device_class": session.class_names(),
        "model": sorted(models),
        "mig": sorted(profiles, key=lambda p: (int(p.split("g")[0]) if p[0].isdigit() else 0, p)),
        "same": attributes,
        "distinct": attributes,
        "timeout": list(DURATIONS),
        "lease": list(DURATIONS),
        "gang_timeout": list(DURATIONS),
        "gpu": ["1", "2", "4", "8", "all"],
        "apply_env": ["true", "false"],
        "restart": ["true", "false"],
        "wait": ["true", "false"],
        "nodes": ["1", "2", "4", "8"],
    }


def _quoted(value: str, typed: str) -> str:
    if not any(c.isspace() for c in value):
        return value
    quote = typed[0] if typed[:1] in ("'", '"') else '"'
    return f"{quote}{value}{quote}"


def _values(key: str, typed: str, session: Session) -> list[str]:
    try:
        values = inventory_values(session).get(key, [])
    except DraJupyterError:
        return []  # no inventory (NVML asked for and missing, ...): nothing to offer
    partial = typed.lstrip("'\"").lower()
    return [_quoted(v, typed) for v in values if v.lower().startswith(partial)]


def _claim_names(session: Session) -> list[str]:
    try:
        return [r.name for r in session.backend.claims()]
    except DraJupyterError:
        return []


def _run_names(session: Session) -> list[str]:
    try:
        return [r.name for r in session.runs()]
    except DraJupyterError:
        return []


def candidates(form: str, words: list[str], word: Word, session: Session) -> list[str]:
    """What may come at ``word``: ``form`` is ``line`` (after ``%dra``) or ``cell``
    (``%%dra``, or ``%%dra run``: the run's keywords)."""
    typed = word.text
    if form == "line" and not words:
        return [c for c in COMMANDS if c.startswith(typed)]
    in_cell = "run" if words[:1] == ["run"] else "cell"
    command = in_cell if form == "cell" else words[0]
    if typed.startswith("-"):
        flags = COMMANDS.get(command, ())
        return [
            f
            for f in (*flags, *(s for s, f in SHORT_FLAGS.items() if f in flags))
            if f.startswith(typed)
        ]
    if command == "release":
        return [n for n in (*_claim_names(session), "--all") if n.startswith(typed)]
    if command in ("logs", "cancel") and len(words) == 1:
        return [n for n in _run_names(session) if n.startswith(typed)]
    keys = KEYWORDS.get(command, ())
    key, sep, value = typed.partition("=")
    if sep:
        return _values(key, value, session) if key in keys else []
    given = {w.partition("=")[0] for w in words}
    offered = [f"{k}=" for k in keys if k.startswith(typed) and k not in given]
    if form == "cell" and not words and "run".startswith(typed):
        offered.insert(0, "run")  # %%dra run: the cell runs in a pod, or in the background
    return offered


def fragment(word: Word) -> str:
    """The part of the word a completion replaces: the value after ``=``, or the word."""
    _key, sep, value = word.text.partition("=")
    return value if sep else word.text


def dra_matcher(context: CompletionContext) -> SimpleMatcherResult:
    """IPython matcher (API v2) for ``%dra ...`` and the first line of ``%%dra ...``."""
    from IPython.core.completer import SimpleCompletion  # noqa: PLC0415

    before = context.text_until_cursor
    cell = _CELL.match(before) if context.cursor_line == 0 else None
    line = None if cell else _LINE.search(before)
    found = cell or line
    if found is None:
        return {"completions": [], "suppress": False}
    from dra_jupyter.api import default_session  # noqa: PLC0415

    words, word = current_word(before[found.end() :])
    texts = candidates("cell" if cell else "line", words, word, default_session())
    kind = "magic" if not words and not cell else "param"
    if not texts:
        # nothing to offer (mig= where the inventory has no MIG profiles, say): the word as
        # typed, so Tab changes nothing; IPython lets a matcher suppress the others (Python
        # names, builtins) only when it has a completion
        texts = [fragment(word)]
    return {
        "completions": [SimpleCompletion(t, type=kind) for t in texts],
        "matched_fragment": fragment(word),
        "suppress": True,
        "ordered": True,
    }


dra_matcher.matcher_api_version = 2  # type: ignore[attr-defined]
dra_matcher.matcher_priority = 1  # type: ignore[attr-defined]  # before Python's own
dra_matcher.matcher_identifier = IDENTIFIER  # type: ignore[attr-defined]


def install(completer: Any) -> None:
    """Add the matcher to an ``IPCompleter`` once (loading the extension twice is fine)."""
    matchers: list[Any] = completer.custom_matchers
    if not any(getattr(m, "matcher_identifier", None) == IDENTIFIER for m in matchers):
        matchers.append(dra_matcher)


def uninstall(completer: Any) -> None:
    completer.custom_matchers[:] = [
        m for m in completer.custom_matchers if getattr(m, "matcher_identifier", None) != IDENTIFIER
    ]
