"""The load benchmark (``bench/bench_load.py``): PicoBot under N concurrent streaming dialogs.

Modules: ``common`` (tags, chunk text, /proc, loopback HTTP), ``llm_server`` (a local
OpenAI-compatible streaming server), ``floor_app`` / ``floor_settings`` (the Channels floor),
``layer_floor`` (the in-memory layer alone), ``mkusers`` (bulk users and tokens), ``servers``
(starting and stopping PicoBot's processes), ``clients`` (the WebSocket clients), ``scenarios``,
``report`` and ``cli``.
"""
