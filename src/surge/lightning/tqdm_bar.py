"""`lightning.pytorch.callbacks.progress.tqdm_progress.Tqdm`: the tqdm class Lightning's bar draws with,
for a project that subclasses Lightning's bar and builds its own `Tqdm` in `init_train_tqdm`."""

from __future__ import annotations

from tqdm import tqdm

WIDTH = 5  # a float is shown with at least this many characters, so the bar does not jump


class Tqdm(tqdm):
    """tqdm whose floats are padded to at least five characters: `format_num(0.5)` is "0.500", `format_num(1.0)` "1.000"."""

    @staticmethod
    def format_num(n: int | float | str) -> str:
        text = n if isinstance(n, str) else tqdm.format_num(n)
        if not isinstance(n, (float, str)) or "e" in text:
            return text  # an int, or scientific notation: as tqdm writes it
        if "." not in text and len(text) < WIDTH:
            try:
                float(text)
            except ValueError:  # a str that is no number
                return text
            text += "."
        return text + "0" * (WIDTH - len(text))


__all__ = ["Tqdm"]
