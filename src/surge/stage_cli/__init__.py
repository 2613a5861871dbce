"""What the `surge` command (`src/surge/cli/`) and Lightning's `LightningCLI` (`src/surge/lightning/cli.py`)
share, one layer below both: a stage run from a config (`config.py`: `SurgeCLI`, `run_cli`), the
commands it parses (`commands.py`), its help and parse errors, and how surge's errors are shown
(`error_report.py`)."""
