"""A dialog's model preset as users choose and read it (issue 17 "/model per dialog").

``/model`` on every channel (``chat.commands``, hence Feishu too), ``PATCH /api/dialogs/{id}``
``{"model": …}`` and ``GET /api/models`` share these rules, so a choice means the same
everywhere. ``Dialog.model`` holds the chosen name ("" = the deployment's default preset).
Reads the catalog (``runtime.provider.model_catalog``); no database, no network.
"""

from __future__ import annotations

from typing import Any

from conversations.runtime.provider import model_catalog
from providers.presets import ModelPreset


class ModelChoiceError(ValueError):
    """A preset a dialog cannot switch to; the message says why and lists the names there are."""


def choose_model(name: str | None) -> str:
    """The ``Dialog.model`` value that selects preset ``name``.

    Blank or None → "" (the default preset). A name matches exactly, else case-insensitively
    when only one preset matches that way.

    Raises:
        ModelChoiceError: no such preset, or its key variable is not set (it cannot answer).
    """
    wanted = (name or "").strip()
    if not wanted:
        return ""
    catalog = model_catalog()
    preset = catalog.presets.get(wanted)
    if preset is None:
        folded = [p for p in catalog.presets.values() if p.name.casefold() == wanted.casefold()]
        preset = folded[0] if len(folded) == 1 else None
    if preset is None:
        shown = wanted if len(wanted) <= 64 else wanted[:64] + "…"
        raise ModelChoiceError(f"no model preset {shown!r}; there are: {', '.join(catalog.names())}")
    if preset.key_missing:
        raise ModelChoiceError(
            f"model preset {preset.name!r} is not available: the server has no key for it "
            "(an operator can add one; `manage.py doctor` says what to set)"
        )
    return preset.name


def dialog_preset(model: str | None) -> ModelPreset:
    """The preset a dialog whose ``Dialog.model`` is ``model`` runs on (blank or removed: the default)."""
    return model_catalog().resolve(model)


def with_preset(info: dict) -> dict:
    """``info`` (``storage.dialog_info``'s shape) with ``model`` = the dialog's preset name
    (the default's when blank or removed) and ``model_label`` = ``"NAME (provider model)"``."""
    preset = dialog_preset(info.get("model"))
    return {**info, "model": preset.name, "model_label": preset.label}


def models_listing() -> dict[str, Any]:
    """``GET /api/models``: ``{"default": NAME, "items": [ModelPreset.public()…]}`` (no keys)."""
    catalog = model_catalog()
    return {"default": catalog.default, "items": [p.public() for p in catalog.presets.values()]}


def models_text(current: str | None) -> str:
    """``/model``'s list: one line per preset, the dialog's marked ``→``, the default named."""
    catalog = model_catalog()
    chosen = dialog_preset(current).name
    lines = ["Model presets (→ this dialog's):"]
    for preset in catalog.presets.values():
        marks = [
            m for m, on in (("default", preset.name == catalog.default), ("no key", preset.key_missing)) if on
        ]
        window = f"{preset.context_window:,}-token window"
        extra = f" — {preset.description}" if preset.description else ""
        lines.append(
            f"{'→' if preset.name == chosen else ' '} {preset.label} · {window}"
            + (f" [{', '.join(marks)}]" if marks else "")
            + extra
        )
    lines.append("Switch with /model NAME.")
    return "\n".join(lines)
