"""Model answers for the Markdown tests and bench/bench_markdown.py (pure text, no I/O).

* :func:`xss_answer`: every injection of issue 14 "Must show 2"; its URLs point at ``probe_url``
  (a loopback server of the test that counts hits) and its scripts would set ``window.__xss``.
* :data:`MARKDOWN_ANSWER`: one of each construct the WebUI renders.
* :func:`long_answer`: a realistic answer of at least ``min_chars`` characters (headings, prose,
  lists, tables, fenced code in several languages, a quote), the same text on every call.
"""

from __future__ import annotations

XSS_FLAG = "window.__xss"


def xss_answer(probe_url: str) -> str:
    """``probe_url`` without a trailing slash, e.g. ``http://127.0.0.1:PORT``."""
    p = probe_url.rstrip("/")
    return f"""Here are the **payloads**:

<img src="{p}/img-onerror" onerror="{XSS_FLAG}='img'">
<script>{XSS_FLAG}='script'</script>
<script src="{p}/script.js"></script>
<svg onload="{XSS_FLAG}='svg'"><circle r="4"/></svg>
<iframe src="{p}/iframe"></iframe>
<a href="javascript:{XSS_FLAG}='raw-a'">raw anchor</a>

A [javascript link](javascript:{XSS_FLAG}='md-link') and [a data link](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==).

![data image](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9ImFsZXJ0KDEpIj48L3N2Zz4=)

![remote image]({p}/md-image.png)

<details open><summary>raw details</summary>hidden</details>

```html
<img src="{p}/fence" onerror="{XSS_FLAG}='fence'">
<script>{XSS_FLAG}='fence-script'</script>
```

End of payloads.
"""


MARKDOWN_ANSWER = """## Result

This is **bold**, *italic* and `inline code`; see [the docs](https://example.com/docs "Docs").

- first item
- second item
  - nested item
- third item

1. one
2. two

| Name | Value | Share |
|:-----|------:|:-----:|
| alpha | 1 | 10 % |
| beta | 22 | 90 % |

> A quoted line.

```python
def greet(name: str) -> str:
    return f"Hello, {name}!"
```

Done.
"""

PYTHON_CODE = 'def greet(name: str) -> str:\n    return f"Hello, {name}!"'


def long_answer(min_chars: int = 10_000) -> str:
    """At least ``min_chars`` characters of Markdown, as a model would write them."""
    parts: list[str] = ["# Migrating the service to the new storage layer\n"]
    section = 0
    while sum(len(p) for p in parts) < min_chars:
        section += 1
        parts.append(
            f"""## {section}. Step {section}: measure, then change

Before touching step {section}, we record the **current** latency and the error rate, so the
change can be judged by numbers and not by impressions. The service handles about
{section * 120} requests per second at peak; most of them are *reads* of recent rows.

- Keep the old path behind a flag (`use_new_storage_{section}`).
- Compare results of both paths for a day; log every mismatch with its key.
- Switch reads first, writes later; keep a rollback note in the runbook.

| Metric | Before | After | Change |
|:-------|-------:|------:|:------:|
| p50 latency (ms) | {10 + section} | {7 + section} | −{3} |
| p99 latency (ms) | {90 + section * 3} | {60 + section * 2} | −{30 + section} |
| errors / 10k | {section % 4 + 2} | {section % 3} | better |
| CPU (cores) | {1.5 + section / 10:.1f} | {1.1 + section / 10:.1f} | −0.4 |

```python
async def read_recent(pool, user_id: int, limit: int = {section * 10}) -> list[dict]:
    \"\"\"The newest rows of one user, newest first (step {section}).\"\"\"
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, body, created_at FROM items WHERE user_id = $1 "
            "ORDER BY created_at DESC LIMIT $2",
            user_id,
            limit,
        )
    return [dict(r) for r in rows if r["body"] is not None]
```

If the comparison shows mismatches, check the clock of each host first:

```bash
for host in db1 db2 db3; do
  ssh "$host" 'chronyc tracking | grep "System time"'
done
```

> Note: step {section} is safe to roll back until the old tables are dropped.

"""
        )
    parts.append("That is the whole plan; the last step drops the old tables once a week has passed.\n")
    return "".join(parts)
