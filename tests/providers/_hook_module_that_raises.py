"""A PICOBOT_LLM_HOOKS module that fails as it loads (test_hooks.py)."""

raise RuntimeError("this module cannot be imported")
