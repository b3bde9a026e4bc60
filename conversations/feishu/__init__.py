"""The Feishu (Lark) channel: receiving events (webhook or long connection), recording each message
once, answering commands, and the platform the runtime delivers Feishu turns through. See README.md.
"""
