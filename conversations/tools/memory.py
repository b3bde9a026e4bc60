"""``memory_save`` / ``memory_search``: the owner's long-term memory (``MemoryItem``; seed 000 §7.1).

A dialog with an owner reads and writes that user's items only; an ownerless dialog the ownerless
items of its own ``(channel, chat_id)``. Search is full-text (PostgreSQL's text search, or a
portable ``icontains`` path elsewhere), ranked in Python; CJK text is matched by character pairs
(the rules: ``tools/README.md``). The sync functions here run on a storage thread
(``run_storage``); the TurnInputBuilder uses :func:`recall_memories` for recall.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import Q

from conversations.agent.tool_registry import Tool, ToolContext, ToolError
from conversations.models import MemoryItem, now_ms
from conversations.storage import scrub_text, sql
from conversations.storage.runner import run_storage

CONTENT_MAX_CHARS = 2000
TAGS_MAX = 8
TAG_MAX_CHARS = 32
QUERY_MAX_CHARS = 500
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
MAX_TERMS = 16
CANDIDATES = 200
"""Rows read per search, at most (then ranked in Python)."""

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+", re.UNICODE)
_CJK_RUN = re.compile(rf"[{_CJK}]+")


@dataclass(frozen=True)
class MemoryScope:
    """Whose memory: ``owner_id``, or for an ownerless dialog its ``(channel, chat_id)``."""

    owner_id: int | None
    channel: str = ""
    chat_id: str = ""

    def filter(self) -> Q:
        """The ``MemoryItem`` rows of this scope."""
        if self.owner_id is not None:
            return Q(owner_id=self.owner_id)
        return Q(owner__isnull=True, channel=self.channel, chat_id=self.chat_id)


@dataclass(frozen=True)
class MemoryHit:
    """One search result: the item and its score (higher is better)."""

    id: int
    content: str
    tags: list[str]
    updated_at: int
    score: float

    def as_json(self) -> dict:
        """The model-facing form (``saved_at`` is ISO 8601 UTC)."""
        saved = datetime.fromtimestamp(self.updated_at / 1000, UTC).isoformat(timespec="seconds")
        return {"id": self.id, "content": self.content, "tags": self.tags, "saved_at": saved}


def scope_for(context: ToolContext) -> MemoryScope:
    """The memory scope of a turn (sync; reads the dialog's owner when the context has none).

    Raises:
        ToolError: the dialog does not exist (any more).
    """
    if context.owner_id is not None:
        return MemoryScope(context.owner_id, context.channel, context.chat_id)
    row = sql.dialog_scope(context.dialog_id)
    if row is None:
        raise ToolError("this dialog no longer exists")
    return MemoryScope(*row)


def search_terms(query: str) -> list[str]:
    """The query's search terms: lower-cased words, CJK runs as overlapping pairs; ≤ ``MAX_TERMS``."""
    terms: list[str] = []
    for token in _TOKEN.findall(unicodedata.normalize("NFKC", query).lower()):
        if _CJK_RUN.fullmatch(token) and len(token) > 2:
            parts = [token[i : i + 2] for i in range(len(token) - 1)]
        else:
            parts = [token]
        for part in parts:
            if part not in terms:
                terms.append(part)
    return terms[:MAX_TERMS]


def normalize_tags(tags: list[str] | None) -> list[str]:
    """Tags stripped, lower-cased, de-duplicated, in order; empty ones dropped; NUL becomes U+FFFD."""
    out: list[str] = []
    for tag in tags or []:
        value = " ".join(unicodedata.normalize("NFKC", scrub_text(tag)).split()).lower()[:TAG_MAX_CHARS]
        if value and value not in out:
            out.append(value)
    return out[:TAGS_MAX]


def save_memory(scope: MemoryScope, content: str, tags: list[str] | None = None) -> tuple[int, bool]:
    """Store ``content`` for ``scope`` (sync). Saving text the scope already has refreshes that
    item (its tags are merged) instead of adding a copy.

    NUL characters and lone surrogates become U+FFFD (``storage.scrub_text``): they cannot be
    stored.

    Returns:
        ``(id, created)``.

    Raises:
        ToolError: empty or too long content.
    """
    text = scrub_text(content).strip()
    if not text:
        raise ToolError("content is empty")
    if len(text) > CONTENT_MAX_CHARS:
        raise ToolError(f"content is longer than {CONTENT_MAX_CHARS} characters; save a shorter note")
    clean_tags = normalize_tags(tags)
    existing = MemoryItem.objects.filter(scope.filter(), content=text).order_by("-updated_at").first()
    if existing is not None:
        merged = normalize_tags([*existing.tags, *clean_tags])
        MemoryItem.objects.filter(pk=existing.pk).update(tags=merged, updated_at=now_ms())
        return existing.pk, False
    item = MemoryItem.objects.create(
        owner_id=scope.owner_id, channel=scope.channel, chat_id=scope.chat_id, content=text, tags=clean_tags
    )
    return item.pk, True


def search_memories(scope: MemoryScope, query: str, limit: int = DEFAULT_LIMIT) -> list[MemoryHit]:
    """The scope's items matching ``query``, best first, at most ``limit`` (≤ ``MAX_LIMIT``; sync).

    Returns an empty list when the query has no searchable term. NUL characters in the query
    are ignored (PostgreSQL refuses them in a query parameter).
    """
    query = scrub_text(query)
    terms = search_terms(query)
    limit = max(1, min(limit, MAX_LIMIT))
    if not terms or not sql.has_memory_items(scope.owner_id, scope.channel, scope.chat_id):
        return []  # most owners have no items: skip building the term query
    rows = MemoryItem.objects.filter(scope.filter())
    term_filter = Q()
    for term in terms:
        term_filter |= Q(content__icontains=term) | Q(tags__icontains=term)
        # SQLite stores JSON with non-ASCII escaped ("\u4e2d"): a tag 中文 or café matches there
        # only in that form (PostgreSQL's jsonb text has it as it is).
        escaped = json.dumps(term)[1:-1]
        if escaped != term:
            term_filter |= Q(tags__icontains=escaped)
    if connection.vendor == "postgresql":
        candidates = _postgres_candidates(rows, query, term_filter)
    else:
        candidates = [
            (item, 0.0) for item in rows.filter(term_filter).order_by("-updated_at", "-id")[:CANDIDATES]
        ]
    phrase = " ".join(unicodedata.normalize("NFKC", query).lower().split())
    hits = [hit for item, rank in candidates if (hit := _score(item, terms, phrase, rank)) is not None]
    hits.sort(key=lambda h: (-h.score, -h.updated_at, -h.id))
    return hits[:limit]


def _postgres_candidates(rows, query: str, term_filter: Q) -> list[tuple[MemoryItem, float]]:
    from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector

    vector = SearchVector("content", config="simple")
    search = SearchQuery(query, config="simple", search_type="websearch")
    ranked = (
        rows.annotate(search=vector, rank=SearchRank(vector, search))
        .filter(Q(search=search) | term_filter)
        .order_by("-rank", "-updated_at", "-id")[:CANDIDATES]
    )
    return [(item, float(item.rank or 0.0)) for item in ranked]


def _score(item: MemoryItem, terms: list[str], phrase: str, db_rank: float) -> MemoryHit | None:
    haystack = unicodedata.normalize("NFKC", item.content + " " + " ".join(item.tags or [])).lower()
    matched = [t for t in terms if t in haystack]
    if not matched and db_rank <= 0:
        return None
    coverage = len(matched) / len(terms)
    frequency = sum(min(haystack.count(t), 3) for t in matched) / (3 * len(terms))
    score = 10 * coverage + 2 * frequency + (3 if phrase and phrase in haystack else 0) + 10 * db_rank
    return MemoryHit(item.pk, item.content, list(item.tags or []), item.updated_at, round(score, 4))


# --- the tools ------------------------------------------------------------------------------------


def _save_for(context: ToolContext, content: str, tags: list[str] | None) -> tuple[int, bool]:
    return save_memory(scope_for(context), content, tags)


def _search_for(context: ToolContext, query: str, limit: int) -> list[MemoryHit]:
    return search_memories(scope_for(context), query, limit)


async def memory_save(arguments: dict, context: ToolContext) -> str:
    """Save a note for the dialog's owner; returns ``{"id", "status": "saved"|"updated"}`` as JSON."""
    item_id, created = await run_storage(_save_for, context, arguments["content"], arguments.get("tags"))
    return json.dumps({"id": item_id, "status": "saved" if created else "updated"})


async def memory_search(arguments: dict, context: ToolContext) -> str:
    """Search the owner's notes; returns ``{"query", "results": [{id, content, tags, saved_at}]}``."""
    query = arguments["query"]
    if not search_terms(query):
        raise ToolError("the query has no searchable words")
    hits = await run_storage(_search_for, context, query, arguments.get("limit", DEFAULT_LIMIT))
    return json.dumps({"query": query, "results": [h.as_json() for h in hits]}, ensure_ascii=False)


def memory_tools() -> list[Tool]:
    """The ``memory_save`` and ``memory_search`` tool definitions."""
    return [
        Tool(
            name="memory_save",
            description=(
                "Save a short fact or preference about the user to long-term memory, available in "
                "all of their future conversations. Save one fact per call."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1, "maxLength": CONTENT_MAX_CHARS},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 1, "maxLength": TAG_MAX_CHARS},
                        "maxItems": TAGS_MAX,
                        "description": "Optional keywords, e.g. ['food', 'preference'].",
                    },
                },
                "required": ["content"],
                "additionalProperties": False,
            },
            handler=memory_save,
            timeout=10.0,
            needs_context=True,
        ),
        Tool(
            name="memory_search",
            description="Search the user's long-term memory by keywords; best matches first.",
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": QUERY_MAX_CHARS},
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_LIMIT,
                        "description": f"Results wanted (default {DEFAULT_LIMIT}).",
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            handler=memory_search,
            timeout=10.0,
            needs_context=True,
        ),
    ]


RECALL_LIMIT = 3


def _recall_sync(context: ToolContext, query: str) -> str | None:
    hits = search_memories(scope_for(context), query, RECALL_LIMIT)
    return "\n".join(f"- {hit.content}" for hit in hits) or None


def recall_for_turn(start: Any) -> str | None:
    """The owner's items best matching the turn's user message, at most ``RECALL_LIMIT``, as
    ``- item`` lines (None when none match; seed 000 §7.1). ``start`` is the turn's
    ``storage.TurnStart``. Sync: touches the DB (a storage thread)."""
    query = _turn_query(start)
    if not query:
        return None
    return _recall_sync(ToolContext(start.dialog_id, start.channel, start.chat_id), query)


async def recall_memories(start: Any) -> str | None:
    """The ``TurnInputBuilder`` memory hook: :func:`recall_for_turn` through ``run_storage``."""
    return await run_storage(recall_for_turn, start) if _turn_query(start) else None


def _turn_query(start: Any) -> str:
    query = str((start.user_message or {}).get("content") or "")
    return query if query.strip() else ""
