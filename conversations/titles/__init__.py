"""Dialog titles: the pure rules (the service that runs them is conversations.runtime.titles)."""
