"""Export and import of dialogs (``manage.py export`` / ``manage.py import``; DESIGN §3 data model).

``schema`` is the file format (strict pydantic models) and :func:`~.schema.validate_document`;
``strict_json`` reads standard JSON only and refuses what the database would not store as it is;
``errors`` holds :class:`~.errors.TransferError` and how a refusal names its JSON path;
``export`` selects and writes dialogs; ``markdown`` is the readable transcript; ``importer``
writes a validated document in one transaction. ``README.md`` here: the format and its rules.
The pure modules (``errors``, ``strict_json``, ``markdown``) import without Django configured,
so this package re-exports nothing.
"""
