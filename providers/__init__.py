"""LLM providers: the neutral message model, stream chunks, and the vendor clients.

Pure of Django and Channels (DESIGN §4). Start with :mod:`providers.base` (``LLMProvider``,
``StreamAccumulator``), :mod:`providers.types` (``ProviderRequest``, ``AssistantResponse``),
:mod:`providers.factory` (``build_provider``) and :mod:`providers.testing` (fakes and a local
SSE server). See ``providers/README.md``.
"""
