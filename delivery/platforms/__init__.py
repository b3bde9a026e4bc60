"""Platform adapters: one ``TurnSink`` (and its helpers) per chat platform (seed 003 §10).

Named ``platforms`` so it does not read like the ``channels`` library.
"""
