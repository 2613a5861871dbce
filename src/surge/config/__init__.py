"""What every part of a run may read, below the parts themselves: the registered strategy and
precision names (`registry.py`), whose semantics a run follows (`semantics.py`), the directories a
run writes and claims (`paths.py`, `run_lease.py`, `run_records.py`), the checks of a config file
(`guard.py`, `targets.py`) and what each Trainer argument means (`meanings.py`). The Trainer's
arguments themselves are checked one layer up, in `surge/arguments/`."""
