"""Checkpoint file names: the `filename` template checked when given, and filled at a save
(Lightning's rules: `{name}` becomes `name=value` with `auto_insert_metric_name`, a name that was
not logged is written as 0, a `/` in a metric name becomes `_`)."""

from __future__ import annotations

import re
import string
from typing import Any

from ..errors import MisconfigurationError, bad_value

_FIELD = re.compile(r"\{([^{}:!]+)([^{}]*)\}")


def fill_template(template: str, values: dict[str, Any], insert_names: bool, equals: str = "=") -> str:
    """`template` with each `{name[:spec]}` replaced by the value (0 if `values` has none)."""

    def fill(match: re.Match) -> str:
        name, spec = match.group(1), match.group(2)
        value = values.get(name, 0)
        if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
            value = value.item()  # a 0-d tensor (on any device): the host read of a save
        text = format(value, spec[1:] if spec.startswith(":") else "")
        return f"{name}{equals}{text}" if insert_names else text

    return _FIELD.sub(fill, template).replace("/", "_")


def check_filename(template: Any, save_last: Any) -> None:
    """What can be known before any save: a str template whose fields are names with a format spec
    that fits their value (an int for `epoch`/`step`, a float for metrics), and no clash with last.ckpt."""
    arg = f"ModelCheckpoint(filename={template!r})"
    if not isinstance(template, str) or not template:
        raise bad_value(
            "ModelCheckpoint(filename)", template, 'None or a non-empty str like "{epoch}-{val_loss:.3f}"'
        )
    try:
        fields = [
            (name, spec or "", conv)
            for _, name, spec, conv in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as err:
        raise MisconfigurationError(
            f'{arg} is not valid: {err}; braces must pair up around a name, as in "{{epoch}}-{{val_loss:.3f}}".'
        ) from err
    if "{{" in template or "}}" in template:
        raise MisconfigurationError(f"{arg} is not valid: literal braces ({{{{ or }}}}) are not supported.")
    for name, spec, conv in fields:
        if not name or conv is not None or "{" in spec:
            raise MisconfigurationError(
                f"{arg} is not valid: each field must be a name with an optional format spec, like {{epoch}} or "
                "{val_loss:.3f} (no empty {}, !r conversions or nested fields)."
            )
        sample = 0 if name in ("epoch", "step") else 1.0
        try:
            format(sample, spec)
        except ValueError as err:
            kind = "an int" if name in ("epoch", "step") else "a float metric"
            raise MisconfigurationError(
                f"{arg} is not valid: the format spec {spec!r} of {{{name}}} does not fit {kind} ({err})."
            ) from err
    if save_last and not fields and template.replace("/", "_") == "last":
        raise MisconfigurationError(
            f"{arg} with save_last=True is not valid: the top-k files would be written as last.ckpt, the file "
            "save_last keeps; choose another filename."
        )
