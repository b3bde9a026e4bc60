"""Dialog titles: the pure rules (``README.md``; the service that runs them is conversations.runtime.titles)."""
