"""Usage and cost of provider calls: accounting (pure), usage rows, budgets (issue 17)."""
