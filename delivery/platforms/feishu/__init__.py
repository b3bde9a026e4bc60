"""The Feishu (Lark) platform adapter: cards, answer splitting, the turn sink, the plain sender.

Pure (asyncio only, no Django, Channels or HTTP client): the Open API is reached through the
:class:`~delivery.platforms.feishu.api.FeishuApi` protocol, implemented over HTTP by
``conversations.feishu.client`` and faked in the tests. Platform facts: ``../shared/FEISHU.md``.
"""
