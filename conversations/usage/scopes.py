"""The call scope of a dialog's side work: titles and compactions (issue 17; pure).

A provider call for a title or a summary is recorded under its own kind. Inside a turn of the same
dialog (an automatic compaction, a title task started by the turn's executor) the turn's user and
channel are kept, and its turn id too when ``keep_turn``; elsewhere (``/compact``, REST) the scope
names the dialog only, and the usage writer takes the user and channel from the dialog's row.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from providers.metering import CALL_SCOPE, CallScope, call_scope


def dialog_scope(kind: str, dialog_id: str, *, keep_turn: bool) -> AbstractContextManager[CallScope]:
    """``call_scope`` for ``kind`` work on ``dialog_id`` (module docstring)."""
    current = CALL_SCOPE.get()
    if current is not None and current.dialog_id == dialog_id:
        return call_scope(current, kind=kind, turn_id=current.turn_id if keep_turn else "")
    return call_scope(CallScope(kind=kind, dialog_id=dialog_id))
