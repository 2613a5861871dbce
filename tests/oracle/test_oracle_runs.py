"""The oracle runner itself: the same script under real Lightning and under surge, compared."""

from oracle_runs import TEARDOWN_CRASH, assert_same_weights, oracle_flaked, run, run_both


def test_boring_model_two_epochs_matches_lightning(tmp_path):
    lightning, surge = run_both("smoke_boring.py", tmp_path)
    assert lightning.record["global_step"] == 8
    assert surge.record == lightning.record
    assert_same_weights(lightning.weights("final"), surge.weights("final"))


CRASHES_ONCE = """\
import os, sys
from pathlib import Path
import record

marker = Path(sys.argv[1])
record.put("attempt", 2 if marker.exists() else 1)
record.put("left_behind", sorted(p.name for p in Path.cwd().iterdir()))
Path("first-run-file").touch()
if not marker.exists():
    marker.touch()
    sys.stderr.write("terminate called without an active exception\\n")
    sys.stderr.flush()
    os.abort()
"""


def test_the_oracle_is_rerun_once_after_a_known_race_only(tmp_path):
    script = tmp_path / "crashes_once.py"
    script.write_text(CRASHES_ONCE)
    lightning = run("lightning", script, tmp_path / "a", str(tmp_path / "lightning-marker"))
    assert lightning.returncode == 0 and lightning.record["attempt"] == 2
    assert lightning.record["left_behind"] == []  # the rerun starts in an emptied directory
    # surge's runs are what is tested: the same crash fails them at once
    surge = run("surge", script, tmp_path / "b", str(tmp_path / "surge-marker"), check=False)
    assert surge.returncode != 0 and surge.record == {}
    # Lightning's AsyncCheckpointIO race is rerun too; any other failure of the oracle is not
    race = 'File ".../lightning/pytorch/plugins/io/async_plugin.py", line 82\nFileNotFoundError: [Errno 2]'
    assert oracle_flaked(1, race)
    assert not oracle_flaked(1, "Traceback ...\nFileNotFoundError: [Errno 2] data.csv")
    assert not oracle_flaked(1, "Traceback ...\nValueError: bad")
    assert not oracle_flaked(0, TEARDOWN_CRASH)
