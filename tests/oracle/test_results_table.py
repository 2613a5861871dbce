"""The table `validate()`/`test()` print by default is Lightning's, character for character (at a
fixed terminal width), and `verbose=False` prints none."""

import re

from oracle_runs import run_both


def tables(output: str) -> dict[str, str]:
    """The lines printed between the script's markers, warnings and log lines left out."""
    parts = dict(re.findall(r"<<(\w+)\n(.*?)(?=<<)", output, re.DOTALL))
    keep = lambda line: line.startswith(("─", "-")) or (line.startswith(" ") and line.strip())  # noqa: E731
    return {
        k: "\n".join(line for line in v.splitlines() if keep(line) or "metric" in line)
        for k, v in parts.items()
    }


def test_the_results_table_is_lightnings(tmp_path):
    lightning, surge = run_both("results_table.py", tmp_path, env={"COLUMNS": "100"})
    assert surge.record == lightning.record
    ours, theirs = tables(surge.output), tables(lightning.output)
    assert "Validate metric" in theirs["validate"] and "DataLoader 1" in theirs["test"]
    assert theirs["quiet"] == ""
    assert ours == theirs
